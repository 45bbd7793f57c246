package assemble

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/detect/live"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
)

// hookLog records what a webhook notifier delivered: "<event> <incident key> <id>".
type hookLog struct {
	mu  sync.Mutex
	got []string
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var inc incident.Incident
	_ = json.Unmarshal(b, &inc)
	h.mu.Lock()
	h.got = append(h.got, r.Header.Get(alert.WebhookEventHeader)+" "+inc.Key+" "+inc.ID)
	h.mu.Unlock()
}

// count counts deliveries of an event about the etcd outage.
func (h *hookLog) count(event string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, g := range h.got {
		if g[:len(event)+1] == event+" " && len(g) > len(event)+len(incident.KeyEtcdUnreachable) &&
			g[len(event)+1:len(event)+1+len(incident.KeyEtcdUnreachable)] == incident.KeyEtcdUnreachable {
			n++
		}
	}
	return n
}

func (h *hookLog) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// TestEtcdOutageDeliveredOnceAndResolved: the whole etcd goes away under a detector that
// leads, for longer than its election lease. The notifier hears of it once, through the
// path that needs no etcd, however long it lasts; once when etcd is back, as a resolve;
// and the detector's own record of the outage does not reach it a second time, nor stay
// open in the API.
func TestEtcdOutageDeliveredOnceAndResolved(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	srv, err := etcdembed.Start(t.Context(), etcdembed.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	hooks := &hookLog{}
	hook := httptest.NewServer(hooks)
	defer hook.Close()
	cfg := &alert.Config{Notifiers: []alert.NotifierConfig{{Name: "hook", Type: "webhook", URL: hook.URL}}}
	reg := prometheus.NewRegistry()
	health, err := alert.NewHealth(cfg, alert.BuildOptions{}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	ao := AlertOptions{Logger: log, Health: health, OutageInBand: true, OutageGrace: 2 * time.Second}
	d, err := Detector(cli, DetectorConfig{Interval: 200 * time.Millisecond, ResolveAfter: time.Second, LeaseTTL: 2 * time.Second,
		Logger: log, Registerer: reg, Ready: health.Ready, Alerts: Alerts(cfg, cli, ao)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }() // before srv.Close: a campaign cancelled without etcd waits for it
	if err := Outage(ctx, d, cfg, ao); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "detector leads and is ready", func() bool { return d.Leading() && d.Ready() == nil })

	srv.Stop()
	took := waitFor(t, 30*time.Second, "outage delivered", func() bool { return hooks.count("open") == 1 })
	t.Logf("outage delivered %.1f s after etcd stopped", took.Seconds())
	// A replica keeps its term through an outage (its writes are fenced, detect/live): it
	// leads again as soon as etcd returns. What must not happen is a second page.
	time.Sleep(6 * time.Second)
	if n, r := hooks.count("open"), hooks.count("resolve"); n != 1 || r != 0 {
		t.Fatalf("during the outage: %d opens, %d resolves: %v", n, r, hooks.all())
	}

	if err := srv.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	took = waitFor(t, 30*time.Second, "outage resolved", func() bool { return hooks.count("resolve") == 1 })
	t.Logf("resolve delivered %.1f s after etcd's return", took.Seconds())
	waitFor(t, 30*time.Second, "a leader again", d.Leading)
	time.Sleep(4 * time.Second) // the new term's dispatcher has delivered what it would
	if n, r := hooks.count("open"), hooks.count("resolve"); n != 1 || r != 1 {
		t.Fatalf("after the outage: %d opens, %d resolves, want 1 and 1: %v", n, r, hooks.all())
	}
	waitFor(t, 15*time.Second, "no open etcd incident in the API", func() bool {
		for _, inc := range d.Incidents("", "open") {
			if inc.Key == incident.KeyEtcdUnreachable {
				return false
			}
		}
		return true
	})
}

// TestOutageResolvedAfterItsReporterDies: two replicas; the whole etcd goes away, the
// leader reports it in-band and is killed before etcd returns. The replica that leads
// after etcd's return resolves that report (same incident id), from the outage record the
// dead leader stored in etcd when it took the lead: the notifier sees one open and its
// resolve. On the embedded etcd and Debian's 3.4, each with TLS, client certificates
// required and auth on (the replicas log in as ncclwatch-detector).
func TestOutageResolvedAfterItsReporterDies(t *testing.T) {
	for _, backend := range etcdtest.Backends {
		t.Run(backend, func(t *testing.T) { outageResolvedAfterItsReporterDies(t, backend) })
	}
}

func outageResolvedAfterItsReporterDies(t *testing.T, backend string) {
	log := slog.New(slog.DiscardHandler)
	// Started first, so that its cleanup runs after the replicas': a replica stopping
	// against a stopped etcd waits out its timeouts.
	e := etcdtest.StartSecured(t, backend)
	hooks := &hookLog{}
	hook := httptest.NewServer(hooks)
	t.Cleanup(hook.Close)
	cfg := &alert.Config{Notifiers: []alert.NotifierConfig{{Name: "hook", Type: "webhook", URL: hook.URL}}}
	type replica struct {
		d    *live.Detector
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(id string) *replica {
		cli := e.Client(t, e.Config(etcdroles.Detector))
		reg := prometheus.NewRegistry()
		health, err := alert.NewHealth(cfg, alert.BuildOptions{}, log, reg)
		if err != nil {
			t.Fatal(err)
		}
		ao := AlertOptions{Logger: log, Health: health, OutageInBand: true, OutageGrace: 2 * time.Second}
		d, err := Detector(cli, DetectorConfig{ID: id, Interval: 200 * time.Millisecond, ResolveAfter: time.Second, LeaseTTL: 2 * time.Second,
			Logger: log, Registerer: reg, Ready: health.Ready, Alerts: Alerts(cfg, cli, ao)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{d: d, stop: cancel, done: make(chan struct{})}
		go func() { defer close(r.done); d.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-r.done })
		if err := Outage(ctx, d, cfg, ao); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := start("a")
	waitFor(t, 15*time.Second, "a leads and armed its outage record", func() bool { return a.d.Leading() && a.d.OutageID() != "" })
	b := start("b")
	waitFor(t, 15*time.Second, "b is ready", func() bool { return b.d.Ready() == nil })

	e.Stop()
	waitFor(t, 30*time.Second, "outage delivered", func() bool { return hooks.count("open") == 1 })
	opened := hooks.all()[0]
	a.stop() // killed during the outage: it cannot resolve what it reported
	<-a.done
	e.Resume()
	took := waitFor(t, 30*time.Second, "the dead reporter's outage resolved", func() bool { return hooks.count("resolve") == 1 })
	t.Logf("resolved %.1f s after etcd's return, by the replica that leads after it", took.Seconds())
	time.Sleep(2 * time.Second)
	got := hooks.all()
	if hooks.count("open") != 1 || hooks.count("resolve") != 1 {
		t.Fatalf("notifier saw %v, want one open and one resolve", got)
	}
	var resolved string
	for _, g := range got {
		if strings.HasPrefix(g, "resolve ") {
			resolved = g
		}
	}
	if strings.TrimPrefix(opened, "open ") != strings.TrimPrefix(resolved, "resolve ") {
		t.Errorf("opened %q, resolved %q: not the same incident", opened, resolved)
	}
	if !b.d.Leading() {
		t.Error("b does not lead")
	}
}
