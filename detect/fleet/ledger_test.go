package fleet

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdfence"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/snapshot"
)

var t0 = time.Date(2025, 6, 2, 8, 0, 0, 0, time.UTC)

// own makes a replica's ownership of job as detect/live does: the owner key under the
// replica's lease, created only if absent. It returns the lease and the fence.
func own(t *testing.T, cli *clientv3.Client, job, replica string) (clientv3.LeaseID, clientv3.Cmp, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	key := snapshot.OwnerKey(job)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, replica, clientv3.WithLease(g.ID))).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("claim %s for %s: %v", job, replica, err)
	}
	return g.ID, etcdfence.KeyAt(key, resp.Header.Revision), resp.Header.Revision
}

func newLedger(cli *clientv3.Client, reg prometheus.Registerer) *Ledger {
	return New(cli, Config{FlushEvery: time.Minute, JudgeEvery: time.Minute}, Options{Logger: slog.New(slog.DiscardHandler), Registerer: reg})
}

func throttled(id string, rev int, at time.Time, resolved bool) incident.Incident {
	inc := incident.Incident{ID: id, Key: "gpu:n2", Kind: incident.KindStraggler, Cause: incident.CauseGPUThrottled, State: incident.StateOpen,
		Job: "train", Culprits: []incident.Culprit{{Rank: 5, Host: "host-n2", PID: 42}}, OpenedAt: at, FaultAt: at.Add(-10 * time.Second),
		LastSeen: at.Add(time.Duration(rev) * time.Minute), Revision: rev, Episode: &incident.Episode{Onset: at, Lost: time.Duration(rev) * time.Minute}}
	if resolved {
		inc.State = incident.StateResolved
		end := inc.LastSeen
		inc.ResolvedAt = &end
	}
	return inc
}

func readRecord(t *testing.T, cli *clientv3.Client, job string) (*JobRecord, int64) {
	t.Helper()
	resp, err := cli.Get(t.Context(), RecordKey(job))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the record of %s: %v (%d keys)", job, err, len(resp.Kvs))
	}
	rec, err := DecodeRecord(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return rec, resp.Kvs[0].ModRevision
}

// TestLedgerSurvivesFailover: replica A books a job's exposure and a root; A's lease
// expires, B claims the job and continues the same record (the root updated in place, not
// booked twice; exposure continued); A, resumed with its old fence, cannot write again.
func TestLedgerSurvivesFailover(t *testing.T) {
	_, cli := etcdtest.Start(t, etcdembed.Options{})
	places := Places{Nodes: map[string]string{"host-n1": "n1", "host-n2": "n2"}, GPUs: map[string]string{"host-n2:42": "1b000"}}
	nodes := []string{"n1", "n2"}
	leaseA, fenceA, termA := own(t, cli, "train", "a")
	regA := prometheus.NewRegistry()
	a := newLedger(cli, regA)
	run := func(l *Ledger, fence clientv3.Cmp, term int64, now time.Time, incs ...incident.Incident) {
		l.Observe(t.Context(), Cycle{Now: now, Jobs: []JobRun{{Job: "train", Nodes: nodes, Places: places, Fence: fence, Term: term}}, Incidents: incs})
	}
	run(a, fenceA, termA, t0)
	run(a, fenceA, termA, t0.Add(30*time.Second), throttled("i1", 1, t0.Add(20*time.Second), false))
	rec, _ := readRecord(t, cli, "train")
	if len(rec.Roots) != 1 || rec.Roots[0].Parts[0] != (Part{Kind: PartGPU, Node: "n2", ID: "1b000"}) {
		t.Fatalf("A booked %+v, want one root on GPU 1b000 of n2", rec.Roots)
	}
	run(a, fenceA, termA, t0.Add(2*time.Minute), throttled("i1", 2, t0.Add(20*time.Second), false))

	// A dies: its lease expires with its owner key; B claims the job.
	if _, err := cli.Revoke(t.Context(), leaseA); err != nil {
		t.Fatal(err)
	}
	_, fenceB, termB := own(t, cli, "train", "b")
	b := newLedger(cli, prometheus.NewRegistry())
	run(b, fenceB, termB, t0.Add(3*time.Minute), throttled("i1", 3, t0.Add(20*time.Second), true),
		throttled("i2", 1, t0.Add(170*time.Second), false))
	run(b, fenceB, termB, t0.Add(5*time.Minute), throttled("i1", 3, t0.Add(20*time.Second), true),
		throttled("i2", 1, t0.Add(170*time.Second), false))
	rec, mod := readRecord(t, cli, "train")
	if len(rec.Roots) != 2 {
		t.Fatalf("after the failover: %d roots, want 2 (i1 continued, i2 new): %+v", len(rec.Roots), rec.Roots)
	}
	if r := rec.Roots[0]; r.Incident != "i1" || r.Revision != 3 || r.End.IsZero() || r.Lost != 3*time.Minute {
		t.Errorf("i1 after the failover: %+v; want revision 3, resolved, 3m lost", r)
	}
	// Exposure: A's 2 minutes, then B's from 2 to 5 (the gap of the failover is under MaxGap).
	if h := rec.exposureIn("n1", t0, t0.Add(time.Hour)); h < 0.083 || h > 0.084 {
		t.Errorf("n1's exposure %.4f job-hours, want 5 minutes (0.0833) across both owners", h)
	}

	// A resumes with its old fence: refused, and it lets the job go.
	run(a, fenceA, termA, t0.Add(6*time.Minute), throttled("i1", 9, t0.Add(20*time.Second), false))
	if _, mod2 := readRecord(t, cli, "train"); mod2 != mod {
		t.Error("the stale owner wrote the record after its fence was gone")
	}
	if n := testutil.ToFloat64(a.m.writes.WithLabelValues("refused")); n == 0 {
		t.Error("the stale owner's write was not refused: the test did not exercise the fence")
	}
	if _, ok := a.jobs["train"]; ok {
		t.Error("the stale owner still books the job after a refusal")
	}
}

// TestLedgerBounded: a job that books a root every hour for 20 days keeps at most maxRoots
// roots one by one, hourly counts only within the retention, a record of bounded size,
// and every key under a lease no longer than the retention.
func TestLedgerBounded(t *testing.T) {
	_, cli := etcdtest.Start(t, etcdembed.Options{})
	_, fence, term := own(t, cli, "long", "a")
	l := newLedger(cli, nil)
	var nodes []string
	for i := range 64 {
		nodes = append(nodes, "node-"+strings.Repeat("x", 20)+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	var incs []incident.Incident
	for h := 0; h < 20*24; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		inc := throttled("i"+time.Duration(h).String(), 1, at, true)
		inc.Job = "long"
		inc.Culprits[0].Host = nodes[h%len(nodes)]
		inc.Culprits[0].GPU = "bus" + string(rune('a'+h%8))
		incs = append(incs[max(0, len(incs)-200):], inc)
		l.Observe(t.Context(), Cycle{Now: at.Add(10 * time.Minute), Jobs: []JobRun{{Job: "long", Nodes: nodes, Fence: fence, Term: term}},
			Incidents: incs})
	}
	rec, _ := readRecord(t, cli, "long")
	if len(rec.Roots) > maxRoots {
		t.Errorf("%d roots one by one, want at most %d", len(rec.Roots), maxRoots)
	}
	end := t0.Add(20 * 24 * time.Hour)
	for _, h := range rec.Hourly {
		if h.Hour.Before(end.Add(-l.cfg.Retention - 2*time.Hour)) {
			t.Errorf("hourly count of %s kept past the retention", h.Hour)
			break
		}
	}
	if len(rec.Hourly) == 0 {
		t.Error("no root was compacted to an hourly count")
	}
	resp, err := cli.Get(t.Context(), RecordKey("long"))
	if err != nil {
		t.Fatal(err)
	}
	size := len(resp.Kvs[0].Value)
	t.Logf("after 480 roots over 20 days on 64 nodes: %d roots, %d hourly counts, %d bytes", len(rec.Roots), len(rec.Hourly), size)
	if size > 256<<10 {
		t.Errorf("record of %d bytes", size)
	}
	ttl, err := cli.TimeToLive(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil || ttl.GrantedTTL <= 0 || time.Duration(ttl.GrantedTTL)*time.Second > l.cfg.Retention {
		t.Errorf("the record's lease: %+v %v; want one of at most the retention (%s)", ttl, err, l.cfg.Retention)
	}
}

// TestNodeIncidentsOneWriter: node incidents are written only under the leader's fence: a
// replica that does not lead judges nothing, and a leader whose key was taken over is
// refused.
func TestNodeIncidentsOneWriter(t *testing.T) {
	_, cli := etcdtest.Start(t, etcdembed.Options{})
	// Two jobs, each with the same throttling GPU, owned by one replica.
	var runs []JobRun
	var incs []incident.Incident
	for i, job := range []string{"j1", "j2"} {
		_, fence, term := own(t, cli, job, "a")
		runs = append(runs, JobRun{Job: job, Nodes: []string{"n1", "n2", "n3", "n4"}, Fence: fence, Term: term})
		inc := throttled("t"+job, 2, t0.Add(time.Duration(i)*time.Hour), true)
		inc.Job = job
		inc.Culprits[0].Host, inc.Culprits[0].GPU = "n2", "1 (bus 1b000)"
		incs = append(incs, inc)
	}
	cfg := Config{FlushEvery: time.Minute, JudgeEvery: time.Minute, CleanHours: 1}
	follower := New(cli, cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	leader := New(cli, cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	leaderKey := snapshot.LeaderKey + "/1"
	put, err := cli.Put(t.Context(), leaderKey, "leader")
	if err != nil {
		t.Fatal(err)
	}
	fence := etcdfence.KeyAt(leaderKey, put.Header.Revision)
	now := t0.Add(3 * time.Hour)
	if out := follower.Observe(t.Context(), Cycle{Now: now, Jobs: runs, Incidents: incs}); len(out) != 0 {
		t.Fatalf("a replica that does not lead opened %v", out)
	}
	if n := countKeys(t, cli, Prefix+"incidents/"); n != 0 {
		t.Fatalf("%d node incidents stored by a replica that does not lead", n)
	}
	out := leader.Observe(t.Context(), Cycle{Now: now.Add(2 * time.Minute), Jobs: nil, Leader: &fence})
	if len(out) != 1 || out[0].Kind != incident.KindNode || out[0].Culprits[0].GPU != "1b000" {
		t.Fatalf("the leader opened %+v; want one node incident on GPU 1b000 of n2", out)
	}
	if !strings.Contains(strings.Join(out[0].Evidence, "\n"), "scontrol update nodename=n2 state=drain") {
		t.Errorf("no Slurm drain line in %q", out[0].Evidence)
	}
	// Another replica leads now: the old leader's next change is refused.
	if _, err := cli.Delete(t.Context(), leaderKey); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), leaderKey, "other"); err != nil {
		t.Fatal(err)
	}
	// Four clean hours on n2 would resolve it.
	run := []JobRun{{Job: "j3", Nodes: []string{"n2"}, Fence: fence, Term: 1}}
	for m := 0; m <= 240; m += 5 {
		leader.Observe(t.Context(), Cycle{Now: now.Add(time.Duration(m) * time.Minute), Jobs: run, Leader: &fence})
	}
	resp, err := cli.Get(t.Context(), Prefix+"incidents/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), `"state":"open"`) {
		t.Errorf("after the leadership moved, the node incident changed: %v %s", err, resp.Kvs)
	}
	if n := testutil.ToFloat64(leader.m.writes.WithLabelValues("refused")); n == 0 {
		t.Error("no write refused: the test did not exercise the fence")
	}
}

func countKeys(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}
