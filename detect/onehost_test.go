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
	explain(&Job{}, DefaultConfig(), &fs, "mismatch-comm")
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

// A closed connection is a witness: live, before the root it saw is known (the sidecars'
// liveness checks, the launcher's record, the hang side's window), it waits instead of
// opening a culprit-less crash that the root's own incident would then double; alone after
// the hang floor and a little more it is reported.
func TestAWitnessWaitsForTheDeathItSaw(t *testing.T) {
	for _, c := range []struct {
		name  string
		now   time.Duration // the connection closed at 9.8 s
		crash bool
	}{{"fresh, alone", 11 * time.Second, false}, {"alone past the grace", 22 * time.Second, true}} {
		t.Run(c.name, func(t *testing.T) {
			ps := oneHost()
			for _, p := range ps[:3] {
				p.Events = append(p.Events, snapshot.Event{Kind: snapshot.EventConnClosedRemote, T: us(9800 * time.Millisecond),
					Peer: "127.0.0.1<47694>", Stage: snapshot.StageRun, Msg: "socketProgress: Connection closed by remote peer localhost<47694>"})
			}
			var crashes []Finding
			for _, f := range Evaluate(job(c.now, ps...), DefaultConfig(), TimingOK).Findings {
				if f.Kind == incident.KindCrash {
					crashes = append(crashes, f)
				}
			}
			if (len(crashes) > 0) != c.crash {
				t.Fatalf("crash findings %+v, want some: %v", crashes, c.crash)
			}
		})
	}
}
