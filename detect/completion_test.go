package detect

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Rules over the profiler plugin's completion state, on a fake clock: ranks of one
// communicator "0xc0ffee" whose plugin says what they issued, run on the GPU and completed.

// pluginRank is rank r with the plugin's view of communicator 0xc0ffee: issued collectives,
// completed ones, and the op in flight (nil: idle) on its GPU since gpuAt (0: not started).
func pluginRank(r int, issued, done int64, gpuAt time.Duration, busy time.Duration) *Proc {
	p := rank(r, int(issued), 100*time.Millisecond, 0, nil)
	p.Source = snapshot.SourcePlugin
	d := &snapshot.Completion{Issued: issued, Started: done, Done: done, LastDone: us(time.Duration(done) * 100 * time.Millisecond),
		Timing: &snapshot.Timing{N: 50, Window: 30e6, Busy: busy.Microseconds(), Queue: 200}}
	if done < issued {
		op := p.Comms[0].Recent[done]
		d.InFlight = &snapshot.Flight{Op: op}
		if gpuAt != 0 {
			d.InFlight.GPUStart = us(gpuAt)
			d.Started = done + 1
		}
	}
	p.Comms[0].Done = d
	return p
}

// waitOn adds an open network transfer with peer to a plugin rank.
func waitOn(p *Proc, peer int, dir snapshot.Dir, state snapshot.ProxyState) *Proc {
	d := p.Comms[0].Done
	d.Peers = append(d.Peers, snapshot.PeerProgress{Peer: peer, Dir: dir, Open: 1, Steps: 8, StepsDone: 3, State: state,
		StateAt: d.InFlight.GPUStart})
	return p
}

func TestCompletionHangNamesTheRankThatDidNotIssue(t *testing.T) {
	cfg := DefaultConfig()
	start := 3100 * time.Millisecond // ranks 0 and 2 put collective 31 on their GPUs
	mk := func(now time.Duration) *Job {
		return job(now, pluginRank(0, 31, 30, start, 20*time.Millisecond), pluginRank(1, 30, 30, 0, 20*time.Millisecond),
			pluginRank(2, 31, 30, start+5*time.Millisecond, 20*time.Millisecond))
	}
	// Window max(2 s, 10 × 20 ms).
	if fs := FindHangs(mk(start+1900*time.Millisecond), cfg).Stalls; len(fs) != 0 {
		t.Fatalf("hang inside the window: %+v", fs)
	}
	f := only(t, FindHangs(mk(start+2100*time.Millisecond), cfg).Stalls, incident.KindHang)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.Seq != 31 || f.Victims != 2 || !f.measured ||
		!strings.Contains(f.Summary, "has not issued collective 31") {
		t.Fatalf("culprits %v seq %d victims %d: %s", got, f.Seq, f.Victims, f.Summary)
	}
	// The log rule sees the same rank behind after its 10 s window: one incident, the measured one.
	res := Evaluate(mk(start+12*time.Second), cfg, TimingOK)
	if len(res.Findings) != 1 || !res.Findings[0].measured || !strings.Contains(strings.Join(res.Findings[0].Evidence, "\n"), "also: rank 1") {
		t.Fatalf("findings %+v", res.Findings)
	}
}

// TestCompletionHangOfABusyGPU: a rank that issued the op its peers run, but whose GPU never
// starts it, holds them up as much as one that never issued it.
func TestCompletionHangOfABusyGPU(t *testing.T) {
	j := job(10*time.Second, pluginRank(0, 31, 30, 3100*time.Millisecond, 20*time.Millisecond),
		pluginRank(1, 31, 30, 0, 20*time.Millisecond))
	f := only(t, FindHangs(j, DefaultConfig()).Stalls, incident.KindHang)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || !strings.Contains(f.Summary, "its GPU has not started collective 31") {
		t.Fatalf("culprits %v: %s", got, f.Summary)
	}
}

func TestCompletionHangWindowFollowsOpDuration(t *testing.T) {
	cfg := DefaultConfig()
	// Ops that take 500 ms on the GPU: the window is 10 × 500 ms = 5 s.
	mk := func(now time.Duration) *Job {
		return job(now, pluginRank(0, 31, 30, 4*time.Second, 500*time.Millisecond), pluginRank(1, 30, 30, 0, 500*time.Millisecond))
	}
	if w := cfg.CompletionWindow(mk(0).Groups[0]); w != 5*time.Second {
		t.Fatalf("window %s", w)
	}
	if fs := FindHangs(mk(8*time.Second), cfg).Stalls; len(fs) != 0 {
		t.Fatalf("hang inside an adapted window: %+v", fs)
	}
	only(t, FindHangs(mk(9100*time.Millisecond), cfg).Stalls, incident.KindHang)
}

// TestNoIncidentWithoutACulprit: a healthy job (an op in flight for milliseconds on every
// rank, or one rank slower to start it), a checkpoint or an evaluation pause (nothing in
// flight anywhere, GPUs idle, for a minute) page nothing.
func TestNoIncidentWithoutACulprit(t *testing.T) {
	cfg := DefaultConfig()
	for _, c := range []struct {
		name string
		j    *Job
	}{
		{"healthy, all in the same op", job(3150*time.Millisecond, pluginRank(0, 31, 30, 3100*time.Millisecond, 20*time.Millisecond),
			pluginRank(1, 31, 30, 3120*time.Millisecond, 20*time.Millisecond))},
		{"one rank issued but its GPU has not started yet", job(3300*time.Millisecond, pluginRank(0, 31, 30, 3100*time.Millisecond, 20*time.Millisecond),
			pluginRank(1, 31, 30, 0, 20*time.Millisecond))},
		{"checkpoint: everything done, nothing issued", job(63*time.Second, pluginRank(0, 30, 30, 0, 20*time.Millisecond),
			pluginRank(1, 30, 30, 0, 20*time.Millisecond), pluginRank(2, 30, 30, 0, 20*time.Millisecond))},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.j.Nodes = map[string]*snapshot.Node{"node0": gpuNode("node0", snapshot.GPUIdle), "node1": gpuNode("node1", snapshot.GPUIdle),
				"node2": gpuNode("node2", snapshot.GPUIdle)}
			if res := Evaluate(c.j, cfg, TimingOK); len(res.Findings) != 0 {
				t.Fatalf("findings %+v", res.Findings)
			}
		})
	}
}

func TestStuckWaitsNamesWhatTheWaitingPointsAt(t *testing.T) {
	cfg := DefaultConfig()
	at := 3 * time.Second
	ring := func(now time.Duration, waits ...[3]int) *Job {
		var ps []*Proc
		for r := 0; r < 4; r++ {
			ps = append(ps, pluginRank(r, 31, 30, at+time.Duration(r)*time.Millisecond, 20*time.Millisecond))
		}
		states := map[int]snapshot.ProxyState{0: snapshot.ProxyRecvWait, 1: snapshot.ProxySendPeerWait, 2: snapshot.ProxySendWait,
			3: snapshot.ProxyRecvGPUWait}
		dirs := map[int]snapshot.Dir{0: snapshot.DirRecv, 1: snapshot.DirSend, 2: snapshot.DirSend, 3: snapshot.DirRecv}
		for _, w := range waits { // rank, peer, kind
			waitOn(ps[w[0]], w[1], dirs[w[2]], states[w[2]])
		}
		return job(now, ps...)
	}
	const recv, sendPeer, sendNet, ownGPU = 0, 1, 2, 3
	for _, c := range []struct {
		name    string
		waits   [][3]int
		culprit []int
		says    string
		cause   incident.Cause
	}{
		// Rank 2 frozen: its successor waits for its data, its predecessor for its receive;
		// rank 0 waits for rank 3, which got nothing; rank 2's own state is stale.
		{"a frozen rank", [][3]int{{3, 2, recv}, {1, 2, sendPeer}, {0, 3, recv}, {2, 1, recv}}, []int{2}, "wait on rank 2",
			incident.CauseHostStalled},
		{"data stuck on one link", [][3]int{{0, 1, sendNet}, {1, 0, recv}, {2, 1, recv}, {3, 2, recv}}, []int{0, 1},
			"link between rank 0", incident.CauseLink},
		{"a ring waiting round", [][3]int{{0, 3, recv}, {1, 0, recv}, {2, 1, recv}, {3, 2, recv}}, []int{0, 1, 2, 3},
			"no single rank or link", incident.CauseUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			if fs := FindHangs(ring(at+2*time.Second, c.waits...), cfg).Stuck; len(fs) != 0 {
				t.Fatalf("inside the window: %+v", fs)
			}
			f := only(t, FindHangs(ring(at+4*time.Second, c.waits...), cfg).Stuck, incident.KindStuckInFlight)
			got := culpritRanks(f)
			sort.Ints(got)
			if fmt.Sprint(got) != fmt.Sprint(c.culprit) || !strings.Contains(f.Summary, c.says) || len(f.Evidence) < 4 || f.Cause != c.cause {
				t.Fatalf("culprits %v cause %q: %s\n%s", got, f.Cause, f.Summary, strings.Join(f.Evidence, "\n"))
			}
		})
	}
}

// TestStuckWaitsReplacesTheGPUGuess: the GPU-power rule sees the same stuck collective; the
// plugin's finding, which names the rank, is the one incident.
func TestStuckWaitsReplacesTheGPUGuess(t *testing.T) {
	cfg := DefaultConfig()
	var ps []*Proc
	for r := 0; r < 2; r++ {
		ps = append(ps, pluginRank(r, 30, 29, 2900*time.Millisecond, 20*time.Millisecond))
	}
	waitOn(ps[0], 1, snapshot.DirRecv, snapshot.ProxyRecvWait)
	j := job(20*time.Second, ps...)
	j.Nodes = map[string]*snapshot.Node{"node0": gpuNode("node0", snapshot.GPUWaiting), "node1": gpuNode("node1", snapshot.GPUWaiting)}
	res := Evaluate(j, cfg, TimingOK)
	if len(res.Findings) != 1 || !res.Findings[0].measured || culpritRanks(res.Findings[0])[0] != 1 {
		t.Fatalf("findings %+v", res.Findings)
	}
}

// TestExitedRankStateIsStale: a rank that died with collective 31 on its GPU shows it there
// for ever; the rank that never issued 31 is not called hung for it (the crash rule judges).
func TestExitedRankStateIsStale(t *testing.T) {
	dead := pluginRank(0, 31, 30, 3100*time.Millisecond, 20*time.Millisecond)
	dead.State, dead.ExitedAt = snapshot.ProcExited, us(3200*time.Millisecond)
	j := job(20*time.Second, dead, pluginRank(1, 30, 30, 0, 20*time.Millisecond))
	h := FindHangs(j, DefaultConfig())
	for _, f := range slices.Concat(h.Inversions, h.Stalls, h.Stuck) {
		if f.measured {
			t.Fatalf("a finding from a dead rank's state: %+v", f)
		}
	}
}
