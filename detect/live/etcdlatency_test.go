package live

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
)

// TestEtcdSlowSpell: with the detector's defaults (500 ms, judged over 10 s windows, for
// 30 s) and a round trip every second, on a fake clock: when, if ever, etcd is called slow.
// One slow round trip, or a slow burst shorter than the spell, is not; round trips that
// stop (etcd unreachable) neither start nor end a spell.
func TestEtcdSlowSpell(t *testing.T) {
	const threshold, spell = 500 * time.Millisecond, 30 * time.Second
	fast, slow := 5*time.Millisecond, 800*time.Millisecond
	cases := []struct {
		name string
		took func(s int) (time.Duration, bool) // the round trip at second s (false: none)
		want int                               // the second the incident opens (-1: never)
	}{
		{"fast", func(int) (time.Duration, bool) { return fast, true }, -1},
		{"one slow round trip", func(s int) (time.Duration, bool) {
			return map[bool]time.Duration{true: slow, false: fast}[s == 20], true
		}, -1},
		{"a slow burst of 29 s", func(s int) (time.Duration, bool) {
			return map[bool]time.Duration{true: slow, false: fast}[s >= 20 && s < 50], true
		}, -1},
		{"slow from 20 s", func(s int) (time.Duration, bool) {
			return map[bool]time.Duration{true: slow, false: fast}[s >= 20], true
		}, 50},
		// One slow round trip in five keeps every window's p99 above (fewer than 100
		// round trips: the p99 is the slowest).
		{"one slow in five", func(s int) (time.Duration, bool) {
			return map[bool]time.Duration{true: slow, false: fast}[s%5 == 0], true
		}, 30},
		// Slow from 20 s, none from 30 s to 60 s (etcd unreachable): too few round trips
		// leave the spell as it was, and the next window judged (three round trips)
		// continues it.
		{"slow, then unreachable", func(s int) (time.Duration, bool) {
			return map[bool]time.Duration{true: slow, false: fast}[s >= 20], s < 30 || s >= 60
		}, 62},
	}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e etcdRoundTrips
			got := -1
			for s := 0; s <= 120 && got < 0; s++ {
				now := t0.Add(time.Duration(s) * time.Second)
				if took, ok := c.took(s); ok {
					e.observe(now, took)
				}
				if v := e.judge(now, spell/3, threshold); v.slowFor >= spell {
					got = s
					if v.p99 != slow || v.since.After(now.Add(-spell)) {
						t.Errorf("verdict %+v: want p99 %s, since %s or before", v, slow, now.Add(-spell))
					}
				}
			}
			if got != c.want {
				t.Errorf("etcd called slow at %d s, want %d", got, c.want)
			}
		})
	}
}

// TestEtcdRoundTripsBounded: the window is judged on the newest round trips only, however
// many came.
func TestEtcdRoundTripsBounded(t *testing.T) {
	var e etcdRoundTrips
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 10 * etcdRoundTripsKept {
		took := time.Second
		if i >= 9*etcdRoundTripsKept {
			took = time.Millisecond
		}
		e.observe(t0.Add(time.Duration(i)*time.Millisecond), took)
	}
	v := e.judge(t0.Add(10*etcdRoundTripsKept*time.Millisecond), time.Hour, 500*time.Millisecond)
	if v.count != etcdRoundTripsKept || v.p99 != time.Millisecond || !v.since.IsZero() {
		t.Errorf("verdict %+v: want %d round trips of 1 ms, not slow", v, etcdRoundTripsKept)
	}
}

// slowKV is the detector's etcd client slowed where it calls etcd: every read and
// transaction waits delay first, then goes to the real etcd.
type slowKV struct {
	clientv3.KV
	delay *atomic.Int64 // nanoseconds
}

func (k slowKV) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(k.delay.Load())):
		return nil
	}
}

func (k slowKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if err := k.wait(ctx); err != nil {
		return nil, err
	}
	return k.KV.Get(ctx, key, opts...)
}

func (k slowKV) Txn(ctx context.Context) clientv3.Txn {
	return slowTxn{Txn: k.KV.Txn(ctx), ctx: ctx, kv: k}
}

type slowTxn struct {
	clientv3.Txn
	ctx context.Context
	kv  slowKV
}

func (t slowTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t slowTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t slowTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t slowTxn) Commit() (*clientv3.TxnResponse, error) {
	if err := t.kv.wait(t.ctx); err != nil {
		return nil, err
	}
	return t.Txn.Commit()
}

// monitoringAlerts records the monitoring job's incident changes the detector submits.
type monitoringAlerts struct {
	mu   sync.Mutex
	seen []incident.Incident
}

func (a *monitoringAlerts) Start(context.Context, []incident.Incident) error { return nil }
func (a *monitoringAlerts) Close()                                           {}
func (a *monitoringAlerts) Submit(inc incident.Incident) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, inc)
}

// first returns the first submitted change of the incident with key in state.
func (a *monitoringAlerts) first(key string, state incident.State) (incident.Incident, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, inc := range a.seen {
		if inc.Key == key && inc.State == state {
			return inc, true
		}
	}
	return incident.Incident{}, false
}

// TestEtcdSlowIsAMonitoringWarning: the real embedded etcd, answering the detector 250 ms
// late (its client slowed where the detector calls it), with the threshold at 100 ms for
// 3 s (and probes that wait longer than that: slow, not unreachable). The round-trip metric and p99 gauge show it; after 3 s of slow windows, not before,
// the leader opens one monitoring incident, a warning that etcd is slow with its p99, and
// nothing else; with etcd fast again it resolves.
func TestEtcdSlowIsAMonitoringWarning(t *testing.T) {
	srv, _ := etcdtest.Start(t, etcdembed.Options{Dir: t.TempDir()})
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var delay atomic.Int64
	cli.KV = slowKV{KV: cli.KV, delay: &delay}
	alerts := &monitoringAlerts{}
	reg := prometheus.NewRegistry()
	const threshold, spell, slowBy = 100 * time.Millisecond, 3 * time.Second, 250 * time.Millisecond
	d, err := New(Options{Client: cli, Rules: detect.DefaultConfig(), Interval: 100 * time.Millisecond, ProbeEvery: 400 * time.Millisecond,
		ResolveAfter: 500 * time.Millisecond, LeaseTTL: 3 * time.Second, EtcdSlow: threshold, EtcdSlowFor: spell,
		Logger: slog.New(slog.DiscardHandler), Registerer: reg, NewAlerts: func(prometheus.Registerer) (Alerts, error) { return alerts, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, 10*time.Second, "leading", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.leader
	})

	delay.Store(int64(slowBy))
	slowFrom := time.Now()
	eventually(t, 20*time.Second, "the etcd-slow incident opens", func() bool {
		_, ok := alerts.first(detect.KeyEtcdSlow, incident.StateOpen)
		return ok
	})
	if took := time.Since(slowFrom); took < spell {
		t.Errorf("etcd called slow %s after it became slow: not a spell of %s", took.Round(time.Millisecond), spell)
	}
	inc, _ := alerts.first(detect.KeyEtcdSlow, incident.StateOpen)
	if inc.Kind != incident.KindMonitoring || inc.Severity != incident.MonitoringSeverity || inc.Job != monitoringJob {
		t.Errorf("etcd-slow incident %s [%s] of job %s: want a monitoring warning of %s", inc.Kind, inc.Severity, inc.Job, monitoringJob)
	}
	if !strings.Contains(inc.Summary, "etcd is slow, p99 ") || !strings.Contains(inc.Summary, "no rank is blamed") {
		t.Errorf("summary %q", inc.Summary)
	}
	if p := testutil.ToFloat64(d.m.etcdP99); p < slowBy.Seconds() {
		t.Errorf("ncclwatch_detector_etcd_p99_seconds %v, want at least %v", p, slowBy.Seconds())
	}
	if n := testutil.CollectAndCount(d.m.etcdRequest); n != 4 {
		t.Errorf("%d series of ncclwatch_detector_etcd_request_seconds, want one per op (4)", n)
	}

	delay.Store(0)
	eventually(t, 20*time.Second, "the etcd-slow incident resolves", func() bool {
		_, ok := alerts.first(detect.KeyEtcdSlow, incident.StateResolved)
		return ok
	})
	alerts.mu.Lock()
	defer alerts.mu.Unlock()
	for _, inc := range alerts.seen {
		if inc.Severity == incident.SeverityCritical || (inc.Key != detect.KeyEtcdSlow && inc.State == incident.StateOpen && !strings.HasPrefix(inc.Key, "monitoring:late:")) {
			t.Errorf("besides etcd being slow: %s %s [%s] %s", inc.Key, inc.Kind, inc.Severity, inc.Summary)
		}
	}
}
