package live

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/snapshot"
)

// recorder stands in for the alert dispatchers of every term of every replica: it records
// the incident changes of job "train" that replicas submit, as "<event> <id>". Like the
// dispatcher, whose delivery state in etcd all replicas share, it delivers each revision
// of an incident once: a replica taking a job over submits the incidents it continues, and
// only what was not delivered yet counts. A replica that loses etcd as it dies may submit
// that it lost etcd; that is not what the tests count.
type recorder struct {
	mu        sync.Mutex
	events    []string
	delivered map[string]bool
	byReplica map[string]int // events each replica's alerts delivered
}

// as is replica id's alerts.
func (r *recorder) as(id string) Alerts { return replicaAlerts{r, id} }

type replicaAlerts struct {
	r  *recorder
	id string
}

func (a replicaAlerts) Start(ctx context.Context, known []incident.Incident) error { return nil }
func (a replicaAlerts) Submit(inc incident.Incident)                               { a.r.submit(a.id, inc) }
func (a replicaAlerts) Close()                                                     {}

// by counts the events that replica id delivered.
func (r *recorder) by(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byReplica[id]
}

func (r *recorder) submit(id string, inc incident.Incident) {
	if inc.Job != "train" {
		return
	}
	event := "update"
	switch {
	case inc.State == incident.StateResolved:
		event = "resolve"
	case inc.Revision == 1:
		event = "open"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := fmt.Sprintf("%s/%d/%s", inc.ID, inc.Revision, inc.State)
	if r.delivered[key] {
		return
	}
	if r.delivered == nil {
		r.delivered, r.byReplica = map[string]bool{}, map[string]int{}
	}
	r.delivered[key] = true
	r.byReplica[id]++
	r.events = append(r.events, event+" "+inc.ID)
}

func (r *recorder) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if len(e) >= len(prefix) && e[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// node is a two-rank job's node snapshot: rank r at count n, last op at t.
func node(name string, r int, n int64, t time.Time) *snapshot.Node {
	last := snapshot.Op{Seq: n, Op: "AllReduce", Count: 1024, Dtype: "float32", Red: "sum", T: snapshot.MicrosOf(t)}
	return &snapshot.Node{Job: "train", Node: name, Started: 1, Processes: []snapshot.Process{{
		Host: name, PID: 100 + r, Rank: r, CudaDev: 0, Comms: []snapshot.Comm{{ID: "0xabc", Ptr: "0x1", Rank: r, NRanks: 2,
			State: "ready", Count: n, Last: &last}},
	}}}
}

func put(t *testing.T, cli *clientv3.Client, n *snapshot.Node) {
	t.Helper()
	b, err := snapshot.Encode(n)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, snapshot.NodeKey(n.Job, n.Node), string(b)); err != nil {
		t.Fatal(err)
	}
}

type replica struct {
	d      *Detector
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startReplica(t *testing.T, endpoints []string, id string, rec *recorder) *replica {
	t.Helper()
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Client: cli, Rules: detect.DefaultConfig(), Interval: 200 * time.Millisecond,
		ResolveAfter: time.Second, LeaseTTL: 2 * time.Second, ID: id, Logger: slog.New(slog.DiscardHandler),
		NewAlerts: func(prometheus.Registerer) (Alerts, error) { return rec.as(id), nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{d: d, cli: cli, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); d.Run(ctx) }()
	return r
}

func (r *replica) leading() bool {
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	return r.d.leader
}

func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s", what, limit)
	return 0
}

// TestFailover: the leader dies while an incident is open; the standby leads within the
// lease TTL, continues the incident under its id, and notifies nobody twice; the resolve
// is delivered exactly once.
func TestFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rec := &recorder{}
	a := startReplica(t, srv.Endpoints(), "a", rec)
	eventually(t, 10*time.Second, "replica a leads", a.leading)
	b := startReplica(t, srv.Endpoints(), "b", rec)
	defer func() { b.cancel(); <-b.done; b.cli.Close() }()

	// Rank 1 stopped 30 s ago at 90 while rank 0 is at 100: a hang.
	stalled := time.Now().Add(-30 * time.Second)
	put(t, a.cli, node("n0", 0, 100, stalled))
	put(t, a.cli, node("n1", 1, 90, stalled))
	// Submit comes before the store: wait for both, then judge what was stored.
	eventually(t, 10*time.Second, "hang notified and stored", func() bool {
		return rec.count("open") == 1 && len(a.d.Incidents("train", "open")) > 0
	})
	open := a.d.Incidents("train", "open")
	if len(open) != 1 || open[0].Kind != incident.KindHang || open[0].Culprits[0].Rank != 1 {
		t.Fatalf("open incidents %+v", open)
	}
	id := open[0].ID

	// The leader dies without resigning: its client vanishes, its session expires.
	a.cli.Close()
	took := eventually(t, 10*time.Second, "standby takes over", b.leading)
	t.Logf("standby leads %s after the leader died (lease TTL 2 s)", took.Round(100*time.Millisecond))
	a.cancel()
	<-a.done
	time.Sleep(2 * time.Second) // several evaluations by the new leader
	if got := b.d.Incidents("train", "open"); len(got) != 1 || got[0].ID != id {
		t.Fatalf("after failover: %+v, want incident %s still open", got, id)
	}
	if n := rec.count("open"); n != 1 {
		t.Fatalf("%d open notifications, want 1 (no second page after failover): %v", n, rec.events)
	}

	// The job recovers: both ranks level and moving.
	now := time.Now()
	put(t, b.cli, node("n0", 0, 120, now))
	put(t, b.cli, node("n1", 1, 120, now))
	eventually(t, 10*time.Second, "resolve notified", func() bool { return rec.count("resolve") == 1 })
	time.Sleep(time.Second)
	if n := rec.count("resolve"); n != 1 {
		t.Fatalf("%d resolve notifications, want 1: %v", n, rec.events)
	}
	if got := b.d.Incidents("train", ""); len(got) != 1 || got[0].ID != id || got[0].State != incident.StateResolved {
		t.Fatalf("incidents after recovery %+v", got)
	}
}

// TestLostNodeAndMassLoss: one lease expiring, with its peers still for the hang window
// (the proof a lost node needs), is a lost node; many at once is one monitoring incident,
// not one per node. The rule is detect.LostNodes; this checks that the watch feeds it what
// it saw.
func TestLostNodeAndMassLoss(t *testing.T) {
	now := time.Now()
	rules := detect.DefaultConfig()
	rules.MassLossNodes, rules.MassLossFraction, rules.MassLossWindow = 3, 0.25, 15*time.Second
	d := &Detector{opts: Options{Rules: rules, Logger: slog.New(slog.DiscardHandler)}, state: NewState(),
		lostTimes: map[string][]time.Time{}}
	for i := 0; i < 8; i++ {
		d.state.Put(node("n"+string(rune('0'+i)), i%2, 100, now), now)
	}
	lose := func(names ...string) []detect.Finding {
		for _, n := range names {
			d.nodeKeyDeleted("train", n, now)
		}
		fs, _ := d.evaluateJob("train", now.Add(12*time.Second), 0)
		return fs
	}
	fs := lose("n3")
	if len(fs) != 1 || fs[0].Kind != incident.KindLostNode || fs[0].Culprits[0].Host != "n3" {
		t.Fatalf("one lost node: %+v", fs)
	}
	fs = lose("n4", "n5")
	if len(fs) != 1 || fs[0].Kind != incident.KindMonitoring {
		t.Fatalf("three nodes at once must be one monitoring incident: %+v", fs)
	}
	// A clean stop is not a loss.
	n6 := node("n6", 0, 100, now)
	n6.Stopping = true
	d.state.Put(n6, now)
	if d.state.Delete("train", "n6", now) {
		t.Fatal("a cleanly stopped node was taken for lost")
	}
}

// TestEtcdOutageProbesAndWatch: etcd stopped for 10 s, then started again on the same port
// and data. Over real HTTP, liveness (/healthz) stays 200 throughout (a liveness probe that
// failed here restarted every replica), readiness (/readyz) is 503 while etcd is down and
// 200 again after; the watch resumes and the detector holds a snapshot written after the
// restart within 5 s (with gRPC's default reconnect backoff it did not).
func TestEtcdOutageProbesAndWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s outage")
	}
	ctx := t.Context()
	srv, cli := etcdtest.Start(t, etcdembed.Options{Dir: t.TempDir()})
	d, err := New(Options{Client: cli, Rules: detect.DefaultConfig(), Interval: 200 * time.Millisecond,
		ProbeEvery: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(rctx) }()
	defer func() { cancel(); <-done }()
	api := httptest.NewServer(d.Handler())
	defer api.Close()
	status := func(path string) int {
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get(api.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// holds reports whether the detector has rank 0's snapshot at count n.
	holds := func(n int64) bool {
		v, ok := d.JobView("train")
		if !ok {
			return false
		}
		for _, c := range v.Communicators {
			for _, m := range c.Members {
				if m.Count == n {
					return true
				}
			}
		}
		return false
	}
	put(t, cli, node("n0", 0, 100, time.Now()))
	eventually(t, 10*time.Second, "first snapshot and ready", func() bool { return holds(100) && status("/readyz") == http.StatusOK })

	srv.Stop()
	stopped := time.Now()
	notReady := false
	for time.Since(stopped) < 10*time.Second {
		if code := status("/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz %d %s into the etcd outage: liveness must not depend on etcd", code, time.Since(stopped).Round(time.Second))
		}
		notReady = notReady || status("/readyz") == http.StatusServiceUnavailable
		time.Sleep(100 * time.Millisecond)
	}
	if !notReady {
		t.Error("/readyz never said 503 during a 10 s etcd outage")
	}
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	fresh, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	put(t, fresh, node("n0", 0, 200, time.Now()))
	eventually(t, 5*time.Second, "a snapshot written after etcd's return reaches the detector", func() bool { return holds(200) })
	took := time.Since(back)
	eventually(t, 5*time.Second, "/readyz 200 again", func() bool { return status("/readyz") == http.StatusOK })
	t.Logf("the detector held a new snapshot %s after etcd came back", took.Round(10*time.Millisecond))
}
