package live

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
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
	"github.com/ncclwatch/watchdog/snapshot"
)

// freezer stops a replica in-process as SIGSTOP would: its evaluations, lease renewals and
// watch all wait at their hooks until it thaws. Each part thaws on its own, so that a test
// can order what a resumed replica does first.
type freezer struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
}

func (f *freezer) wait(part string) {
	f.mu.Lock()
	g := f.gates[part]
	f.mu.Unlock()
	if g != nil {
		<-g
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gates = map[string]chan struct{}{"evaluate": make(chan struct{}), "keepalive": make(chan struct{}), "apply": make(chan struct{}),
		"sync": make(chan struct{})}
}

func (f *freezer) thaw(part string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g := f.gates[part]; g != nil {
		close(g)
		delete(f.gates, part)
	}
}

// blind reports whether the replica's reads of ownership fail (while "sync" is frozen).
func (f *freezer) blind() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gates["sync"] != nil
}

func (f *freezer) hooks() *hooks {
	return &hooks{evaluate: func() { f.wait("evaluate") }, keepAlive: func() { f.wait("keepalive") }, apply: func() { f.wait("apply") },
		blindSync: f.blind}
}

// cluster is replicas of the detector over one embedded etcd.
type cluster struct {
	t        *testing.T
	srv      *etcdembed.Server
	cfg      etcdconn.Config  // how replicas connect
	cli      *clientv3.Client // the test's own client
	rec      *recorder
	replicas map[string]*replica
	frozen   map[string]*freezer
	regs     map[string]*prometheus.Registry
}

func newCluster(t *testing.T, ids ...string) *cluster {
	srv, cli := etcdtest.Start(t, etcdembed.Options{})
	return newClusterOn(t, srv, etcdconn.Config{Endpoints: srv.Endpoints()}, cli, ids...)
}

// newClusterOn runs replicas connecting with cfg; cli is the test's own client (root).
func newClusterOn(t *testing.T, srv *etcdembed.Server, cfg etcdconn.Config, cli *clientv3.Client, ids ...string) *cluster {
	c := &cluster{t: t, srv: srv, cfg: cfg, cli: cli, rec: &recorder{}, replicas: map[string]*replica{},
		frozen: map[string]*freezer{}, regs: map[string]*prometheus.Registry{}}
	for _, id := range ids {
		c.start(id)
	}
	t.Cleanup(func() {
		for id, r := range c.replicas {
			for _, part := range []string{"apply", "evaluate", "keepalive", "sync"} {
				c.frozen[id].thaw(part)
			}
			r.stop()
		}
	})
	return c
}

// start runs replica id: lease TTL 2 s, an evaluation every 200 ms.
func (c *cluster) start(id string) *replica {
	cli, err := etcdconn.New(c.cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	f := &freezer{}
	reg := prometheus.NewRegistry()
	newAlerts := func(prometheus.Registerer) (Alerts, error) { return c.rec.as(id), nil }
	d, err := New(Options{Client: cli, Rules: detect.DefaultConfig(), Interval: 200 * time.Millisecond,
		ResolveAfter: time.Second, LeaseTTL: 2 * time.Second, ID: id, Logger: slog.New(slog.DiscardHandler),
		Registerer: reg, hooks: f.hooks(),
		NewAlerts: newAlerts})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{d: d, cli: cli, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); d.Run(ctx) }()
	c.replicas[id], c.frozen[id], c.regs[id] = r, f, reg
	return r
}

// stop ends a replica that still runs (idempotent).
func (r *replica) stop() {
	r.cancel()
	<-r.done
	r.cli.Close()
}

// kill makes a replica die without a word, as far as etcd can tell: it stops renewing its
// lease, writing and reading (frozen until the test ends), and its lease runs out.
func (c *cluster) kill(id string) { c.frozen[id].freeze() }

// owner is the replica that owns job, as replica id sees it ("" if none).
func (c *cluster) owner(id, job string) string {
	r := c.replicas[id]
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	return r.d.owners[job]
}

// owns reports whether replica id judges job.
func (c *cluster) owns(id, job string) bool {
	r := c.replicas[id]
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	return r.d.owned[job] != nil
}

func (c *cluster) okWrites(id string) float64 {
	return testutil.ToFloat64(c.replicas[id].d.m.fencedWrites.WithLabelValues("ok"))
}

// job puts nodes n0 (rank 0) and n1 (rank 1) of a two-rank job: rank 1 at count c1, both
// last progressing at t.
func (c *cluster) job(name string, c0, c1 int64, t time.Time) {
	for i, n := range []*snapshot.Node{node("n0", 0, c0, t), node("n1", 1, c1, t)} {
		n.Job = name
		_ = i
		put(c.t, c.cli, n)
	}
}

// hang makes "train" hang: rank 1 stopped 30 s ago at 90 while rank 0 is at 100.
func (c *cluster) hang() { c.job("train", 100, 90, time.Now().Add(-30*time.Second)) }

// heal makes "train" healthy and moving.
func (c *cluster) heal(n int64) { c.job("train", n, n, time.Now()) }

// storedIncidents reads a job's incidents from etcd.
func (c *cluster) storedIncidents(job string) []incident.Incident {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.cli.Get(ctx, snapshot.IncidentKey(job, ""), clientv3.WithPrefix())
	if err != nil {
		c.t.Fatal(err)
	}
	var out []incident.Incident
	for _, kv := range resp.Kvs {
		var inc incident.Incident
		if err := json.Unmarshal(kv.Value, &inc); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, inc)
	}
	return out
}

// other returns the replica of a pair that is not id.
func other(pair [2]string, id string) string {
	if pair[0] == id {
		return pair[1]
	}
	return pair[0]
}

// TestReplicasShareJobs: two replicas over a real etcd share the jobs (each job owned by
// one of them, both owning some), say in their metrics which replica owns which job, and
// both answer the API for every job and incident. When the owner of a job with an open
// incident dies, the other takes its jobs within the lease TTL of its death (plus one
// evaluation interval), continues the incident under its id, and nobody is paged twice;
// the resolve is delivered once.
func TestReplicasShareJobs(t *testing.T) {
	c := newCluster(t, "a", "b")
	pair := [2]string{"a", "b"}
	now := time.Now()
	jobs := []string{"train"}
	for i := 0; i < 7; i++ {
		jobs = append(jobs, fmt.Sprintf("job%d", i))
	}
	for _, j := range jobs {
		c.job(j, 100, 100, now)
	}
	eventually(t, 15*time.Second, "every job owned by exactly one replica, and each replica owning some", func() bool {
		count := map[string]int{}
		for _, j := range jobs {
			oa, ob := c.owns("a", j), c.owns("b", j)
			if oa == ob || c.owner("a", j) != c.owner("b", j) || c.owner("a", j) == "" {
				return false
			}
			count[c.owner("a", j)]++
		}
		return count["a"] > 0 && count["b"] > 0
	})
	ownerOf := c.owner("a", "train")
	standby := other(pair, ownerOf)
	t.Logf("train is owned by %s; the standby is %s", ownerOf, standby)

	// Metrics: each replica names the owner of every job. They are set by each replica's
	// own evaluation cycle, which may follow the ownership keys by a cycle: wait for them.
	for _, id := range pair {
		eventually(t, 10*time.Second, "replica "+id+" exports one job_owner series per job, naming its owner", func() bool {
			owners, err := jobOwnerSeries(c.regs[id])
			if err != nil || len(owners) != len(jobs) {
				return false
			}
			for _, j := range jobs {
				if owners[j] != c.owner(id, j) {
					return false
				}
			}
			return true
		})
	}

	c.hang()
	eventually(t, 10*time.Second, "hang notified and stored", func() bool {
		return c.rec.count("open") == 1 && len(c.storedIncidents("train")) == 1
	})
	id := c.storedIncidents("train")[0].ID
	if by := c.rec.by(ownerOf); by != 1 {
		t.Errorf("the owner %s submitted %d events, want the open", ownerOf, by)
	}

	// Either replica answers, over HTTP: the incident, the jobs and the job's view.
	for _, rid := range pair {
		srv := httptest.NewServer(c.replicas[rid].d.Handler())
		var incs []incident.Incident
		eventually(t, 5*time.Second, "replica "+rid+" lists the incident", func() bool {
			incs = nil
			getJSON(t, srv.URL+"/api/v1/incidents?job=train&state=open", &incs)
			return len(incs) == 1 && incs[0].ID == id
		})
		var list []string
		getJSON(t, srv.URL+"/api/v1/jobs", &list)
		if len(list) != len(jobs) {
			t.Errorf("replica %s lists jobs %v, want %d", rid, list, len(jobs))
		}
		var view JobView
		getJSON(t, srv.URL+"/api/v1/jobs/train", &view)
		if len(view.Nodes) != 2 || len(view.Communicators) != 1 || len(view.Incidents) != 1 {
			t.Errorf("replica %s: job view %d nodes, %d communicators, %d incidents; want 2, 1, 1", rid,
				len(view.Nodes), len(view.Communicators), len(view.Incidents))
		}
		var leader map[string]any
		getJSON(t, srv.URL+"/api/v1/leader", &leader)
		if owners, _ := leader["owners"].(map[string]any); owners["train"] != ownerOf {
			t.Errorf("replica %s: /api/v1/leader owners %v, want train owned by %s", rid, leader["owners"], ownerOf)
		}
		srv.Close()
	}

	// The owner dies: its lease runs out, the standby takes every job over.
	var theirs []string
	for _, j := range jobs {
		if c.owner(standby, j) == ownerOf {
			theirs = append(theirs, j)
		}
	}
	died := time.Now()
	c.kill(ownerOf)
	took := eventually(t, 10*time.Second, "the standby owns every job", func() bool {
		for _, j := range jobs {
			if !c.owns(standby, j) {
				return false
			}
		}
		return true
	})
	since := time.Since(died)
	t.Logf("%s took the %d jobs of %s over %s after it died (lease TTL 2 s, interval 200 ms)", standby, len(theirs),
		ownerOf, since.Round(100*time.Millisecond))
	_ = took
	if since > 2*time.Second+time.Second {
		t.Errorf("takeover took %s: more than the lease TTL (2 s) and a few intervals", since.Round(100*time.Millisecond))
	}
	time.Sleep(time.Second) // several evaluations by the new owner
	if got := c.storedIncidents("train"); len(got) != 1 || got[0].ID != id || got[0].State != incident.StateOpen {
		t.Fatalf("after failover: %+v, want incident %s still open and alone", got, id)
	}
	if n := c.rec.count("open"); n != 1 {
		t.Fatalf("%d open notifications, want 1 (no second page after failover): %v", n, c.rec.events)
	}

	c.heal(120)
	eventually(t, 10*time.Second, "resolve notified", func() bool { return c.rec.count("resolve") == 1 })
	time.Sleep(time.Second)
	if n := c.rec.count("resolve"); n != 1 {
		t.Fatalf("%d resolve notifications, want 1: %v", n, c.rec.events)
	}
	if got := c.storedIncidents("train"); len(got) != 1 || got[0].ID != id || got[0].State != incident.StateResolved {
		t.Fatalf("incidents after recovery %+v", got)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestStaleOwnerNeverWrites: the leader, which owns the job, is frozen past its lease's TTL
// (its evaluations, lease renewals and watch all stopped, as SIGSTOP does), the other
// replica leads and takes the job over, and the fault changes meanwhile; then the frozen one resumes, its
// watch first, then its evaluations while its lease renewal still waits and its reads of
// the ownership fail (the worst order: it judges with its old ownership for seconds before
// it can learn it lost it). Its writes are refused
// by their fence, it pages nobody, and it ends its term; etcd holds the successor's
// incidents only. Whether or not an incident was open before the freeze:
//   - open: the successor resolves it; the stale owner, which held it open, must not
//     write its own resolve or update;
//   - none: the fault starts during the freeze and the successor opens its incident; the
//     stale owner, which never saw it, must not open a second one.
func TestStaleOwnerNeverWrites(t *testing.T) {
	for _, openBefore := range []bool{true, false} {
		name := "no incident before the freeze"
		if openBefore {
			name = "incident open before the freeze"
		}
		t.Run(name, func(t *testing.T) {
			// The stale replica leads and owns train: it starts alone, and the other is
			// named so that train prefers the first (it would move otherwise).
			c := newCluster(t, "a")
			stale, successor := "a", "b"
			for _, id := range []string{"b", "c", "d", "e", "f"} {
				if preferred("train", []string{"a", id}) == "a" {
					successor = id
					break
				}
			}
			if openBefore {
				c.hang()
			} else {
				c.heal(100)
			}
			eventually(t, 10*time.Second, "a leads and owns train", func() bool {
				r := c.replicas["a"].d
				r.mu.Lock()
				defer r.mu.Unlock()
				return r.leader && r.owned["train"] != nil
			})
			c.start(successor)
			eventually(t, 10*time.Second, successor+" registered", func() bool { return c.owner(successor, "train") == stale })
			if openBefore {
				eventually(t, 10*time.Second, "hang opened", func() bool { return c.rec.count("open") == 1 && len(c.storedIncidents("train")) == 1 })
			} else {
				time.Sleep(time.Second) // evaluations of a healthy job
			}
			time.Sleep(500 * time.Millisecond) // the incident's store has come back to the owner

			c.frozen[stale].freeze()
			writes := c.okWrites(stale)
			events := c.rec.by(stale)
			eventually(t, 10*time.Second, "the successor leads and owns train", func() bool {
				r := c.replicas[successor].d
				r.mu.Lock()
				defer r.mu.Unlock()
				return r.leader && r.owned["train"] != nil
			})
			if openBefore {
				c.heal(120) // the successor resolves; the stale owner still holds the incident open
				eventually(t, 10*time.Second, "resolve notified", func() bool { return c.rec.count("resolve") == 1 })
			} else {
				c.hang() // the successor opens; the stale owner never saw it
				eventually(t, 10*time.Second, "hang opened by the successor", func() bool { return c.rec.count("open") == 1 })
			}
			before := c.storedIncidents("train")

			// Resume: the watch, then evaluations with the lease renewal still frozen and the
			// ownership unread.
			c.frozen[stale].thaw("apply")
			time.Sleep(500 * time.Millisecond)
			c.frozen[stale].thaw("evaluate")
			time.Sleep(2 * time.Second) // past ResolveAfter (1 s): a stale resolve would be written now
			c.frozen[stale].thaw("keepalive")
			c.frozen[stale].thaw("sync")
			time.Sleep(time.Second)

			if w := c.okWrites(stale); w != writes {
				t.Errorf("the stale owner %s wrote %v incident transactions after it resumed", stale, w-writes)
			}
			refused := testutil.ToFloat64(c.replicas[stale].d.m.fencedWrites.WithLabelValues("refused"))
			t.Logf("the stale owner's incident writes refused by their fence: %v", refused)
			if refused == 0 {
				t.Error("the stale owner never tried to write: the test did not exercise the fence")
			}
			if e := c.rec.by(stale); e != events {
				t.Errorf("the stale owner submitted %d alert events after it resumed: %v", e-events, c.rec.events)
			}
			after := c.storedIncidents("train")
			if len(after) != 1 || len(before) != 1 || after[0].ID != before[0].ID || after[0].Revision != before[0].Revision ||
				after[0].State != before[0].State {
				t.Errorf("etcd's incidents changed after the stale owner resumed:\nbefore %+v\nafter  %+v", before, after)
			}
			if n := c.rec.count("open"); n != 1 {
				t.Errorf("%d open notifications, want 1: %v", n, c.rec.events)
			}
			if !c.owns(successor, "train") || c.owns(stale, "train") {
				t.Error("the successor does not own train, or the stale owner still does")
			}
		})
	}
}

// TestSpoofedNodeKey: a value that names another job or node than its key is refused and
// counted: a key under one job cannot plant a node in another.
func TestSpoofedNodeKey(t *testing.T) {
	c := newCluster(t, "a")
	c.heal(100)
	eventually(t, 10*time.Second, "train judged", func() bool { return c.owns("a", "train") })
	d := c.replicas["a"].d
	spoof := node("n9", 1, 100, time.Now())
	spoof.Job = "other"
	b, err := snapshot.Encode(spoof)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Under train's key n2, a value that says it is node n9 of job other.
	if _, err := c.cli.Put(ctx, snapshot.NodeKey("train", "n2"), string(b)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the spoofed value counted", func() bool { return testutil.ToFloat64(d.m.spoofed) == 1 })
	d.mu.Lock()
	planted := d.state.has("other", "n9") || d.state.has("train", "n9") || d.state.has("train", "n2")
	d.mu.Unlock()
	if planted {
		t.Error("the spoofed value reached the state")
	}
	if _, ok := d.JobView("other"); ok {
		t.Error("a job named only in a value appeared")
	}
}

// TestLeaderSoonAfterEtcdReturns: etcd stops for longer than the lease TTL, then starts
// again on its data. The replica that led leads again, with its writes accepted, within
// about 2 s of etcd's return (issue 26: 11 s, while a new campaign waited for the old
// election key's lease to run out).
func TestLeaderSoonAfterEtcdReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd down 12 s")
	}
	srv, cli := etcdtest.Start(t, etcdembed.Options{Dir: t.TempDir()})
	rcli, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer rcli.Close()
	d, err := New(Options{Client: rcli, Rules: detect.DefaultConfig(), Interval: 200 * time.Millisecond, ProbeEvery: 200 * time.Millisecond,
		LeaseTTL: 10 * time.Second, ID: "a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	put(t, cli, node("n0", 0, 100, time.Now()))
	synced := func() (leading bool, at time.Time) {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.leader && d.owned["train"] != nil, d.lastSync
	}
	eventually(t, 10*time.Second, "leading and owning train", func() bool { l, _ := synced(); return l })

	srv.Stop()
	time.Sleep(12 * time.Second)
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	took := eventually(t, 10*time.Second, "leading again, as etcd says", func() bool {
		l, at := synced()
		return l && at.After(back)
	})
	t.Logf("leading again %s after etcd's return (lease TTL 10 s)", took.Round(10*time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("no leader for %s after etcd's return, want about 2 s", took.Round(10*time.Millisecond))
	}
}

// TestPreferredSpreads: rendezvous hashing spreads jobs evenly over replicas of similar
// names, and moves only the jobs of a replica that goes.
func TestPreferredSpreads(t *testing.T) {
	replicas := []string{"replica0", "replica1", "replica2", "replica3"}
	count := map[string]int{}
	moved := 0
	for j := 0; j < 1000; j++ {
		job := fmt.Sprintf("load%d", j)
		p := preferred(job, replicas)
		count[p]++
		if q := preferred(job, replicas[:3]); q != p && p != "replica3" {
			moved++
		}
	}
	for _, r := range replicas {
		if count[r] < 200 || count[r] > 300 {
			t.Errorf("replica %s preferred by %d of 1000 jobs, want about 250: %v", r, count[r], count)
		}
	}
	if moved != 0 {
		t.Errorf("%d jobs of the replicas that stayed moved when replica3 went", moved)
	}
}

// jobOwnerSeries reads ncclwatch_detector_job_owner from a registry as job → replica, for
// the series at 1, without creating any (WithLabelValues would).
func jobOwnerSeries(reg prometheus.Gatherer) (map[string]string, error) {
	families, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	owners := map[string]string{}
	for _, f := range families {
		if f.GetName() != "ncclwatch_detector_job_owner" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if m.GetGauge().GetValue() != 1 {
				return nil, fmt.Errorf("job %s replica %s at %v", labels["ncclwatch_job"], labels["replica"], m.GetGauge().GetValue())
			}
			owners[labels["ncclwatch_job"]] = labels["replica"]
		}
	}
	return owners, nil
}
