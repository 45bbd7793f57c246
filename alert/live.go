package alert

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"reflect"
	"sync"
	"time"
)

// DefaultRecheck is how often a notifier's secrets are read again (BuildOptions.Recheck):
// a secret mounted as a file may appear after the start (a Vault agent, a CSI driver) or be
// rotated, and must be picked up without a restart.
const DefaultRecheck = 5 * time.Second

// liveNotifier is one configured notifier, built on its own from its configuration and
// its secrets, and built again whenever they change: one that cannot be built fails its
// own deliveries (counted, retried) and never stops another notifier. It reads its secrets
// at most every recheck; reading is cheap (an environment variable, a small file), and a
// notifier is only replaced when what it read changed, so Slack keeps its message
// references and PagerDuty its client across checks.
type liveNotifier struct {
	// What never changes: the name and type it is known by, and its worker's settings (a
	// reload changes where it delivers and with which secret, not how it is queued).
	name, typ string
	settings  SettingsConfig

	nc      NotifierConfig // guarded by mu (reload)
	b       BuildOptions
	links   Links
	health  *Health
	log     *slog.Logger
	recheck time.Duration

	mu        sync.Mutex
	reloadErr string   // the last failure to reload the configuration, said once
	cur       Notifier // nil while it cannot be built
	err       error    // why not
	sum       [sha256.Size]byte
	checked   time.Time
	tried     bool
}

// notBuiltError is a delivery refused because the notifier cannot be built (its secret is
// missing): retried after the next read of the secrets.
type notBuiltError struct {
	name string
	err  error
}

func (e *notBuiltError) Error() string {
	return fmt.Sprintf("notifier %q cannot be built: %v", e.name, e.err)
}

func (e *notBuiltError) Unwrap() error { return e.err }

// liveNotifiers makes one live notifier per configured notifier, each built once now.
func (c *Config) liveNotifiers(b BuildOptions, health *Health, log *slog.Logger) []*liveNotifier {
	b = b.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	links := c.Links.Links()
	out := make([]*liveNotifier, len(c.Notifiers))
	for i, nc := range c.Notifiers {
		out[i] = &liveNotifier{name: nc.Name, typ: nc.Type, settings: nc.Settings, nc: nc, b: b, links: links, health: health, log: log, recheck: b.Recheck}
		out[i].refresh(true)
	}
	return out
}

// targets gives the live notifiers with their workers' settings, as Config.Targets would.
func (c *Config) liveTargets(ls []*liveNotifier) []Target {
	base := c.Defaults.apply(DefaultSettings())
	out := make([]Target, len(ls))
	for i, l := range ls {
		s := base
		if l.typ == "console" {
			s.GroupWait, s.RateEvery = 0, 0
		}
		out[i] = Target{Notifier: l, Settings: l.settings.apply(s)}
	}
	return out
}

func (l *liveNotifier) Name() string { return l.name }

// refresh reads the secrets again when recheck has passed since the last read (or when
// forced) and rebuilds the notifier when they changed; it returns the notifier or why
// there is none.
func (l *liveNotifier) refresh(force bool) (Notifier, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.tried && !force && now.Sub(l.checked) < l.recheck {
		return l.cur, l.err
	}
	l.checked = now
	l.reload()
	h := sha256.New()
	fmt.Fprintf(h, "config %+v\n", l.nc)
	n, err := l.nc.build(fingerprinting(l.b, h), l.links)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	first := !l.tried
	l.tried = true
	switch {
	case err != nil:
		if first || l.err == nil || l.err.Error() != err.Error() {
			l.log.Error("alert notifier cannot be built: its deliveries fail (counted, retried) until its secret is there; the other notifiers are not affected",
				"notifier", l.nc.Name, "type", l.nc.Type, "err", err)
		}
		l.cur, l.err = nil, err
	case l.cur != nil && sum == l.sum:
		// Unchanged: keep the notifier (and what it remembers).
	default:
		if !first {
			l.log.Info("alert notifier built from its current secrets and configuration", "notifier", l.nc.Name, "type", l.nc.Type)
		}
		l.cur, l.err, l.sum = n, nil, sum
	}
	l.health.setBuilt(l.nc.Name, l.nc.Type, l.err)
	return l.cur, l.err
}

// reload takes this notifier's section from the configuration file again (BuildOptions.Reload).
// Call with l.mu held.
func (l *liveNotifier) reload() {
	if l.b.Reload == nil {
		return
	}
	c, err := l.b.Reload()
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		if err.Error() != l.reloadErr {
			l.log.Error("alert configuration cannot be read again: the notifier keeps its last good configuration",
				"notifier", l.nc.Name, "err", err)
		}
		l.reloadErr = err.Error()
		return
	}
	l.reloadErr = ""
	for _, nc := range c.Notifiers {
		if nc.Name == l.name && nc.Type == l.typ {
			if !reflect.DeepEqual(nc, l.nc) {
				l.log.Info("alert notifier configuration changed: rebuilding it", "notifier", l.nc.Name)
			}
			l.nc, l.links = nc, c.Links.Links()
			return
		}
	}
}

// Notify delivers through the notifier built from the current secrets.
func (l *liveNotifier) Notify(ctx context.Context, batch ...*Notification) (bool, error) {
	n, err := l.refresh(false)
	if err != nil {
		return true, &RetryAfterError{After: l.recheck, Err: &notBuiltError{name: l.name, err: err}}
	}
	return n.Notify(ctx, batch...)
}

// Accepts asks the built notifier; one not built yet takes every event (its type decides
// once it is built).
func (l *liveNotifier) Accepts(ev Event) bool {
	l.mu.Lock()
	n := l.cur
	l.mu.Unlock()
	if f, ok := n.(EventFilter); ok {
		return f.Accepts(ev)
	}
	return true
}

// isNotBuilt says whether a delivery failed for want of a secret.
func isNotBuilt(err error) bool {
	var nb *notBuiltError
	return errors.As(err, &nb)
}

// fingerprinting wraps b's reads so that everything a build reads (names, values, errors)
// goes into h: two builds that read the same are the same notifier.
func fingerprinting(b BuildOptions, h hash.Hash) BuildOptions {
	lookup, read := b.LookupEnv, b.ReadFile
	b.LookupEnv = func(name string) (string, bool) {
		v, ok := lookup(name)
		fmt.Fprintf(h, "env %q %q %t\n", name, v, ok)
		return v, ok
	}
	b.ReadFile = func(path string) ([]byte, error) {
		data, err := read(path)
		fmt.Fprintf(h, "file %q %d %v\n", path, len(data), err)
		h.Write(data)
		return data, err
	}
	return b
}
