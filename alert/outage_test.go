package alert

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ncclwatch/watchdog/incident"
)

// TestHealthFromStart: every configured notifier has its series at start, a notifier
// without its secret is 0 and makes Ready fail naming it and the variable to set, and the
// dispatcher's deliveries and failures reach the series.
func TestHealthFromStart(t *testing.T) {
	cfg := &Config{Notifiers: []NotifierConfig{{Name: "pd", Type: "pagerduty"}, {Name: "hook", Type: "webhook", URL: "http://127.0.0.1:1/x"}}}
	reg := prometheus.NewRegistry()
	noEnv := func(string) (string, bool) { return "", false }
	h, err := NewHealth(cfg, BuildOptions{LookupEnv: noEnv}, quietLogger(), reg)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 2+2+2+2 {
		t.Errorf("%d series at start (%v), want 8: built, last success, deliveries, failures of 2 notifiers", n, err)
	}
	if v := testutil.ToFloat64(h.built.WithLabelValues("pd", "pagerduty")); v != 0 {
		t.Errorf("pd built = %v without a routing key", v)
	}
	if v := testutil.ToFloat64(h.built.WithLabelValues("hook", "webhook")); v != 1 {
		t.Errorf("hook built = %v", v)
	}
	err = h.Ready()
	if err == nil || !strings.Contains(err.Error(), `alert notifier "pd" cannot be built`) || !strings.Contains(err.Error(), "PAGERDUTY_ROUTING_KEY") {
		t.Errorf("Ready: %v", err)
	}

	clock := clockwork.NewFakeClockAt(t0)
	var fail atomic.Bool
	fail.Store(true)
	flaky := &funcNotifier{name: "hook", notify: func(n *Notification) error {
		if fail.Load() {
			return errors.New("HTTP 503")
		}
		return nil
	}}
	d := runDispatcher(t, Options{Clock: clock, Health: h}, Target{Notifier: flaky, Settings: immediate})
	d.Submit(sampleMismatch())
	pump(t, clock, 100*time.Millisecond, func() bool { return testutil.ToFloat64(h.failures.WithLabelValues("hook")) >= 1 })
	fail.Store(false)
	pump(t, clock, 100*time.Millisecond, d.idle)
	if v := testutil.ToFloat64(h.delivered.WithLabelValues("hook")); v != 1 {
		t.Errorf("deliveries %v, want 1", v)
	}
	if v := testutil.ToFloat64(h.lastOK.WithLabelValues("hook")); v < float64(t0.Unix()) {
		t.Errorf("last success %v, want the fake clock's time", v)
	}
}

// runDispatcher starts a dispatcher with opts on the test etcd until the test ends.
func runDispatcher(t *testing.T, opts Options, targets ...Target) *Dispatcher {
	t.Helper()
	opts.Store, opts.Logger = NewEtcdStore(testEtcd(t), EtcdStoreOptions{}), quietLogger()
	d, err := NewDispatcher(opts, targets...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); d.Close() })
	if err := d.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// funcNotifier delivers each notification through a function.
type funcNotifier struct {
	name   string
	notify func(*Notification) error
	mu     sync.Mutex
	got    []string // "<event> <id>"
}

func (f *funcNotifier) Name() string { return f.name }

func (f *funcNotifier) Notify(_ context.Context, batch ...*Notification) (bool, error) {
	for _, n := range batch {
		if err := f.notify(n); err != nil {
			return true, err
		}
		f.mu.Lock()
		f.got = append(f.got, string(n.Event)+" "+n.Incident.ID)
		f.mu.Unlock()
		n.Delivered(&MessageRef{Channel: "C1", TS: "1.0"})
	}
	return false, nil
}

func (f *funcNotifier) events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// outageRig is an Outage over scripted etcd state and leadership, with a fake clock.
type outageRig struct {
	o       *Outage
	clock   *clockwork.FakeClock
	down    time.Time
	leading bool
}

func newOutageRig(t *testing.T, targets ...Target) *outageRig {
	t.Helper()
	r := &outageRig{clock: clockwork.NewFakeClockAt(t0), leading: true}
	r.o = &Outage{targets: targets, o: OutageOptions{Down: func() time.Time { return r.down }, Leading: func() bool { return r.leading },
		Replica: "det-0", Grace: 5 * time.Second, Every: time.Second, Logger: quietLogger(), Clock: r.clock}}
	return r
}

// run steps the outage once a (fake) second for d.
func (r *outageRig) run(d time.Duration) {
	for end := r.clock.Now().Add(d); r.clock.Now().Before(end); r.clock.Advance(time.Second) {
		r.o.step(context.Background())
	}
}

// TestOutageDeliveredOnceAndResolved: the leader loses etcd; after the grace one open goes
// to each notifier, directly, however long the outage lasts; when etcd returns one resolve
// follows, with the message reference of the open (Slack edits it).
func TestOutageDeliveredOnceAndResolved(t *testing.T) {
	var prevRef *MessageRef
	n := &funcNotifier{name: "chat", notify: func(n *Notification) error {
		if n.Event == EventResolve && n.Previous != nil {
			prevRef = n.Previous.Message
		}
		return nil
	}}
	r := newOutageRig(t, Target{Notifier: n})
	r.run(3 * time.Second)
	r.down = r.clock.Now()
	r.run(4 * time.Second)
	if got := n.events(); len(got) != 0 {
		t.Fatalf("delivered within the grace: %v", got)
	}
	r.leading = false // the election lease expires during the outage
	r.run(time.Minute)
	got := n.events()
	if len(got) != 1 || !strings.HasPrefix(got[0], "open etcd-outage-") {
		t.Fatalf("during the outage: %v, want one open", got)
	}
	r.down = time.Time{}
	r.run(10 * time.Second)
	got = n.events()
	if len(got) != 2 || got[1] != "resolve "+strings.TrimPrefix(got[0], "open ") {
		t.Fatalf("after etcd's return: %v, want the open then its resolve", got)
	}
	if prevRef == nil || prevRef.TS != "1.0" {
		t.Errorf("resolve without the open's message reference: %+v", prevRef)
	}
}

// TestOutageOnlyFromTheLeader: a standby that loses etcd says nothing (the leader does).
func TestOutageOnlyFromTheLeader(t *testing.T) {
	n := &funcNotifier{name: "chat", notify: func(*Notification) error { return nil }}
	r := newOutageRig(t, Target{Notifier: n})
	r.leading = false
	r.down = r.clock.Now()
	r.run(time.Minute)
	if got := n.events(); len(got) != 0 {
		t.Fatalf("a standby delivered %v", got)
	}
}

// TestOutageRetriesUntilDelivered: a notifier that fails at first gets the open once it
// works, still once.
func TestOutageRetriesUntilDelivered(t *testing.T) {
	calls := 0
	n := &funcNotifier{name: "pager", notify: func(*Notification) error {
		if calls++; calls <= 3 {
			return &RetryAfterError{Err: errors.New("HTTP 500"), After: time.Second}
		}
		return nil
	}}
	ok := &funcNotifier{name: "chat", notify: func(*Notification) error { return nil }}
	r := newOutageRig(t, Target{Notifier: n}, Target{Notifier: ok})
	r.down = r.clock.Now()
	r.run(2 * time.Minute)
	if got := n.events(); len(got) != 1 || calls != 4 {
		t.Errorf("failing notifier: %v after %d calls", got, calls)
	}
	if got := ok.events(); len(got) != 1 {
		t.Errorf("working notifier: %v, want one open", got)
	}
}

// TestDispatcherSkipsOutageInBand: with an Outage in charge, the dispatcher does not
// deliver the detector's own etcd incident a second time.
func TestDispatcherSkipsOutageInBand(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	n := &funcNotifier{name: "chat", notify: func(*Notification) error { return nil }}
	d := runDispatcher(t, Options{Clock: clock, OutageInBand: true}, Target{Notifier: n, Settings: immediate})
	etcd := incident.Incident{ID: "m-1", Key: incident.KeyEtcdUnreachable, Kind: incident.KindMonitoring, State: incident.StateOpen, Revision: 1}
	d.Submit(etcd)
	d.Submit(sampleMismatch())
	pump(t, clock, 100*time.Millisecond, d.idle)
	if got := n.events(); len(got) != 1 || got[0] != "open "+sampleMismatch().ID {
		t.Errorf("delivered %v, want the mismatch alone", got)
	}
}
