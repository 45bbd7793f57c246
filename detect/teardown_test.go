package detect

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// tornRank is one rank of a job that ends: the position it stopped at and when it issued
// that op (0: at last × 100 ms), when its process exited (0: it runs on), whether it
// destroyed its communicator, the launcher's word.
type tornRank struct {
	last      int
	lastAt    time.Duration
	exit      time.Duration
	destroyed bool
	launcher  *int // exit code the launcher reported, if any
}

// tornJob builds n ranks on one communicator, issuing ops 100 ms apart, as a detector
// sees them at now: a rank's exit shows once its sidecar noticed and published it (300 ms).
func tornJob(now time.Duration, n int, of func(r int) tornRank) *Job {
	procs := make([]*Proc, n)
	for r := range procs {
		tr := of(r)
		c := snapshot.Comm{ID: "0xc0ffee", Ptr: "0x1", Rank: r, NRanks: n, State: snapshot.CommReady, Count: int64(tr.last)}
		for s := max(1, tr.last-7); s <= tr.last; s++ {
			o := step[(s-1)%len(step)]
			o.Seq, o.T = int64(s), us(time.Duration(s)*100*time.Millisecond)
			if tr.lastAt > 0 {
				o.T = us(tr.lastAt - time.Duration(tr.last-s)*100*time.Millisecond)
			}
			c.Recent = append(c.Recent, o)
		}
		last := c.Recent[len(c.Recent)-1]
		c.Last = &last
		host := fmt.Sprintf("node%d", r/perNode(n))
		p := &Proc{Process: snapshot.Process{Host: host, PID: 1000 + r, Rank: r, LocalRank: r % perNode(n), CudaDev: r % perNode(n),
			State: snapshot.ProcRunning}, Node: host}
		if tr.exit > 0 && tr.exit+300*time.Millisecond <= now {
			p.State, p.ExitedAt = snapshot.ProcExited, us(tr.exit)
			if tr.destroyed {
				c.State = snapshot.CommDestroyed
			}
			if tr.launcher != nil {
				p.Events = append(p.Events, snapshot.Event{Kind: snapshot.EventLauncherExit, T: us(tr.exit), PID: p.PID,
					LocalRank: p.LocalRank, Code: *tr.launcher})
			}
		}
		p.Comms = []snapshot.Comm{c}
		procs[r] = p
	}
	return NewJob("j", t0.Add(now), procs, map[string]*snapshot.Node{})
}

// perNode is how many of n ranks share a node: two in small jobs, else eight.
func perNode(n int) int {
	if n < 16 {
		return 2
	}
	return 8
}

// killedAt spreads a teardown that starts at t over 0.9 s, node by node.
func killedAt(t time.Duration, r, n int) time.Duration {
	return t + time.Duration((r/perNode(n))%10)*90*time.Millisecond
}

// TestTeardown: a job killed after a root cause (or ending without one) loses every rank
// within a second. Judged live, evaluation after evaluation as the sidecars report the
// deaths, and once at the end, that is one incident, whatever the job's size: the root
// cause with one line saying the job was torn down, or, without one, the first rank to die.
func TestTeardown(t *testing.T) {
	cfg := DefaultConfig()
	zero, failed := 0, 1
	type scenario struct {
		name  string
		rank  func(r, n int) tornRank
		evals []time.Duration
		// want is the only incident: its kind and culprit rank (-1: n-1); none: no incident.
		want     incident.Kind
		culprit  int
		none     bool
		teardown bool // its evidence says the job was torn down
	}
	for _, n := range []int{4, 4096} {
		for _, sc := range []scenario{
			{name: "hang, then teardown", rank: func(r, n int) tornRank {
				tr := tornRank{last: 23, exit: killedAt(60*time.Second, r, n)}
				if r == n-1 {
					tr.last = 20
				}
				return tr
			}, evals: []time.Duration{5 * time.Second, 15 * time.Second, 60500 * time.Millisecond, 61 * time.Second, 70 * time.Second},
				want: incident.KindHang, culprit: -1, teardown: true},
			{name: "crash of one rank, then teardown of the rest", rank: func(r, n int) tornRank {
				if r == 1 {
					return tornRank{last: 20, exit: 2050 * time.Millisecond}
				}
				return tornRank{last: 23, exit: killedAt(3*time.Second, r, n)}
			}, evals: []time.Duration{2500 * time.Millisecond, 3500 * time.Millisecond, 4 * time.Second, 20 * time.Second},
				want: incident.KindCrash, culprit: 1, teardown: true},
			// torchrun kills the rest the moment rank 1 fails: rank 0, on its node, is seen
			// dead by the same liveness check; the launcher's line names rank 1.
			{name: "crash of one rank, torn down with it", rank: func(r, n int) tornRank {
				tr := tornRank{last: 23, lastAt: 2950 * time.Millisecond, exit: killedAt(3*time.Second, r, n)}
				if r == 1 {
					tr.launcher = &failed
				}
				return tr
			}, evals: []time.Duration{3500 * time.Millisecond, 4 * time.Second, 20 * time.Second},
				want: incident.KindCrash, culprit: 1, teardown: true},
			{name: "the job ends cleanly", rank: func(r, n int) tornRank {
				return tornRank{last: 23, lastAt: 99 * time.Second, exit: killedAt(100*time.Second, r, n), destroyed: true}
			}, evals: []time.Duration{100500 * time.Millisecond, 101 * time.Second, 120 * time.Second}, none: true},
			{name: "the launcher reports a clean exit", rank: func(r, n int) tornRank {
				return tornRank{last: 23, lastAt: 99 * time.Second, exit: killedAt(100*time.Second, r, n), launcher: &zero}
			}, evals: []time.Duration{100500 * time.Millisecond, 101 * time.Second, 120 * time.Second}, none: true},
			{name: "the job ends at once without a cause", rank: func(r, n int) tornRank {
				return tornRank{last: 23, lastAt: 99 * time.Second, exit: killedAt(100*time.Second, r, n)}
			}, evals: []time.Duration{100500 * time.Millisecond, 101 * time.Second, 120 * time.Second},
				want: incident.KindCrash, culprit: 0, teardown: true},
			// Stopped between two ops of a step, the odd ranks one op behind: once every
			// rank is dead, the communicator "standing still" is no hang. Of the first
			// node's ranks, seen dead together, one that was behind is named.
			{name: "the job is stopped mid-step without a cause", rank: func(r, n int) tornRank {
				return tornRank{last: 23 - r%2, lastAt: 99950 * time.Millisecond, exit: killedAt(100*time.Second, r, n)}
			}, evals: []time.Duration{100500 * time.Millisecond, 101 * time.Second, 112 * time.Second, 130 * time.Second},
				want: incident.KindCrash, culprit: 1, teardown: true},
		} {
			t.Run(fmt.Sprintf("%d ranks/%s", n, sc.name), func(t *testing.T) {
				if sc.culprit < 0 {
					sc.culprit = n - 1
				}
				check := func(how string, incs []incident.Incident, torn bool) {
					t.Helper()
					if sc.none {
						if len(incs) != 0 {
							t.Fatalf("%s: want no incident, got %s: %s", how, incs[0].Kind, incs[0].Summary)
						}
						return
					}
					if len(incs) != 1 {
						var s []string
						for _, i := range incs {
							s = append(s, string(i.Kind)+": "+i.Summary)
						}
						t.Fatalf("%s: want one incident, got %d:\n%s", how, len(incs), strings.Join(s, "\n"))
					}
					inc := incs[0]
					if inc.Kind != sc.want || len(inc.Culprits) != 1 || inc.Culprits[0].Rank != sc.culprit {
						t.Fatalf("%s: got %s %+v, want %s of rank %d: %s", how, inc.Kind, inc.Culprits, sc.want, sc.culprit, inc.Summary)
					}
					line := fmt.Sprintf("then the job was torn down: %d ranks on %d hosts exited within", n, (n+perNode(n)-1)/perNode(n))
					if got := strings.Join(inc.Evidence, "\n"); torn && !strings.Contains(got, line) {
						t.Fatalf("%s: evidence lacks %q:\n%s", how, line, got)
					}
				}
				rank := func(r int) tornRank { return sc.rank(r, n) }

				// Live: the lifecycle opens incidents as the evaluations come.
				l := NewLifecycle(5 * time.Second)
				var opened []incident.Incident
				for _, at := range sc.evals {
					res := Evaluate(tornJob(at, n, rank), cfg, TimingOK)
					notify, _ := l.Update("j", res.Findings, t0.Add(at))
					for _, inc := range notify {
						if inc.Revision == 1 {
							opened = append(opened, inc)
						}
					}
				}
				check("opened live", opened, false)
				var open []incident.Incident
				for _, inc := range l.Incidents("j") {
					if inc.State == incident.StateOpen {
						open = append(open, inc)
					}
				}
				if !sc.none {
					check("open at the end", open, sc.teardown)
				}

				// Once, after the fact.
				end := sc.evals[len(sc.evals)-1]
				res := Evaluate(tornJob(end, n, rank), cfg, TimingOK)
				var incs []incident.Incident
				for i := range res.Findings {
					incs = append(incs, res.Findings[i].Incident("j", t0.Add(end)))
				}
				check("judged at the end", incs, sc.teardown)
			})
		}
	}
}

// TestTeardownFoldsIntoAnOpenIncident: a teardown whose evaluation no longer shows its cause
// (the cause's finding ended with the ranks: a stuck collective, a link) joins the critical
// incident already open, and stays folded after that one resolves; after a warning only, it
// is news.
func TestTeardownFoldsIntoAnOpenIncident(t *testing.T) {
	l := NewLifecycle(5 * time.Second)
	cause := Finding{Kind: incident.KindStuckInFlight, Severity: incident.SeverityCritical, Key: "stuck:0xc0ffee",
		Culprits: []incident.Culprit{}, Summary: "every rank entered op 24 and none finished", FaultAt: t0.Add(2 * time.Second)}
	if notify, _ := l.Update("j", []Finding{cause}, t0.Add(15*time.Second)); len(notify) != 1 {
		t.Fatalf("open: %+v", notify)
	}
	torn := Finding{Kind: incident.KindCrash, Severity: incident.SeverityCritical, Key: "rank:node0:1000",
		Culprits: []incident.Culprit{{Rank: 0, Host: "node0", PID: 1000}}, Summary: "rank 0 died", FaultAt: t0.Add(60 * time.Second),
		Teardown: &Teardown{Ranks: 4, Hosts: 2, First: t0.Add(60 * time.Second), Last: t0.Add(60900 * time.Millisecond)}}
	notify, store := l.Update("j", []Finding{torn}, t0.Add(61*time.Second))
	if len(notify) != 0 || len(store) != 1 || !strings.Contains(strings.Join(store[0].Evidence, "\n"), "then the job was torn down: 4 ranks on 2 hosts exited within 900ms") {
		t.Fatalf("folded: notify %+v store %+v", notify, store)
	}
	for s := 62; s <= 90; s++ {
		if notify, _ := l.Update("j", []Finding{torn}, t0.Add(time.Duration(s)*time.Second)); len(notify) > 0 && notify[0].State == incident.StateOpen {
			t.Fatalf("at %ds the teardown opened %s: %s", s, notify[0].Kind, notify[0].Summary)
		}
	}

	l = NewLifecycle(5 * time.Second)
	warn := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Key: "straggler:node1:1001",
		Culprits: []incident.Culprit{{Rank: 1}}, Summary: "rank 1 is a straggler", FaultAt: t0.Add(2 * time.Second)}
	l.Update("j", []Finding{warn}, t0.Add(15*time.Second))
	if notify, _ := l.Update("j", []Finding{warn, torn}, t0.Add(61*time.Second)); len(notify) != 1 || notify[0].Kind != incident.KindCrash {
		t.Fatalf("after a warning the teardown opens its own incident: %+v", notify)
	}
}

// BenchmarkEvaluateTeardown4096: one evaluation of a 4,096-rank job whose every rank just
// died: the crash rule judges each death against its communicators, not the whole job.
func BenchmarkEvaluateTeardown4096(b *testing.B) {
	j := tornJob(61*time.Second, 4096, func(r int) tornRank {
		tr := tornRank{last: 23, exit: killedAt(60*time.Second, r, 4096)}
		if r == 4095 {
			tr.last = 20
		}
		return tr
	})
	cfg := DefaultConfig()
	b.ReportAllocs()
	for b.Loop() {
		if res := Evaluate(j, cfg, TimingOK); len(res.Findings) != 1 {
			b.Fatalf("%d findings", len(res.Findings))
		}
	}
}
