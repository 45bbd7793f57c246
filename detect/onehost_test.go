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

// oneHost puts four ranks on one host (as a node's eight GPUs, or ranks sharing one GPU):
// NCCL's socket lines then name the host, never which of its ranks.
func oneHost() []*Proc {
	var ps []*Proc
	for r := 0; r < 4; r++ {
		p := rank(r, 100, 100*time.Millisecond, 0, nil)
		p.Host, p.Node, p.LocalRank = "vm", "vm", r
		p.Addrs = []string{"10.0.0.7"}
		p.State = snapshot.ProcRunning
		ps = append(ps, p)
	}
	return ps
}

func TestBrokenConnectionsNameTheRankThatDied(t *testing.T) {
	for _, peer := range []string{"10.0.0.7<40001>", "127.0.0.1<40001>"} {
		t.Run(peer, func(t *testing.T) {
			ps := oneHost()
			dead := ps[1]
			dead.Comms[0].Count, dead.Comms[0].Recent = 95, dead.Comms[0].Recent[:95]
			last := dead.Comms[0].Recent[94]
			dead.Comms[0].Last = &last
			dead.State, dead.ExitedAt = snapshot.ProcExited, us(10*time.Second)
			for _, p := range ps {
				if p == dead {
					continue
				}
				p.Events = append(p.Events, snapshot.Event{Kind: snapshot.EventConnClosedRemote, T: us(9800 * time.Millisecond),
					Peer: peer, Stage: snapshot.StageRun, Msg: "socketProgress: Connection closed by remote peer " + peer})
			}
			j := job(12*time.Second, ps...)
			res := Evaluate(j, DefaultConfig(), TimingOK)
			f := only(t, res.Findings, incident.KindCrash)
			if got := culpritRanks(f); len(got) != 1 || got[0] != 1 {
				t.Fatalf("culprits %v, want rank 1 (the process that exited): %s\n%v", got, f.Summary, f.Evidence)
			}
			if !f.FaultAt.Equal(t0.Add(9800 * time.Millisecond)) {
				t.Errorf("fault at %s, want the first broken connection (9.8 s), before the exit was seen", f.FaultAt.Sub(t0))
			}
		})
	}
}

// TestTheDeadIsNotTheOneThatSawItDie: rank 1 exits without a word; ranks 0 and 2 see their
// connections closed by the peer and abort; one liveness check sees all three gone at once.
// The rank whose death broke the connections is rank 1 (seen on the H100 with INFO logs).
func TestTheDeadIsNotTheOneThatSawItDie(t *testing.T) {
	ps := oneHost()
	for _, r := range []int{0, 1, 2} {
		p := ps[r]
		n := int64(62)
		if r == 1 {
			n = 60
		}
		p.Comms[0].Count, p.Comms[0].Recent = n, p.Comms[0].Recent[:n]
		last := p.Comms[0].Recent[n-1]
		p.Comms[0].Last = &last
		p.State, p.ExitedAt = snapshot.ProcExited, us(10*time.Second)
		if r != 1 {
			p.Events = append(p.Events, snapshot.Event{Kind: snapshot.EventConnClosedRemote, T: us(9800 * time.Millisecond),
				Peer: "127.0.0.1<47694>", Stage: snapshot.StageRun, Msg: "socketProgress: Connection closed by remote peer localhost<47694>"})
		}
	}
	res := Evaluate(job(12*time.Second, ps...), DefaultConfig(), TimingOK)
	f := only(t, res.Findings, incident.KindCrash)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 {
		t.Fatalf("culprits %v, want rank 1 (the one that reported nothing): %s\n%v", got, f.Summary, f.Evidence)
	}
}

func TestFinalizedPluginProcessEndedCleanly(t *testing.T) {
	ps := oneHost()
	for _, p := range ps {
		// NCCL_DEBUG=WARN: no Destroy line; the plugin says every communicator was finalized.
		p.State, p.ExitedAt = snapshot.ProcExited, us(10*time.Second)
		p.Source, p.Plugin = snapshot.SourcePlugin, &snapshot.Plugin{ABI: 5, Finalized: true}
	}
	res := Evaluate(job(12*time.Second, ps...), DefaultConfig(), TimingOK)
	if len(res.Findings) != 0 {
		t.Fatalf("a job whose ranks all finalized and exited ended cleanly: %+v", res.Findings)
	}
	ps[2].Plugin.Finalized = false // one rank died with its communicators in use
	res = Evaluate(job(12*time.Second, ps...), DefaultConfig(), TimingOK)
	if f := only(t, res.Findings, incident.KindCrash); len(f.Culprits) != 1 || f.Culprits[0].Rank != 2 {
		t.Fatalf("want rank 2: %+v", f)
	}
}

// TestStoppedRankExplainsNeighbours: what the device showed with four ranks on one GPU and
// the plugin: rank 2 stopped issuing; rank 3's GPU never started the op (busy behind one that
// waits for rank 2), its send steps to rank 2 took long, and an order "tie" named ranks 2 and
// 3. One incident: rank 2's.
func TestStoppedRankExplainsNeighbours(t *testing.T) {
	stopped := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Key: "rank:vm:2",
		culpritKeys: []string{"vm:2"}, Culprits: []incident.Culprit{{Rank: 2}}, measured: true, Summary: "rank 2 has not issued"}
	busy := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Key: "rank:vm:3",
		culpritKeys: []string{"vm:3"}, Culprits: []incident.Culprit{{Rank: 3}}, measured: true, queued: true, Summary: "rank 3 issued but its GPU has not started"}
	slow := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Key: "link:3-2",
		culpritKeys: []string{"vm:3", "vm:2"}, Culprits: []incident.Culprit{{Rank: 3}, {Rank: 2}}, measured: true, Summary: "slow link 3-2"}
	tie := Finding{Kind: incident.KindOrderInversion, Severity: incident.SeverityCritical, Key: "inversion:a:b",
		culpritKeys: []string{"vm:2", "vm:3"}, Culprits: []incident.Culprit{{Rank: 2}, {Rank: 3}}, Summary: "tie 2,3"}
	otherLink := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Key: "link:0-1",
		culpritKeys: []string{"vm:0", "vm:1"}, Culprits: []incident.Culprit{{Rank: 0}, {Rank: 1}}, measured: true, Summary: "slow link 0-1"}
	for _, order := range [][]Finding{{busy, stopped}, {stopped, busy}} {
		fs := findings{stalls: append([]Finding(nil), order...), links: []Finding{slow, otherLink}, inversions: []Finding{tie}}
		stoppedRankExplainsNeighbours(&Job{}, DefaultConfig(), &fs)
		all := fs.all()
		if len(all) != 2 || all[0].Key != "rank:vm:2" && all[1].Key != "rank:vm:2" {
			t.Fatalf("want rank 2's hang and the unrelated link, got %+v", all)
		}
		for _, f := range all {
			if f.Key == "rank:vm:2" && len(f.Evidence) != 3 {
				t.Errorf("rank 2's finding should carry the three consequences: %v", f.Evidence)
			}
		}
	}
}

// TestInversionOutlivesTheStopsItCauses: ranks 0 and 1 each wait on one communicator's
// result before calling the other's collective, so each is "stopped" on the communicator the
// other waits in. The tie is the cause; the two stops stay for the inversion to explain.
func TestInversionOutlivesTheStopsItCauses(t *testing.T) {
	stop := func(r int) Finding {
		k := fmt.Sprintf("vm:%d", r)
		return Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Key: "rank:" + k,
			culpritKeys: []string{k}, Culprits: []incident.Culprit{{Rank: r}}, measured: true}
	}
	tie := Finding{Kind: incident.KindOrderInversion, Severity: incident.SeverityCritical, Key: "inversion:a:b",
		culpritKeys: []string{"vm:0", "vm:1"}, Culprits: []incident.Culprit{{Rank: 0}, {Rank: 1}}}
	fs := findings{stalls: []Finding{stop(0), stop(1)}, inversions: []Finding{tie}}
	stoppedRankExplainsNeighbours(&Job{}, DefaultConfig(), &fs)
	if len(fs.inversions) != 1 || len(fs.stalls) != 2 {
		t.Fatalf("the tie and both stops should be left to inversionExplainsStalls, got %+v", fs.all())
	}
}

// TestStopsBehindAStop: rank 2 issued more than rank 1 on the world communicator (it waits
// there on rank 1) and stopped elsewhere: its stop follows rank 1's. When each is ahead of
// the other somewhere they wait on each other, and both stay.
func TestStopsBehindAStop(t *testing.T) {
	proc := func(r int, counts map[string]int64) *Proc {
		p := &Proc{Process: snapshot.Process{Host: "vm", PID: 10 + r, Rank: r}}
		for id, n := range counts {
			p.Comms = append(p.Comms, snapshot.Comm{ID: id, Count: n})
		}
		return p
	}
	stop := func(p *Proc) Finding {
		return Finding{Kind: incident.KindHang, Key: "rank:" + p.Key(), culpritKeys: []string{p.Key()},
			Culprits: []incident.Culprit{p.Culprit()}}
	}
	for _, c := range []struct {
		name   string
		r1, r2 map[string]int64
		want   int
	}{
		{"rank 2 waits on rank 1", map[string]int64{"world": 61, "tp": 20}, map[string]int64{"world": 62, "dp": 100}, 1},
		{"each waits on the other", map[string]int64{"world": 61, "dp": 101}, map[string]int64{"world": 62, "dp": 100}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			p1, p2 := proc(1, c.r1), proc(2, c.r2)
			fs := findings{stalls: []Finding{stop(p2), stop(p1)}}
			stopsBehindAStop(&Job{Procs: []*Proc{p1, p2}}, DefaultConfig(), &fs)
			if len(fs.stalls) != c.want || (c.want == 1 && fs.stalls[0].Culprits[0].Rank != 1) {
				t.Fatalf("want %d finding(s), rank 1 first: %+v", c.want, fs.stalls)
			}
		})
	}
}

// TestEarlyExitIsNamedAsSuch: rank 1 ran out of batches, destroyed its communicator and
// exited 0 while the others went on into the next collective. It is the hang's culprit,
// and the evidence says it ended early rather than crashed or stuck in host code.
func TestEarlyExitIsNamedAsSuch(t *testing.T) {
	ps := oneHost()
	early := ps[1]
	early.Comms[0].Count, early.Comms[0].Recent = 95, early.Comms[0].Recent[:95]
	last := early.Comms[0].Recent[94]
	early.Comms[0].Last = &last
	early.Comms[0].State = snapshot.CommDestroyed
	early.State, early.ExitedAt = snapshot.ProcExited, us(10*time.Second)
	res := Evaluate(job(25*time.Second, ps...), DefaultConfig(), TimingOK)
	f := only(t, res.Findings, incident.KindHang)
	ev := strings.Join(f.Evidence, "\n")
	if culpritRanks(f)[0] != 1 || !strings.Contains(ev, "it ended early") || strings.Contains(ev, "host code is stuck") {
		t.Fatalf("want rank 1, ended early: %s\n%s", f.Summary, ev)
	}
}

// TestMismatchExplainsItsCommunicator: live on one H100, rank 1's Broadcast against rank 3's
// AllReduce on their data-parallel pair also showed as a slow link 3->1 and rank 1 as a
// straggler on that pair: one root cause. A straggler elsewhere is its own.
func TestMismatchExplainsItsCommunicator(t *testing.T) {
	mk := func(kind incident.Kind, comm, key string, ranks ...int) Finding {
		f := Finding{Kind: kind, Severity: incident.SeverityWarning, Comm: comm, Key: key}
		for _, r := range ranks {
			f.Culprits = append(f.Culprits, incident.Culprit{Rank: r})
			f.culpritKeys = append(f.culpritKeys, fmt.Sprintf("vm:%d", r))
		}
		return f
	}
	mism := mk(incident.KindMismatch, "dp13", "mismatch:dp13", 1)
	mism.Severity = incident.SeverityCritical
	fs := findings{mism: []Finding{mism},
		links: []Finding{mk(incident.KindLink, "dp13", "link:3-1", 3, 1)},
		rest: []Finding{mk(incident.KindStraggler, "dp13", "straggler:vm:1", 1), mk(incident.KindStraggler, "dp02", "straggler:vm:2", 2),
			mk(incident.KindGPU, "dp13", "gpu:vm:1", 1)}}
	mismatchExplainsItsCommunicator(&Job{}, DefaultConfig(), &fs)
	var keys []string
	for _, f := range fs.all() {
		keys = append(keys, f.Key)
	}
	if want := []string{"mismatch:dp13", "straggler:vm:2", "gpu:vm:1"}; !slices.Equal(keys, want) {
		t.Fatalf("kept %v, want %v", keys, want)
	}
	if ev := strings.Join(fs.mism[0].Evidence, "\n"); strings.Count(ev, "also:") != 2 {
		t.Fatalf("the mismatch should carry the link and the straggler: %s", ev)
	}
}

// TestQueuedBehindTheirCause: live on one H100. gpu_hang: rank 1's GPU ran one long kernel,
// so neither its collectives nor rank 0's (queued behind a tensor-parallel all-reduce that
// waits for rank 1) started: both were found "issued, not started", and rank 0's paged on
// its own. The rank whose GPU runs no NCCL op is the cause. p2p_skip: rank 1 skipped a
// receive; ranks 0 and 2, queued behind ops that wait for it, follow its p2p mismatch.
func TestQueuedBehindTheirCause(t *testing.T) {
	p := func(r int, ncclOnGPU bool) *Proc {
		pr := &Proc{Process: snapshot.Process{Host: "vm", PID: r, Rank: r}}
		c := snapshot.Comm{ID: "tp", Rank: r, NRanks: 2, Done: &snapshot.Completion{}}
		if ncclOnGPU {
			c.Done.InFlight = &snapshot.Flight{GPUStart: snapshot.MicrosOf(t0)}
		}
		pr.Comms = []snapshot.Comm{c}
		return pr
	}
	queued := func(pr *Proc) Finding {
		return Finding{Kind: incident.KindHang, Key: "rank:" + pr.Key(), queued: true, measured: true,
			culpritKeys: []string{pr.Key()}, Culprits: []incident.Culprit{pr.Culprit()}}
	}
	r0, r1, r2 := p(0, true), p(1, false), p(2, true)
	j := &Job{Procs: []*Proc{r0, r1, r2}}
	for _, c := range []struct {
		name   string
		stalls []Finding
		want   string
	}{
		{"gpu_hang", []Finding{queued(r0), queued(r1)}, "rank:" + r1.Key()},
		{"p2p_skip", []Finding{queued(r0), {Kind: incident.KindP2PMismatch, Key: "p2p:1", culpritKeys: []string{r1.Key()}}, queued(r2)}, "p2p:1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := findings{stalls: append([]Finding(nil), c.stalls...)}
			stoppedRankExplainsNeighbours(j, DefaultConfig(), &fs)
			if len(fs.stalls) != 1 || fs.stalls[0].Key != c.want || len(fs.stalls[0].Evidence) != len(c.stalls)-1 {
				t.Fatalf("want only %s, with the others as evidence: %+v", c.want, fs.stalls)
			}
		})
	}
	// Every queued rank runs NCCL ops that wait (p2p_skip before the p2p rule's window):
	// none is the cause, and none is paged.
	fs := findings{stalls: []Finding{queued(r0), queued(r2)}}
	stoppedRankExplainsNeighbours(j, DefaultConfig(), &fs)
	if len(fs.stalls) != 0 {
		t.Fatalf("ranks that all wait in NCCL are not paged on their own: %+v", fs.stalls)
	}
}
