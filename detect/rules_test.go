package detect

import (
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// t0 is the fake clock's origin: rules read time only from the Job.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func us(d time.Duration) snapshot.Micros { return snapshot.MicrosOf(t0.Add(d)) }

// step is the op pattern every rank issues per training step.
var step = []snapshot.Op{
	{Op: "AllReduce", Count: 6000000, Dtype: "float32", Red: "sum"},
	{Op: "AllReduce", Count: 2000000, Dtype: "float32", Red: "sum"},
	{Op: "AllGather", Count: 262144, Dtype: "bfloat16"},
}

// rank builds a process with one communicator "0xc0ffee" holding n ops at period apart,
// each arriving lag late; edit mutates ops by position.
func rank(r, n int, period, lag time.Duration, edit func(seq int64, o *snapshot.Op)) *Proc {
	c := snapshot.Comm{ID: "0xc0ffee", Ptr: "0x1", Rank: r, NRanks: 0, State: "ready"}
	for s := int64(1); s <= int64(n); s++ {
		o := step[(s-1)%int64(len(step))]
		o.Seq, o.T = s, us(time.Duration(s)*period+lag)
		if edit != nil {
			edit(s, &o)
		}
		c.Recent = append(c.Recent, o)
	}
	c.Count = int64(n)
	if n > 0 {
		last := c.Recent[n-1]
		c.Last = &last
	}
	return &Proc{Process: snapshot.Process{Host: "node" + string(rune('0'+r)), PID: 100 + r, Rank: r, LocalRank: 0, CudaDev: 0,
		BusID: "1b000", Comms: []snapshot.Comm{c}}, Node: "node" + string(rune('0'+r))}
}

func job(now time.Duration, procs ...*Proc) *Job {
	for _, p := range procs {
		for i := range p.Comms {
			p.Comms[i].NRanks = len(procs)
		}
	}
	return NewJob("j", t0.Add(now), procs, map[string]*snapshot.Node{})
}

func only(t *testing.T, fs []Finding, kind incident.Kind) Finding {
	t.Helper()
	var got []Finding
	for _, f := range fs {
		if f.Kind == kind {
			got = append(got, f)
		}
	}
	if len(got) != 1 {
		t.Fatalf("want one %s finding, got %d: %+v", kind, len(got), fs)
	}
	return got[0]
}

func culpritRanks(f Finding) []int {
	var out []int
	for _, c := range f.Culprits {
		out = append(out, c.Rank)
	}
	return out
}

func TestHangWaitsForTheWindow(t *testing.T) {
	cfg := DefaultConfig()
	period := 100 * time.Millisecond
	mk := func(now time.Duration) []Finding {
		return Hang(job(now, rank(0, 30, period, 0, nil), rank(1, 27, period, 0, nil), rank(2, 30, period, 0, nil)), cfg)
	}
	// Ops stopped at 3 s; the window is max(10 s, 4 × p99 gap 100 ms) = 10 s.
	if fs := mk(3*time.Second + 9*time.Second); len(fs) != 0 {
		t.Fatalf("hang before the window: %+v", fs)
	}
	f := only(t, mk(3*time.Second+11*time.Second), incident.KindHang)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.Seq != 28 || f.Victims != 2 {
		t.Fatalf("culprits %v seq %d victims %d; want rank 1, seq 28, 2 victims", got, f.Seq, f.Victims)
	}
}

func TestHangWindowAdaptsToSlowCommunicators(t *testing.T) {
	cfg := DefaultConfig()
	// One op every 5 s: 4 × p99 gap = 20 s > the 10 s floor.
	j := job(150*time.Second+15*time.Second, rank(0, 30, 5*time.Second, 0, nil), rank(1, 29, 5*time.Second, 0, nil))
	if w := cfg.HangWindow(j.Groups[0]); w != 20*time.Second {
		t.Fatalf("window %s, want 20s", w)
	}
	if fs := Hang(j, cfg); len(fs) != 0 {
		t.Fatalf("hang inside an adapted window: %+v", fs)
	}
}

func TestOneHangFindingPerCulpritAcrossCommunicators(t *testing.T) {
	a, b := rank(0, 30, 100*time.Millisecond, 0, nil), rank(1, 20, 100*time.Millisecond, 0, nil)
	for _, p := range []*Proc{a, b} {
		second := p.Comms[0]
		second.ID = "0xc0ffee/s1c7"
		p.Comms = append(p.Comms, second)
	}
	fs := Hang(job(20*time.Second, a, b), DefaultConfig())
	f := only(t, fs, incident.KindHang)
	if !strings.Contains(f.Summary, "stalled 2 communicators") {
		t.Fatalf("summary %q", f.Summary)
	}
}

func TestMismatchMinorityAndSkip(t *testing.T) {
	t.Run("three ranks: the minority is the culprit", func(t *testing.T) {
		odd := rank(2, 30, 100*time.Millisecond, 0, func(s int64, o *snapshot.Op) {
			if s == 17 {
				o.Dtype = "bfloat16"
			}
		})
		f := only(t, Mismatch(job(5*time.Second, rank(0, 30, 100*time.Millisecond, 0, nil), rank(1, 30, 100*time.Millisecond, 0, nil), odd)), incident.KindMismatch)
		if got := culpritRanks(f); len(got) != 1 || got[0] != 2 || f.Seq != 17 || f.Ops["2"].Datatype != "bfloat16" {
			t.Fatalf("culprits %v seq %d ops %+v", got, f.Seq, f.Ops)
		}
	})
	t.Run("a skipped op is named as skipped", func(t *testing.T) {
		// Rank 1 skips op 14 (the 2M AllReduce of step 5): its later ops are the others' shifted by one.
		skipper := rank(1, 29, 100*time.Millisecond, 0, func(s int64, o *snapshot.Op) {
			if s >= 14 {
				n := step[s%int64(len(step))]
				o.Op, o.Count, o.Dtype, o.Red = n.Op, n.Count, n.Dtype, n.Red
			}
		})
		f := only(t, Mismatch(job(5*time.Second, rank(0, 30, 100*time.Millisecond, 0, nil), skipper)), incident.KindMismatch)
		if f.Seq != 14 || !strings.Contains(strings.Join(f.Evidence, " "), "skipped AllReduce(count 2000000") {
			t.Fatalf("seq %d evidence %q", f.Seq, f.Evidence)
		}
		if got := culpritRanks(f); len(got) != 1 || got[0] != 1 {
			t.Fatalf("culprits %v, want rank 1", got)
		}
	})
}

func TestMismatchFromMarksOutsideTheRecentWindow(t *testing.T) {
	a, b := rank(0, 10, time.Second, 0, nil), rank(1, 10, time.Second, 0, nil)
	a.Comms[0].Marks = []snapshot.Mark{{Seq: 4096, Digest: "aa"}, {Seq: 8192, Digest: "bb"}}
	b.Comms[0].Marks = []snapshot.Mark{{Seq: 4096, Digest: "aa"}, {Seq: 8192, Digest: "cc"}}
	a.Comms[0].Recent, b.Comms[0].Recent = nil, nil
	a.Comms[0].Last, b.Comms[0].Last = nil, nil
	fs := Mismatch(job(time.Second, a, b))
	f := only(t, fs, incident.KindMismatch)
	if f.Seq != 4097 || !strings.Contains(f.Summary, "between positions 4097 and 8192") {
		t.Fatalf("seq %d summary %q", f.Seq, f.Summary)
	}
}

func TestP2PMismatch(t *testing.T) {
	a, b := rank(0, 5, 100*time.Millisecond, 0, nil), rank(1, 5, 100*time.Millisecond, 0, nil)
	a.Comms[0].P2P = []snapshot.P2P{{Peer: 1, Sends: 12, Recvs: 12, LastSend: us(time.Second)}}
	b.Comms[0].P2P = []snapshot.P2P{{Peer: 0, Sends: 12, Recvs: 11, LastRecv: us(time.Second)}}
	f := only(t, P2PMismatch(job(30*time.Second, a, b), DefaultConfig()), incident.KindP2PMismatch)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 {
		t.Fatalf("culprits %v: rank 1 posted one receive too few", got)
	}
}

func TestStraggler(t *testing.T) {
	cfg := DefaultConfig()
	period := 100 * time.Millisecond
	t.Run("constant 60 ms late", func(t *testing.T) {
		fs := Straggler(job(5*time.Second, rank(0, 60, period, 0, nil), rank(1, 60, period, 60*time.Millisecond, nil), rank(2, 60, period, time.Millisecond, nil)), cfg, TimingOK)
		f := only(t, fs, incident.KindStraggler)
		if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.LagSeconds < 0.055 || f.LagSeconds > 0.065 {
			t.Fatalf("culprits %v lag %.3f", got, f.LagSeconds)
		}
	})
	t.Run("onset", func(t *testing.T) {
		late := rank(1, 60, period, 0, func(s int64, o *snapshot.Op) {
			if s >= 25 {
				o.T += snapshot.Micros(80 * time.Millisecond / time.Microsecond)
			}
		})
		f := only(t, Straggler(job(10*time.Second, rank(0, 60, period, 0, nil), late), cfg, TimingOK), incident.KindStraggler)
		if f.Seq != 25 {
			t.Fatalf("onset at %d, want 25", f.Seq)
		}
	})
	t.Run("jitter below 20 ms is not a straggler", func(t *testing.T) {
		fs := Straggler(job(5*time.Second, rank(0, 60, period, 0, nil), rank(1, 60, period, 8*time.Millisecond, nil)), cfg, TimingOK)
		if len(fs) != 0 {
			t.Fatalf("%+v", fs)
		}
	})
	t.Run("no claim without usable timing", func(t *testing.T) {
		fs := Straggler(job(5*time.Second, rank(0, 60, period, 0, nil), rank(1, 60, period, 60*time.Millisecond, nil)), cfg, TimingNone)
		if len(fs) != 0 {
			t.Fatalf("%+v", fs)
		}
	})
}

func gpuNode(name string, state snapshot.GPUState, xids ...int) *snapshot.Node {
	g := snapshot.GPU{Index: 0, BusID: "1b000", Util: 100, PowerW: 120, PowerLimitW: 700, State: state}
	for _, x := range xids {
		g.XIDs = append(g.XIDs, snapshot.XID{Code: x, T: us(time.Second)})
	}
	return &snapshot.Node{Node: name, GPUs: []snapshot.GPU{g}}
}

func TestStuckInFlightVersusPause(t *testing.T) {
	cfg := DefaultConfig()
	mk := func(state snapshot.GPUState) *Job {
		j := job(30*time.Second, rank(0, 30, 100*time.Millisecond, 0, nil), rank(1, 30, 100*time.Millisecond, 0, nil))
		j.Nodes = map[string]*snapshot.Node{"node0": gpuNode("node0", state), "node1": gpuNode("node1", state)}
		return j
	}
	fs, paused := StuckInFlight(mk("waiting"), cfg)
	only(t, fs, incident.KindStuckInFlight)
	if len(paused) != 0 {
		t.Fatalf("paused %v", paused)
	}
	fs, paused = StuckInFlight(mk("idle"), cfg)
	if len(fs) != 0 || len(paused) != 1 {
		t.Fatalf("checkpoint pause: findings %+v paused %v", fs, paused)
	}
	if res := Evaluate(mk("idle"), cfg, TimingOK); len(res.Findings) != 0 {
		t.Fatalf("a pause must produce no finding: %+v", res.Findings)
	}
}

func TestLinkPortDegraded(t *testing.T) {
	j := job(time.Second, rank(0, 3, time.Second, 0, nil), rank(1, 3, time.Second, 0, nil))
	j.Procs[1].NetDevs = []string{"mlx5_0:1/IB", "mlx5_1:1/IB"}
	port := func(dev string, gbps float64, width string) snapshot.Port {
		return snapshot.Port{Kind: "ib", Device: dev, Port: 1, State: "ACTIVE", RateGbps: gbps, Width: width, Speed: "NDR"}
	}
	j.Nodes = map[string]*snapshot.Node{
		"node0": {Node: "node0", Ports: []snapshot.Port{port("mlx5_0", 400, "4X"), port("mlx5_1", 400, "4X")}},
		"node1": {Node: "node1", Ports: []snapshot.Port{port("mlx5_0", 400, "4X"), port("mlx5_1", 100, "1X")}},
	}
	f := only(t, Link(j, DefaultConfig()), incident.KindLink)
	if f.Culprits[0].Host != "node1" || f.Culprits[0].Port != "mlx5_1:1" || !strings.Contains(f.Summary, "100 of 400 Gb/s") {
		t.Fatalf("%+v", f)
	}
	if len(f.Culprits) != 2 || f.Culprits[1].Rank != 1 {
		t.Fatalf("the rank using the port should be named: %+v", f.Culprits)
	}
}

func TestGPUXID(t *testing.T) {
	j := job(2*time.Second, rank(0, 3, time.Second, 0, nil))
	j.Nodes = map[string]*snapshot.Node{"node0": gpuNode("node0", "idle", 79)}
	f := only(t, GPU(j, DefaultConfig()), incident.KindGPU)
	if f.Severity != incident.SeverityCritical || !strings.Contains(f.Summary, "fallen off the bus") || f.Culprits[0].Rank != 0 {
		t.Fatalf("%+v", f)
	}
}

func TestLifecycle(t *testing.T) {
	l := NewLifecycle(5 * time.Second)
	hang := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Key: "rank:node1:101",
		Culprits: []incident.Culprit{{Rank: 1, Host: "node1", PID: 101}}, Summary: "rank 1 stopped"}
	notify, _ := l.Update("j", []Finding{hang}, t0)
	if len(notify) != 1 || notify[0].State != incident.StateOpen || notify[0].ID == "" {
		t.Fatalf("open: %+v", notify)
	}
	id := notify[0].ID
	// The same root cause seen again, with more victims: no new notification.
	hang.Victims = 511
	if notify, _ = l.Update("j", []Finding{hang}, t0.Add(time.Second)); len(notify) != 0 {
		t.Fatalf("victims do not change the root cause: %+v", notify)
	}
	// The culprit dies: the same incident upgrades to crash.
	crash := hang
	crash.Kind = incident.KindCrash
	notify, _ = l.Update("j", []Finding{crash}, t0.Add(2*time.Second))
	if len(notify) != 1 || notify[0].ID != id || notify[0].Kind != incident.KindCrash || notify[0].Revision != 2 {
		t.Fatalf("upgrade: %+v", notify)
	}
	// Clear for less than ResolveAfter: still open; then resolved once.
	if notify, _ = l.Update("j", nil, t0.Add(3*time.Second)); len(notify) != 0 {
		t.Fatalf("resolved too early: %+v", notify)
	}
	notify, _ = l.Update("j", nil, t0.Add(9*time.Second))
	if len(notify) != 1 || notify[0].State != incident.StateResolved || notify[0].ID != id {
		t.Fatalf("resolve: %+v", notify)
	}
	if notify, _ = l.Update("j", nil, t0.Add(20*time.Second)); len(notify) != 0 {
		t.Fatalf("resolved twice: %+v", notify)
	}
	// A restored lifecycle (failover) continues an open incident without reopening it.
	l2 := NewLifecycle(5 * time.Second)
	open, _ := l.Update("j", []Finding{hang}, t0.Add(30*time.Second))
	l2.Restore(open)
	if notify, _ = l2.Update("j", []Finding{hang}, t0.Add(31*time.Second)); len(notify) != 0 {
		t.Fatalf("after failover the open incident must continue silently: %+v", notify)
	}
	if got := l2.Incidents("j"); len(got) != 1 || got[0].ID != open[0].ID {
		t.Fatalf("incidents after restore %+v", got)
	}
}

// TestDeathsAfterTheRootCause: on real GPUs a hung job is killed by PyTorch's timeout or the
// launcher; those deaths must not become incidents of their own, and a hang must not turn
// into a crash because its rank was killed a minute later. A real crash stays a crash.
func TestDeathsAfterTheRootCause(t *testing.T) {
	cfg := DefaultConfig()
	exited := func(p *Proc, at time.Duration) *Proc {
		p.State, p.ExitedAt = "exited", us(at)
		return p
	}
	t.Run("hang, then everyone killed", func(t *testing.T) {
		j := job(80*time.Second, exited(rank(0, 30, 100*time.Millisecond, 0, nil), 75*time.Second),
			exited(rank(1, 20, 100*time.Millisecond, 0, nil), 75*time.Second))
		res := Evaluate(j, cfg, TimingOK)
		if len(res.Findings) != 1 || res.Findings[0].Kind != incident.KindHang || culpritRanks(res.Findings[0])[0] != 1 {
			t.Fatalf("%+v", res.Findings)
		}
	})
	t.Run("crash, then the survivor killed", func(t *testing.T) {
		j := job(40*time.Second, exited(rank(0, 30, 100*time.Millisecond, 0, nil), 20*time.Second),
			exited(rank(1, 20, 100*time.Millisecond, 0, nil), 2100*time.Millisecond))
		res := Evaluate(j, cfg, TimingOK)
		if len(res.Findings) != 1 || res.Findings[0].Kind != incident.KindCrash || culpritRanks(res.Findings[0])[0] != 1 {
			t.Fatalf("%+v", res.Findings)
		}
	})
}
