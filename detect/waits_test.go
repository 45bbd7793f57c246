package detect

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestWaitGraphEnds: roots are the members waited for that wait for nothing; a cycle that
// waits for no one outside is an end of its own; a cycle that waits on a root is not.
func TestWaitGraphEnds(t *testing.T) {
	p := make([]*Proc, 7)
	for r := range p {
		p[r] = &Proc{Process: snapshot.Process{Rank: r}}
	}
	w := func(a, b int) Wait { return Wait{Waiter: p[a], Awaited: p[b], Open: true} }
	// 0 -> 1 -> 2 (root); 3 <-> 4 (a cycle); 5 <-> 6 -> 2 (a cycle that waits on the root);
	// a closed wait leads nowhere.
	g := NewWaitGraph([]Wait{w(0, 1), w(1, 2), w(3, 4), w(4, 3), w(5, 6), w(6, 5), w(6, 2), {Waiter: p[2], Awaited: p[0]}})
	roots, cycles := g.Ends()
	if len(roots) != 1 || roots[0] != p[2] || len(cycles) != 1 || !slices.Equal(cycles[0], []*Proc{p[3], p[4]}) {
		t.Fatalf("roots %v cycles %v", roots, cycles)
	}
	who, via := g.Waiters(p[2])
	if len(who) != 4 || len(pathOf(p[0], via, p[2])) != 2 {
		t.Fatalf("waiters of the root: %v", who)
	}
}

// withComm adds to p a communicator id built as pluginRank builds its first one.
func withComm(p *Proc, id string, rank, nranks int, issued, done int64, gpuAt time.Duration) *Proc {
	c := pluginRank(rank, issued, done, gpuAt, 20*time.Millisecond).Comms[0]
	c.ID, c.NRanks = id, nranks
	p.Comms = append(p.Comms, c)
	return p
}

// plugin4 is four ranks with the plugin on a world communicator, each rank's collective
// 31 on its GPU since 3 s unless queued (issued, not started) or idle (30 issued, all done).
func plugin4(queued, idle []int) []*Proc {
	var ps []*Proc
	for r := range 4 {
		issued, gpuAt := int64(31), 3*time.Second
		if slices.Contains(queued, r) {
			gpuAt = 0
		}
		if slices.Contains(idle, r) {
			issued = 30
		}
		p := pluginRank(r, issued, 30, gpuAt, 20*time.Millisecond)
		p.Comms[0].ID, p.Comms[0].NRanks = "world", 4
		ps = append(ps, p)
	}
	return ps
}

// TestQueuedBehindAStoppedRank: what the device showed with four ranks on one GPU and the
// plugin: rank 2 stopped issuing; rank 3's GPU never started the world op because it runs a
// tensor-parallel op that waits for rank 2. One incident, rank 2's, the others its victims:
// rank 3's wait is followed into the tensor-parallel communicator although that one's own
// window has not passed.
func TestQueuedBehindAStoppedRank(t *testing.T) {
	ps := plugin4([]int{3}, []int{2})
	withComm(ps[2], "tp23", 0, 2, 40, 40, 0)
	withComm(ps[3], "tp23", 1, 2, 41, 40, 5500*time.Millisecond)
	res := Evaluate(mjob(7*time.Second, ps...), DefaultConfig(), TimingOK)
	if len(res.Findings) != 1 {
		t.Fatalf("want one finding, got %+v", res.Findings)
	}
	f := res.Findings[0]
	ev := strings.Join(f.Evidence, "\n")
	if f.Kind != incident.KindHang || culpritRanks(f)[0] != 2 || f.Victims != 3 || f.Cause != incident.CauseHostStalled ||
		!strings.Contains(ev, "communicator tp23 (2 ranks): rank 2 (node2 pid 102) issued 40 collectives") {
		t.Fatalf("%s %v victims %d cause %s: %s\n%s", f.Kind, culpritRanks(f), f.Victims, f.Cause, f.Summary, ev)
	}
}

// TestQueuedBehindTheirCause: live on one H100. gpu_hang: rank 1's GPU ran one long kernel,
// so neither its collectives nor rank 0's (queued behind a tensor-parallel all-reduce that
// waits for rank 1) started. The rank whose GPU runs no NCCL op is the root. p2p_skip: rank
// 1 skipped a receive; ranks 0 and 2, queued behind ops that wait for it, are its victims;
// before the p2p evidence's window, ranks that only wait in NCCL page nothing.
func TestQueuedBehindTheirCause(t *testing.T) {
	t.Run("gpu_hang", func(t *testing.T) {
		ps := plugin4([]int{0, 1}, nil)
		withComm(ps[0], "tp01", 0, 2, 41, 40, 2*time.Second)
		withComm(ps[1], "tp01", 1, 2, 41, 40, 0)
		res := Evaluate(mjob(7*time.Second, ps...), DefaultConfig(), TimingOK)
		if len(res.Findings) != 1 || culpritRanks(res.Findings[0])[0] != 1 || res.Findings[0].Cause != incident.CauseGPUBusy ||
			!strings.Contains(res.Findings[0].Summary, "issued but its GPU has not started") {
			t.Fatalf("want rank 1 alone, its GPU busy: %+v", res.Findings)
		}
	})
	p2pSkip := func(now time.Duration) *Job {
		ps := plugin4([]int{0, 2}, nil)
		// Rank 0 sends its 21st message to rank 1 on pair01, rank 2 waits for its 21st from
		// rank 1 on pair12; rank 1 skipped both. Their sends and receives run on the GPUs.
		exchange := func(p *Proc, id string, rank, peer int, sends, recvs int64) {
			withComm(p, id, rank, 2, 5, 5, 0)
			c := &p.Comms[len(p.Comms)-1]
			c.P2P = []snapshot.P2P{{Peer: peer, Sends: sends, Recvs: recvs, LastSend: us(time.Second), LastRecv: us(time.Second)}}
			if sends+recvs > 40 {
				c.Done.InFlight = &snapshot.Flight{Op: snapshot.Op{Op: "Send"}, P2P: true, GPUStart: us(time.Second)}
			}
		}
		exchange(ps[0], "pair01", 0, 1, 21, 20)
		exchange(ps[1], "pair01", 1, 0, 20, 20)
		exchange(ps[1], "pair12", 0, 1, 20, 20)
		exchange(ps[2], "pair12", 1, 0, 20, 21)
		return mjob(now, ps...)
	}
	if res := Evaluate(p2pSkip(7*time.Second), DefaultConfig(), TimingOK); len(res.Findings) != 0 {
		t.Fatalf("ranks that only wait in NCCL are not paged on their own: %+v", res.Findings)
	}
	res := Evaluate(p2pSkip(30*time.Second), DefaultConfig(), TimingOK)
	if len(res.Findings) != 1 || res.Findings[0].Kind != incident.KindP2PMismatch || culpritRanks(res.Findings[0])[0] != 1 ||
		res.Findings[0].Victims != 3 || res.Findings[0].Cause != incident.CauseMismatch {
		t.Fatalf("want rank 1's p2p mismatch, ranks 0, 2 and 3 its victims: %+v", res.Findings)
	}
}

// counts is rank r with one communicator per entry, n collectives issued on each.
func counts(r int, n map[string]int) *Proc {
	p := rank(r, 0, 100*time.Millisecond, 0, nil)
	p.Comms = nil
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range n {
			if !yield(id) {
				return
			}
		}
	}) {
		c := rank(r, n[id], 100*time.Millisecond, 0, nil).Comms[0]
		c.ID, c.NRanks = id, 2
		p.Comms = append(p.Comms, c)
	}
	return p
}

// TestStopsBehindAStop: rank 3 waits for rank 2 on dp, rank 2 for rank 1 on world: rank 1
// is the root, and the path says so. Where each of ranks 1 and 2 stopped where the other
// waits, neither is the root: they wait for each other, and with no order to tell them
// apart the cycle is a tie.
func TestStopsBehindAStop(t *testing.T) {
	j := job(0, counts(1, map[string]int{"world": 61}), counts(2, map[string]int{"world": 62, "dp": 100}),
		counts(3, map[string]int{"dp": 101}))
	j.Offline = true
	res := Evaluate(j, DefaultConfig(), TimingOK)
	if len(res.Findings) != 1 || culpritRanks(res.Findings[0])[0] != 1 || res.Findings[0].Victims != 2 ||
		!strings.Contains(strings.Join(res.Findings[0].Evidence, "\n"), "rank 3 (node3 pid 103) waits in op 101 of communicator dp for rank 2 (node2 pid 102) to issue it; rank 2 (node2 pid 102) waits in op 62 of communicator world for rank 1") {
		t.Fatalf("want rank 1, two ranks waiting: %+v", res.Findings)
	}
	j = job(0, counts(1, map[string]int{"world": 61, "dp": 101}), counts(2, map[string]int{"world": 62, "dp": 100}))
	j.Offline = true
	res = Evaluate(j, DefaultConfig(), TimingOK)
	if len(res.Findings) != 1 || res.Findings[0].Kind != incident.KindOrderInversion || len(res.Findings[0].Culprits) != 2 ||
		res.Findings[0].Cause != incident.CauseOrder {
		t.Fatalf("want one order inversion naming both: %+v", res.Findings)
	}
}

// TestInversionOutlivesTheStopsItCauses: ranks 0 and 1 each wait on one communicator's
// result before calling the other's collective, so each is "stopped" on the communicator the
// other waits in: a cycle, and the order of their calls (opposite, a tie) is the finding.
func TestInversionOutlivesTheStopsItCauses(t *testing.T) {
	ps := megatron(20, map[int]bool{1: true}, map[int]int{0: 1, 1: 1}, false)[:2]
	ps[0].Comms[0].NRanks, ps[1].Comms[0].NRanks = 2, 2
	j := mjob(0, ps...)
	j.Offline = true
	res := Evaluate(j, DefaultConfig(), TimingOK)
	if len(res.Findings) != 1 || res.Findings[0].Kind != incident.KindOrderInversion || len(res.Findings[0].Culprits) != 2 ||
		!strings.Contains(res.Findings[0].Summary, "cannot be told") {
		t.Fatalf("want the tie: %+v", res.Findings)
	}
}

// TestSlowLinkToAStoppedRank: the send steps to a rank that stopped receiving take long;
// the measured slow link to it is the stop's evidence, an unrelated one stays.
func TestSlowLinkToAStoppedRank(t *testing.T) {
	stopped := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Key: "rank:vm:2",
		culpritKeys: []string{"vm:2"}, Culprits: []incident.Culprit{{Rank: 2}}, measured: true}
	link := func(a, b int) Finding {
		return Finding{Kind: incident.KindLink, Key: fmt.Sprintf("link:%d-%d", a, b), measured: true,
			culpritKeys: []string{fmt.Sprintf("vm:%d", a), fmt.Sprintf("vm:%d", b)}, Culprits: []incident.Culprit{{Rank: a}, {Rank: b}}}
	}
	fs := findings{stalls: []Finding{stopped}, links: []Finding{link(3, 2), link(0, 1)}}
	explain(nil, DefaultConfig(), &fs, "neighbours")
	if len(fs.links) != 1 || fs.links[0].Key != "link:0-1" || len(fs.stalls[0].Evidence) != 1 {
		t.Fatalf("%+v", fs.all())
	}
}

// TestRootCauseClasses: the class of a root's cause comes from its own evidence.
func TestRootCauseClasses(t *testing.T) {
	behindJob := func(edit func(j *Job, root *Proc)) *Job {
		j := job(20*time.Second, rank(0, 30, 100*time.Millisecond, 0, nil), rank(1, 20, 100*time.Millisecond, 0, nil))
		edit(j, j.Procs[1])
		return j
	}
	for _, c := range []struct {
		name string
		j    *Job
		want incident.Cause
		says string
	}{
		{"alive, stopped", behindJob(func(j *Job, p *Proc) { p.Stat = "T" }), incident.CauseHostStalled, "the process is stopped"},
		{"alive, GPU idle", behindJob(func(j *Job, p *Proc) {
			j.Nodes = map[string]*snapshot.Node{"node1": gpuNode("node1", snapshot.GPUIdle)}
		}), incident.CauseHostStalled, "its GPU is idle"},
		{"alive, GPU computing", behindJob(func(j *Job, p *Proc) {
			j.Nodes = map[string]*snapshot.Node{"node1": gpuNode("node1", snapshot.GPUComputing)}
		}), incident.CauseGPUBusy, ""},
		{"alive, its GPU shared with the rank waiting for it", behindJob(func(j *Job, p *Proc) {
			j.Procs[0].Node = "node1"
			j.Nodes = map[string]*snapshot.Node{"node1": gpuNode("node1", snapshot.GPUComputing)}
		}), incident.CauseHostStalled, ""},
		{"alive, XID", behindJob(func(j *Job, p *Proc) {
			j.Nodes = map[string]*snapshot.Node{"node1": gpuNode("node1", snapshot.GPUComputing, 79)}
		}), incident.CauseGPUFault, ""},
		{"died as it stopped", behindJob(func(j *Job, p *Proc) {
			p.State, p.ExitedAt = snapshot.ProcExited, us(2100*time.Millisecond)
			p.Events = []snapshot.Event{{Kind: snapshot.EventSignal, Code: 9, Detail: "Killed"}}
		}), incident.CauseDied, "killed by signal 9"},
		{"died of an exception", behindJob(func(j *Job, p *Proc) {
			p.State, p.ExitedAt = snapshot.ProcExited, us(2100*time.Millisecond)
			p.Events = []snapshot.Event{{Kind: snapshot.EventRankExit, Src: snapshot.ExitTraceback, Detail: "torch.OutOfMemoryError",
				Msg: "CUDA out of memory. Tried to allocate 2.00 GiB", Fatal: true}}
		}), incident.CauseDied, "it ended with torch.OutOfMemoryError: CUDA out of memory"},
		{"killed by the launcher", behindJob(func(j *Job, p *Proc) {
			p.State, p.ExitedAt = snapshot.ProcExited, us(2100*time.Millisecond)
			j.Procs[0].Events = []snapshot.Event{{Kind: snapshot.EventRankExit, Src: snapshot.ExitLauncher, Code: -9, Detail: "SIGKILL",
				PID: p.PID, Fatal: true}}
		}), incident.CauseDied, "the launcher reported it killed by signal 9 (SIGKILL)"},
		{"killed long after it stopped", behindJob(func(j *Job, p *Proc) { p.State, p.ExitedAt = snapshot.ProcExited, us(19*time.Second) }),
			incident.CauseHostStalled, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := only(t, FindHangs(c.j, DefaultConfig()).Stalls, incident.KindHang)
			if f.Cause != c.want {
				t.Fatalf("cause %q, want %q", f.Cause, c.want)
			}
			if in := f.Incident("j", t0); in.Cause != c.want {
				t.Fatalf("incident cause %q", in.Cause)
			}
			if !strings.Contains(strings.Join(f.Evidence, "\n"), c.says) {
				t.Fatalf("evidence lacks %q: %v", c.says, f.Evidence)
			}
		})
	}
}

// BenchmarkEvaluateBehind16384: a world of 16,384 ranks after one rank stopped (the others
// wait for it), and after half of them stopped (a mass failure: half the world waits for
// the other half), offline so that every waiter's wait is judged.
func BenchmarkEvaluateBehind16384(b *testing.B) {
	for _, stopped := range []int{1, 8192} {
		b.Run(fmt.Sprintf("stopped=%d", stopped), func(b *testing.B) {
			ps := make([]*Proc, 16384)
			for r := range ps {
				n := 30
				if r%(16384/stopped) == 1 {
					n = 29
				}
				ps[r] = rank(r, n, 100*time.Millisecond, 0, nil)
			}
			j := job(0, ps...)
			j.Offline = true
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if res := Evaluate(j, DefaultConfig(), TimingNone); len(res.Findings) == 0 {
					b.Fatal("no finding")
				}
			}
		})
	}
}
