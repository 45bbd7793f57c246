package seal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

var (
	keyA = bytes.Repeat([]byte("a"), 32)
	keyB = bytes.Repeat([]byte("b"), 48)
	t0   = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

func sample() incident.Incident {
	return incident.Incident{ID: "inc-1", Key: "rank:n1:7", Kind: incident.KindHang, State: incident.StateOpen,
		Severity: incident.SeverityCritical, Job: "j", Culprits: []incident.Culprit{{Rank: 3, Host: "n1"}},
		Summary: "rank 3 stopped", Evidence: []string{"e"}, OpenedAt: t0, LastSeen: t0, Revision: 2}
}

func mustSealer(t *testing.T, keys ...[]byte) *Sealer {
	t.Helper()
	s, err := WithKeys(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealRoundTrip(t *testing.T) {
	s := mustSealer(t, keyA)
	ctx := context.Background()
	b, err := s.Seal(ctx, "/k/inc-1", sample())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(`{"seal":"hmac-sha256:`)) || !json.Valid(b) {
		t.Fatalf("stored value %s", b)
	}
	got, err := s.Open(ctx, "/k/inc-1", b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Errorf("round trip:\n%+v\n%+v", got, sample())
	}
	// A plain JSON reader (the API, etcdctl) reads the incident too.
	var plain incident.Incident
	if err := json.Unmarshal(b, &plain); err != nil || plain.ID != "inc-1" {
		t.Errorf("plain decode: %v %+v", err, plain)
	}
}

// TestSealRefusesForgeries: what a writer without the key can store is refused, each with
// the reason.
func TestSealRefusesForgeries(t *testing.T) {
	s := mustSealer(t, keyA)
	ctx := context.Background()
	good, err := s.Seal(ctx, "/k/inc-1", sample())
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := json.Marshal(sample())
	other, _ := mustSealer(t, keyB).Seal(ctx, "/k/inc-1", sample())
	changed := bytes.Replace(good, []byte(`"state":"open"`), []byte(`"state":"resolved"`), 1)
	for _, c := range []struct {
		name  string
		key   string
		value []byte
		want  error
	}{
		{"plain JSON", "/k/inc-1", plain, ErrUnsealed},
		{"sealed with another key", "/k/inc-1", other, ErrBadSeal},
		{"a field changed", "/k/inc-1", changed, ErrBadSeal},
		{"moved to another key", "/k/inc-2", good, ErrBadSeal},
		{"seal not base64", "/k/inc-1", []byte(`{"seal":"hmac-sha256:!!","id":"x"}`), ErrBadSeal},
		{"seal unterminated", "/k/inc-1", []byte(`{"seal":"hmac-sha256:abc`), ErrBadSeal},
		{"empty", "/k/inc-1", nil, ErrUnsealed},
	} {
		if _, err := s.Open(ctx, c.key, c.value); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestSealRotation: a sealer with a new key first still opens what the old key sealed.
func TestSealRotation(t *testing.T) {
	ctx := context.Background()
	old, _ := mustSealer(t, keyA).Seal(ctx, "/k", sample())
	rotated := mustSealer(t, keyB, keyA)
	if _, err := rotated.Open(ctx, "/k", old); err != nil {
		t.Fatalf("old seal after rotation: %v", err)
	}
	fresh, _ := rotated.Seal(ctx, "/k", sample())
	if _, err := mustSealer(t, keyA).Open(ctx, "/k", fresh); !errors.Is(err, ErrBadSeal) {
		t.Errorf("the retired key alone opened a new seal: %v", err)
	}
}

// TestSealBoundsAndFits: what is stored is the bounded incident, under 64 KB at 100k ranks.
func TestSealBoundsAndFits(t *testing.T) {
	inc := sample()
	inc.Ops = map[string]incident.Op{}
	for r := range 100000 {
		inc.Ops[strconv.Itoa(r)] = incident.Op{Op: "AllReduce", Count: uint64(1 + r%3)}
		inc.Culprits = append(inc.Culprits, incident.Culprit{Rank: r, Host: "gpu-node-" + strconv.Itoa(r/8)})
	}
	b, err := mustSealer(t, keyA).Seal(context.Background(), "/k", inc)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 64<<10 {
		t.Errorf("sealed value of %d bytes > 64 KB", len(b))
	}
	got, err := mustSealer(t, keyA).Open(context.Background(), "/k", b)
	if err != nil || len(got.OpGroups) != 3 || got.Ops != nil {
		t.Errorf("opened %v: %d groups, %d ops", err, len(got.OpGroups), len(got.Ops))
	}
}

func TestKeysFetchedUntilAvailable(t *testing.T) {
	calls := 0
	s := New(func(context.Context) ([][]byte, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("etcd down")
		}
		return [][]byte{keyA}, nil
	})
	ctx := context.Background()
	if _, err := s.Seal(ctx, "/k", sample()); !errors.Is(err, ErrNoKey) {
		t.Fatalf("first seal: %v, want ErrNoKey", err)
	}
	b, err := s.Seal(ctx, "/k", sample())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, "/k", b); err != nil || calls != 2 {
		t.Errorf("open: %v after %d fetches", err, calls)
	}
}

func TestFileKeys(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "keys")
	os.WriteFile(good, []byte("# rotated 2025-03\n"+string(keyB)+"\n\n"+string(keyA)+"\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("tooshort\n"), 0o600)
	keys, err := FileKeys(good)(context.Background())
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], keyB) {
		t.Errorf("keys %q, %v", keys, err)
	}
	if _, err := FileKeys(short)(context.Background()); err == nil {
		t.Error("a short key was accepted")
	}
	if _, err := FileKeys(filepath.Join(dir, "missing"))(context.Background()); err == nil {
		t.Error("a missing file was accepted")
	}
}

func FuzzOpen(f *testing.F) {
	s, _ := WithKeys(keyA)
	good, _ := s.Seal(context.Background(), "/k", sample())
	f.Add(good)
	f.Add([]byte(`{"seal":"hmac-sha256:","id":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		inc, err := s.Open(context.Background(), "/k", b)
		if err == nil && !bytes.Equal(b, good) {
			// Only what the key sealed opens; a different value may only be the same
			// members re-encoded identically, which Seal never produces twice differently.
			again, _ := s.Seal(context.Background(), "/k", inc)
			if !bytes.Equal(again, b) {
				t.Fatalf("opened a value the key did not seal: %q", b)
			}
		}
	})
}
