// Package seal signs the incidents the detector stores in etcd and refuses, on reading,
// those it did not sign. Anyone who can write under the watchdog's etcd prefix (a leaked
// credential, a sidecar role that may write under every job) could otherwise plant an
// open incident that a standby pages when it takes over. A seal is an HMAC-SHA256 of the
// incident's key and JSON, with a key only the detectors hold (a file, or one kept in etcd
// where only the detector's role may read it: internal/incidentkey).
//
// The stored value is the incident's JSON with the seal as its first member:
//
//	{"seal":"hmac-sha256:<base64url>","id":"inc-...",...}
//
// The MAC covers the exact bytes after the seal member, so a reader of any version checks
// what a writer of any other version wrote, whatever fields each knows.
package seal

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/ncclwatch/watchdog/incident"
)

// MinKeyBytes is the shortest key accepted.
const MinKeyBytes = 32

var (
	// ErrUnsealed: the value carries no seal (written by someone else, or by a detector
	// from before seals).
	ErrUnsealed = errors.New("incident has no seal: not written by a detector")
	// ErrBadSeal: the seal does not match (forged, changed, or moved to another key).
	ErrBadSeal = errors.New("incident seal does not match: forged or changed")
	// ErrNoKey: the key could not be had yet (etcd unreachable); the caller retries.
	ErrNoKey = errors.New("incident key not available yet")
)

const (
	prefix = `{"seal":"hmac-sha256:`
	domain = "ncclwatch-incident-v1\x00"
)

// Keys returns the detectors' keys: the first signs, every one verifies (a rotation
// adds the new key first and removes the old one once every incident was rewritten).
type Keys func(ctx context.Context) ([][]byte, error)

// Sealer seals and opens incidents with the keys it gets once from a Keys.
type Sealer struct {
	source Keys

	mu   sync.Mutex
	keys [][]byte
}

// New returns a sealer; keys are fetched on first use, until a fetch works.
func New(keys Keys) *Sealer { return &Sealer{source: keys} }

// WithKeys returns a sealer with fixed keys (tests, key files).
func WithKeys(keys ...[]byte) (*Sealer, error) {
	if err := checkKeys(keys); err != nil {
		return nil, err
	}
	return &Sealer{keys: keys}, nil
}

func checkKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("seal: no key")
	}
	for i, k := range keys {
		if len(k) < MinKeyBytes {
			return fmt.Errorf("seal: key %d has %d bytes, want at least %d", i+1, len(k), MinKeyBytes)
		}
	}
	return nil
}

func (s *Sealer) getKeys(ctx context.Context) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys != nil {
		return s.keys, nil
	}
	keys, err := s.source(ctx)
	if err == nil {
		err = checkKeys(keys)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoKey, err)
	}
	s.keys = keys
	return keys, nil
}

// Seal returns what to store at key for inc: inc bounded (incident.Bound), as JSON, with
// its seal first.
func (s *Sealer) Seal(ctx context.Context, key string, inc incident.Incident) ([]byte, error) {
	keys, err := s.getKeys(ctx)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(incident.Bound(inc))
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	rest := body[1:] // after "{"
	mac := sum(keys[0], key, rest)
	out := make([]byte, 0, len(prefix)+64+len(rest))
	out = append(out, prefix...)
	out = base64.RawURLEncoding.AppendEncode(out, mac)
	out = append(out, '"')
	if len(rest) > 1 { // not "}": other members follow
		out = append(out, ',')
	}
	return append(out, rest...), nil
}

// Open checks the seal of a value read at key and decodes the incident.
func (s *Sealer) Open(ctx context.Context, key string, value []byte) (incident.Incident, error) {
	var inc incident.Incident
	rest, ok := bytes.CutPrefix(value, []byte(prefix))
	if !ok {
		return inc, ErrUnsealed
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return inc, ErrBadSeal
	}
	mac, err := base64.RawURLEncoding.DecodeString(string(rest[:end]))
	if err != nil {
		return inc, ErrBadSeal
	}
	rest = rest[end+1:]
	// As Seal writes it: a comma and the other members, or the closing brace alone.
	if r, ok := bytes.CutPrefix(rest, []byte(",")); ok && len(r) > 1 {
		rest = r
	} else if !bytes.Equal(rest, []byte("}")) {
		return inc, ErrBadSeal
	}
	keys, err := s.getKeys(ctx)
	if err != nil {
		return inc, err
	}
	valid := false
	for _, k := range keys {
		if hmac.Equal(mac, sum(k, key, rest)) {
			valid = true
			break
		}
	}
	if !valid {
		return inc, ErrBadSeal
	}
	if err := json.Unmarshal(append([]byte("{"), rest...), &inc); err != nil {
		return inc, fmt.Errorf("sealed incident: %w", err)
	}
	return inc, nil
}

func sum(k []byte, key string, rest []byte) []byte {
	h := hmac.New(sha256.New, k)
	h.Write([]byte(domain))
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write(rest)
	return h.Sum(nil)
}

// FileKeys reads the keys from a file, one a line (blank lines and # comments skipped),
// e.g. made with `openssl rand -base64 48`: the first seals, every one opens.
func FileKeys(path string) Keys {
	return func(context.Context) ([][]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("incident key file: %w", err)
		}
		var keys [][]byte
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				keys = append(keys, []byte(l))
			}
		}
		if err := checkKeys(keys); err != nil {
			return nil, fmt.Errorf("incident key file %s: %w", path, err)
		}
		return keys, nil
	}
}
