package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/syncbuf"
	"github.com/ncclwatch/watchdog/snapshot"
)

// immediate sends as soon as something is queued: tests that are not about grouping.
var immediate = Settings{}

func startDispatcher(t *testing.T, c *clientv3.Client, clock clockwork.Clock, routes []Route, known []incident.Incident, targets ...Target) (*Dispatcher, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	d, err := NewDispatcher(Options{
		Store:      NewEtcdStore(c, EtcdStoreOptions{}),
		Routes:     routes,
		Registerer: reg,
		Logger:     quietLogger(),
		Clock:      clock,
	}, targets...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		d.Close()
	})
	if err := d.Start(ctx, known); err != nil {
		t.Fatal(err)
	}
	return d, reg
}

// drain advances the fake clock until the dispatcher has delivered everything.
func drain(t *testing.T, d *Dispatcher, clock *clockwork.FakeClock) {
	t.Helper()
	pump(t, clock, 100*time.Millisecond, d.idle)
}

func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := etcdconn.New(etcdconn.Config{Endpoints: etcdServer.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pdEvents counts the PagerDuty events of an action, per dedup key.
func pdEvents(rec *recorder, action string) map[string]int {
	out := map[string]int{}
	for _, r := range rec.requests() {
		var e struct {
			Action   string `json:"event_action"`
			DedupKey string `json:"dedup_key"`
		}
		_ = json.Unmarshal(r.Body, &e)
		if e.Action == action {
			out[e.DedupKey]++
		}
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func TestBurstIsOneSlackMessageAndOnePagePerIncident(t *testing.T) {
	c := testEtcd(t)
	clock := clockwork.NewFakeClockAt(t0)
	slackRec := newRecorder(t, slackWebhook)
	pdRec := newRecorder(t, pagerDutyAPI)
	sl, _ := NewSlackWebhook(slackRec.URL+"/hook", SlackOptions{Links: testLinks})
	pd, _ := NewPagerDuty(pdRec.URL, testRoutingKey, PagerDutyOptions{Links: testLinks})
	grouped := DefaultSettings()
	grouped.GroupWait = time.Second
	d, reg := startDispatcher(t, c, clock, nil, nil,
		Target{Notifier: sl, Settings: grouped},
		Target{Notifier: pd, Settings: Settings{GroupWait: time.Second}})

	incs := burst(500)
	for _, inc := range incs {
		d.Submit(inc) // all within one (fake) instant
	}
	drain(t, d, clock)

	if n := slackRec.count(); n != 1 {
		t.Fatalf("%d Slack messages for a burst of 500, want 1", n)
	}
	body := string(slackRec.requests()[0].Body)
	for _, want := range []string{"[CRITICAL] 500 new incidents", "Hang 100", "…and 470 more incidents"} {
		if !strings.Contains(body, want) {
			t.Errorf("Slack message lacks %q", want)
		}
	}
	triggers := pdEvents(pdRec, "trigger")
	if len(triggers) != 500 || total(triggers) != 500 {
		t.Errorf("%d triggers for %d incidents, want one per incident", total(triggers), len(triggers))
	}
	m := d.workers[1].m
	if got := testutil.ToFloat64(m.sent.WithLabelValues("pagerduty", "hang")); got != 100 {
		t.Errorf("sent{pagerduty,hang} = %v, want 100", got)
	}
	if got := testutil.ToFloat64(m.sent.WithLabelValues("slack", "link")); got != 400 {
		t.Errorf("sent{slack,link} = %v, want 400", got)
	}
	if n, err := testutil.GatherAndCount(reg, "ncclwatch_alert_delivery_latency_seconds"); err != nil || n != 2 {
		t.Errorf("latency histograms: %d, %v", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
	// Every delivery is in etcd.
	ds, err := NewEtcdStore(c, EtcdStoreOptions{}).List(context.Background(), "pagerduty")
	if err != nil || len(ds) != 500 {
		t.Errorf("%d pagerduty deliveries stored (%v), want 500", len(ds), err)
	}
}

func TestRevisionsOfOneRootCausePageOnce(t *testing.T) {
	c := testEtcd(t)
	clock := clockwork.NewFakeClockAt(t0)
	pdRec := newRecorder(t, pagerDutyAPI)
	slackRec := newRecorder(t, slackAPI)
	slackRec.token = "xoxb-test"
	pd, _ := NewPagerDuty(pdRec.URL, testRoutingKey, PagerDutyOptions{})
	sl, _ := NewSlackBot(slackRec.URL+"/api/", slackRec.token, "C1", SlackOptions{})
	settings := DefaultSettings()
	d, _ := startDispatcher(t, c, clock, nil, nil, Target{Notifier: pd, Settings: settings}, Target{Notifier: sl, Settings: settings})

	inc := sampleMismatch()
	for rev := 1; rev <= 500; rev++ {
		inc.Revision, inc.Victims = rev, rev
		d.Submit(inc)
		if rev%50 == 0 {
			clock.Advance(700 * time.Millisecond) // revisions spread over a few seconds
			time.Sleep(5 * time.Millisecond)
		}
	}
	drain(t, d, clock)
	if got := total(pdEvents(pdRec, "trigger")); got != 1 {
		t.Errorf("%d PagerDuty triggers for 500 revisions of one incident, want 1", got)
	}
	posts := slackRec.requests()
	t.Logf("500 revisions: %d Slack calls, %d PagerDuty calls", len(posts), pdRec.count())
	if len(posts) < 2 || len(posts) > 8 {
		t.Errorf("%d Slack calls for 500 revisions: want one post and a few coalesced thread updates", len(posts))
	}
	last := posts[len(posts)-1]
	if string(last.Form["thread_ts"]) != `"1700000000.000100"` || !strings.Contains(string(last.Form["blocks"]), "revision 500") {
		t.Errorf("last update is not revision 500 in the thread: %s", last.Form["blocks"])
	}
}

func TestRestartAndFailoverNeitherRepeatNorMissResolve(t *testing.T) {
	cA := testEtcd(t)
	clock := clockwork.NewFakeClockAt(t0)
	pdRec := newRecorder(t, pagerDutyAPI)
	slackRec := newRecorder(t, slackAPI)
	slackRec.token = "xoxb-test"
	targets := func() []Target {
		pd, _ := NewPagerDuty(pdRec.URL, testRoutingKey, PagerDutyOptions{})
		sl, _ := NewSlackBot(slackRec.URL+"/api/", slackRec.token, "#gpu", SlackOptions{})
		return []Target{{Notifier: pd, Settings: immediate}, {Notifier: sl, Settings: immediate}}
	}

	// Replica A is the leader: it pages and posts, then sees revisions.
	a, _ := startDispatcher(t, cA, clock, nil, nil, targets()...)
	inc := sampleMismatch()
	a.Submit(inc)
	drain(t, a, clock)
	for rev := 2; rev <= 20; rev++ {
		inc.Revision = rev
		a.Submit(inc)
	}
	drain(t, a, clock)
	a.Close() // leadership lost
	slackCalls := slackRec.count()

	// Replica B takes over (its own etcd client) and is handed every known incident.
	b, _ := startDispatcher(t, newClient(t), clock, nil, []incident.Incident{inc}, targets()...)
	drain(t, b, clock)
	if got := total(pdEvents(pdRec, "trigger")); got != 1 {
		t.Fatalf("%d triggers after failover, want 1", got)
	}
	if slackRec.count() != slackCalls {
		t.Fatalf("failover re-posted to Slack: %d calls, had %d", slackRec.count(), slackCalls)
	}
	res := resolved(inc, 252*time.Second)
	b.Submit(res)
	drain(t, b, clock)
	b.Close()

	// A restart after the resolve, handed the recently resolved incident: nothing more.
	c, _ := startDispatcher(t, newClient(t), clock, nil, []incident.Incident{res}, targets()...)
	c.Submit(res)
	drain(t, c, clock)

	if got := pdEvents(pdRec, "resolve"); got[inc.ID] != 1 || len(got) != 1 {
		t.Errorf("resolves %v, want exactly one for %s", got, inc.ID)
	}
	if got := total(pdEvents(pdRec, "trigger")); got != 1 {
		t.Errorf("%d triggers, want 1", got)
	}
	// The resolve edited the original message, found through etcd by replica B.
	var edits []recordedRequest
	for _, r := range slackRec.requests() {
		if r.Path == "/api/chat.update" {
			edits = append(edits, r)
		}
	}
	if len(edits) != 1 || string(edits[0].Form["ts"]) != `"1700000000.000100"` || string(edits[0].Form["channel"]) != `"C1"` {
		t.Fatalf("want one chat.update of C1/1700000000.000100, got %+v", edits)
	}
	if !strings.Contains(string(edits[0].Form["blocks"]), "[RESOLVED]") {
		t.Error("edited message does not say resolved")
	}
}

func TestSlackRetryAfterHonoured(t *testing.T) {
	c := testEtcd(t)
	clock := clockwork.NewFakeClockAt(t0)
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		slackWebhook(w, r, n)
	})
	rec.clock = clock // request times on the test's clock
	sl, _ := NewSlackWebhook(rec.URL+"/hook", SlackOptions{})
	d, _ := startDispatcher(t, c, clock, nil, nil, Target{Notifier: sl, Settings: immediate})

	incs := burst(2)
	d.Submit(incs[0])
	pump(t, clock, time.Millisecond, func() bool { return rec.count() == 1 })
	d.Submit(incs[1]) // arrives while rate limited: waits too
	// Small steps until the retry: the fake clock runs ahead of a dispatcher slowed by a busy
	// machine by at most a few steps, so the gap measures the dispatcher, not the pump.
	pump(t, clock, 10*time.Millisecond, func() bool { return rec.count() == 2 })
	drain(t, d, clock)

	reqs := rec.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want the 429 and one retry", len(reqs))
	}
	t.Logf("retry %s after the 429", reqs[1].at.Sub(reqs[0].at))
	if gap := reqs[1].at.Sub(reqs[0].at); gap < time.Second || gap > 1500*time.Millisecond {
		t.Errorf("retry %s after the 429, want Retry-After: 1 honoured (≥ 1 s, promptly)", gap)
	}
	if !strings.Contains(string(reqs[1].Body), "2 new incidents") {
		t.Errorf("the retry should carry both incidents: %s", reqs[1].Body)
	}
	if got := testutil.ToFloat64(d.workers[0].m.retries.WithLabelValues("slack")); got != 1 {
		t.Errorf("retries = %v", got)
	}
}

func TestHungNotifierDelaysNobody(t *testing.T) {
	c := testEtcd(t)
	clock := clockwork.NewFakeClockAt(t0)
	release := make(chan struct{})
	hung := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server closes
	pdRec := newRecorder(t, pagerDutyAPI)
	sl, _ := NewSlackWebhook(hung.URL+"/hook", SlackOptions{})
	pd, _ := NewPagerDuty(pdRec.URL, testRoutingKey, PagerDutyOptions{})
	d, _ := startDispatcher(t, c, clock, nil, nil,
		Target{Notifier: sl, Settings: Settings{QueueSize: 10}},
		Target{Notifier: pd, Settings: immediate})

	first := sampleMismatch()
	d.Submit(first)
	waitReal(t, func() bool { return hung.count() == 1 && total(pdEvents(pdRec, "trigger")) == 1 })

	// Slack is stuck in its request; the detector keeps submitting without blocking.
	start := time.Now()
	for _, inc := range burst(1000) {
		d.Submit(inc)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("1000 submissions took %s with a hung notifier", el)
	}
	waitReal(t, func() bool { return total(pdEvents(pdRec, "trigger")) == 1001 })
	if got := testutil.ToFloat64(d.workers[0].m.dropped.WithLabelValues("slack", "queue_full")); got != 990 {
		t.Errorf("dropped{slack} = %v, want 990 (queue of 10)", got)
	}
	// Resolves still find room in a full queue (up to twice its size).
	for _, inc := range burst(5) {
		d.Submit(resolved(inc, time.Minute))
	}
	if got := testutil.ToFloat64(d.workers[0].m.dropped.WithLabelValues("slack", "queue_full")); got != 990 {
		t.Errorf("resolves were dropped: dropped{slack} = %v", got)
	}
	if hung.count() != 1 {
		t.Errorf("hung server got %d requests", hung.count())
	}
}

// waitReal waits in real time (no clock to advance: the fake clock is not involved).
func waitReal(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRoutesAndResolveAfterSeverityChange(t *testing.T) {
	c := testEtcd(t)
	clock := clockwork.NewFakeClockAt(t0)
	pdRec := newRecorder(t, pagerDutyAPI)
	var console syncbuf.Buffer
	pd, _ := NewPagerDuty(pdRec.URL, testRoutingKey, PagerDutyOptions{})
	routes := []Route{
		{Severities: []incident.Severity{incident.SeverityCritical}, Jobs: []string{"llama-*"}, Notifiers: []string{"pagerduty"}},
		{Notifiers: []string{"console"}},
	}
	d, _ := startDispatcher(t, c, clock, routes, nil,
		Target{Notifier: pd, Settings: immediate},
		Target{Notifier: NewConsole(&console), Settings: immediate})

	inc := sampleMismatch()
	d.Submit(inc)
	warnOnly := burst(2)[1] // a warning: console only
	d.Submit(warnOnly)
	drain(t, d, clock)

	inc.Revision, inc.Severity = 2, incident.SeverityWarning // downgraded while open
	d.Submit(inc)
	drain(t, d, clock)
	d.Submit(resolved(inc, time.Minute))
	d.Submit(resolved(warnOnly, time.Minute))
	drain(t, d, clock)

	if got := pdEvents(pdRec, "trigger"); len(got) != 1 || got[inc.ID] != 1 {
		t.Errorf("triggers %v", got)
	}
	if got := pdEvents(pdRec, "resolve"); len(got) != 1 || got[inc.ID] != 1 {
		t.Errorf("resolves %v: the page must close although the incident is no longer critical", got)
	}
	lines := strings.Split(strings.TrimSpace(console.String()), "\n")
	if len(lines) != 5 {
		t.Errorf("console lines:\n%s", console.String())
	}
}

func TestDispatcherRejectsBadSetup(t *testing.T) {
	c := testEtcd(t)
	store := NewEtcdStore(c, EtcdStoreOptions{})
	con := NewConsole(&strings.Builder{})
	for name, tc := range map[string]struct {
		opts    Options
		targets []Target
	}{
		"no store":      {Options{}, []Target{{Notifier: con}}},
		"duplicate":     {Options{Store: store}, []Target{{Notifier: con}, {Notifier: con}}},
		"unknown route": {Options{Store: store, Routes: []Route{{Notifiers: []string{"x"}}}}, []Target{{Notifier: con}}},
	} {
		if _, err := NewDispatcher(tc.opts, tc.targets...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestEtcdStore(t *testing.T) {
	c := testEtcd(t)
	s := NewEtcdStore(c, EtcdStoreOptions{ResolvedRetention: time.Hour})
	ctx := context.Background()
	ref := &MessageRef{Channel: "C1", TS: "1700000000.000100"}
	open := Delivery{Notifier: "slack", IncidentID: "inc-1", Job: "j", Revision: 1, State: incident.StateOpen, Message: ref, DeliveredAt: t0}
	var many []Delivery
	for i := range 250 { // more than one transaction
		many = append(many, Delivery{Notifier: "pd", IncidentID: fmt.Sprintf("inc-%d", i), Revision: 2, State: incident.StateResolved})
	}
	if err := s.Put(ctx, append(many, open)...); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.Get(ctx, "slack", "inc-1")
	if err != nil || !found || got.Message == nil || *got.Message != *ref || got.Schema != deliverySchema {
		t.Fatalf("Get = %+v %v %v", got, found, err)
	}
	if _, found, _ := s.Get(ctx, "slack", "inc-2"); found {
		t.Error("found a delivery never made")
	}
	list, err := s.List(ctx, "pd")
	if err != nil || len(list) != 250 {
		t.Fatalf("List = %d, %v", len(list), err)
	}
	r, err := c.Get(ctx, snapshot.DeliveryKey("pd", "inc-7"))
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease == 0 {
		t.Errorf("resolved delivery should carry a lease: %+v %v", r.Kvs, err)
	}
	r, _ = c.Get(ctx, snapshot.DeliveryKey("slack", "inc-1"))
	if r.Kvs[0].Lease != 0 {
		t.Error("an open incident's delivery must not expire")
	}
}
