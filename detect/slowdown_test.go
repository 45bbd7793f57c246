package detect

import (
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The fake job's step is 3 positions (step) at period apart: 300 ms per step at 100 ms.
const fakePeriod = 100 * time.Millisecond

// delays says how late rank 1 is at step k. The ranks synchronize at every step's end (the
// job reads its loss back), so the others start step k+1 only after rank 1's step k: every
// step after a late one is shifted for everyone by the lateness so far.
type delays func(k int64) time.Duration

func late(from, to int64, d time.Duration) delays {
	return func(k int64) time.Duration {
		if k >= from && k < to {
			return d
		}
		return 0
	}
}

func stallEvery(from, n int64, d time.Duration) delays {
	return func(k int64) time.Duration {
		if k >= from && (k-from)%n == 0 {
			return d
		}
		return 0
	}
}

// stallsUntil is stallEvery(from, n, d) up to step last, then on time.
func stallsUntil(from, n int64, d time.Duration, last int64) delays {
	return func(k int64) time.Duration {
		if k > last {
			return 0
		}
		return stallEvery(from, n, d)(k)
	}
}

// liveView is what one live evaluation sees of a synced job: each rank's newest 16 ops,
// judged on the ledger kept across evaluations.
func liveView(j *Job, led *Ledger) *Job {
	for _, p := range j.Procs {
		if len(p.Comms[0].Recent) > 16 {
			p.Comms[0].Recent = p.Comms[0].Recent[len(p.Comms[0].Recent)-16:]
		}
	}
	j.Ledger = led
	return j
}

// syncedJob is three ranks of the fake step, rank 1 late by d at each step.
func syncedJob(n int, d delays, extra time.Duration) *Job {
	shift := func(self bool) func(int64, *snapshot.Op) {
		return func(s int64, o *snapshot.Op) {
			k := (s - 1) / 3
			var before time.Duration
			for i := int64(0); i < k; i++ {
				before += d(i)
			}
			o.T += snapshot.Micros(before.Microseconds())
			if self {
				o.T += snapshot.Micros(d(k).Microseconds())
			}
		}
	}
	var total time.Duration
	for k := int64(0); k < int64(n/3); k++ {
		total += d(k)
	}
	return job(time.Duration(n)*fakePeriod+total+extra, rank(0, n, fakePeriod, 0, shift(false)), rank(1, n, fakePeriod, 0, shift(true)),
		rank(2, n, fakePeriod, time.Millisecond, shift(false)))
}

func TestSlowdowns(t *testing.T) {
	cfg := DefaultConfig()
	steps := func(n int) int { return 3 * n }
	for _, c := range []struct {
		name    string
		offline bool
		timing  Timing
		edit    delays // rank 1's
		n       int    // positions
		culprit int    // -1: no finding
		cause   incident.Cause
		say     string
		ended   bool
	}{
		{"steady 60 ms late in a 300 ms step", false, TimingOK, late(0, 1<<30, 60*time.Millisecond), steps(40), 1, incident.CauseHostSlow, "costing 16%", false},
		{"8 ms late in a 300 ms step is jitter", false, TimingOK, late(0, 1<<30, 8*time.Millisecond), steps(40), -1, "", "", false},
		{"13% late in steps that vary by 4% is at the noise", false, TimingOK, func(k int64) time.Duration {
			return 35*time.Millisecond + time.Duration(k%2)*20*time.Millisecond
		}, steps(40), -1, "", "", false},
		{"start-up skew, then level", false, TimingOK, late(0, 3, 415*time.Millisecond), steps(40), -1, "", "", false},
		{"a lag that ended, live", false, TimingOK, late(5, 25, 60*time.Millisecond), steps(60), -1, "", "", false},
		{"a lag that ended, offline: one episode with its end", true, TimingOK, late(5, 25, 60*time.Millisecond), steps(60), 1, incident.CauseHostSlow, "to 12:00", true},
		{"a stall of 900 ms every 5 steps", false, TimingOK, stallEvery(4, 5, 900*time.Millisecond), steps(60), 1, incident.CauseHostStalled, "stalled", false},
		{"a pause of 1.5 s every 20 steps (an evaluation), a window apart", false, TimingOK, stallEvery(4, 20, 1500*time.Millisecond), steps(60), 1, incident.CauseHostStalled, "stalled", false},
		{"one long stall, then on time again", false, TimingOK, late(10, 11, 8*time.Second), steps(60), -1, "", "", false},
		{"one long stall, offline", true, TimingOK, late(10, 11, 8*time.Second), steps(60), -1, "", "", false},
		{"no usable timestamps", true, TimingNone, late(0, 1<<30, 60*time.Millisecond), steps(40), -1, "", "", false},
		{"fewer steps than the window", false, TimingOK, late(0, 1<<30, 60*time.Millisecond), steps(20), -1, "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := syncedJob(c.n, c.edit, 2*time.Second)
			j.Offline = c.offline
			fs := Slowdowns(j, cfg, c.timing)
			if c.culprit < 0 {
				if len(fs) != 0 {
					t.Fatalf("want none, got %s", fs[0].Summary)
				}
				return
			}
			f := only(t, fs, incident.KindStraggler)
			if got := culpritRanks(f); len(got) != 1 || got[0] != c.culprit || f.Cause != c.cause || !strings.Contains(f.Summary, c.say) {
				t.Fatalf("culprits %v cause %q: %s", got, f.Cause, f.Summary)
			}
			if f.Episode == nil || f.Episode.Onset.IsZero() || f.Episode.End.IsZero() != !c.ended {
				t.Fatalf("episode %+v", f.Episode)
			}
		})
	}
}

// A persistent lag on the ledger the live detector keeps: found once the window is full,
// however few ops each evaluation sees, and gone once it ended.
func TestSlowdownsAcrossEvaluations(t *testing.T) {
	cfg := DefaultConfig()
	led := NewLedger()
	window := func(upTo int) *Job {
		return liveView(syncedJob(upTo, late(10, 50, 90*time.Millisecond), 50*time.Millisecond), led)
	}
	var firstAt, goneAt int
	for n := 10; n <= 3*90; n += 5 {
		fs := Slowdowns(window(n), cfg, TimingOK)
		if len(fs) > 0 && firstAt == 0 {
			firstAt = n
		}
		if firstAt > 0 && goneAt == 0 && len(fs) == 0 {
			goneAt = n
		}
	}
	// The lag starts at step 10 (position 31): judged after 3 warm-up and 20 steps.
	if firstAt == 0 || firstAt > 3*35 || goneAt == 0 || goneAt > 3*75 {
		t.Fatalf("found at position %d, gone at %d", firstAt, goneAt)
	}
}

// Stalls that recur stay one episode live, reported between the stalls (an incident that
// resolved after each stall would page again at the next), and end once the next stall is
// overdue: rank 1 stalls 2 s every 10 steps of 300 ms from step 10 to step 50.
func TestRecurringStallsStayReportedBetweenStalls(t *testing.T) {
	cfg := DefaultConfig()
	led := NewLedger()
	var seen strings.Builder
	firstAt, lastAt := 0, 0
	for n := 10; n <= 3*120; n += 3 {
		fs := Slowdowns(liveView(syncedJob(n, stallsUntil(10, 10, 2*time.Second, 50), 50*time.Millisecond), led), cfg, TimingOK)
		if len(fs) == 0 {
			seen.WriteByte('.')
			continue
		}
		seen.WriteByte('X')
		f := only(t, fs, incident.KindStraggler)
		if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.Cause != incident.CauseHostStalled {
			t.Fatalf("at position %d: culprits %v cause %q: %s", n, got, f.Cause, f.Summary)
		}
		if firstAt == 0 {
			firstAt = n
		}
		lastAt = n
	}
	// Found by the second stall's step (position 3*20+1) and the two steps an episode's
	// condition must hold, reported at every evaluation from then on, and gone within 5
	// quiet steps' and a half (the stalls' 3 s quiet spell and half again) after the last
	// stall at step 50 (position 151).
	if firstAt == 0 || firstAt > 3*23 || lastAt < 151 || lastAt > 151+3*16 {
		t.Fatalf("found from position %d to %d: %s", firstAt, lastAt, seen.String())
	}
	if got := strings.Trim(seen.String(), "."); strings.Contains(got, ".") {
		t.Fatalf("reported with gaps between the stalls: %s", seen.String())
	}
}

// The profiler plugin's timing window (10 s) still averages recurring stalls in after the
// arrival ledger saw them end: that echo names no straggler (live on two H100s it continued
// the stalls' incident as a host lag, and a GPU hog that came next on the same rank
// continued it again instead of opening its own).
func TestTheMeasuredEchoOfAnEndedEpisodeIsNoSlowdown(t *testing.T) {
	cfg := DefaultConfig()
	led := NewLedger()
	const lastStall, echoSteps = 151, 34 // position; steps in the plugin's 10 s window
	var seen strings.Builder
	for n := 10; n <= 3*120; n += 3 {
		j := liveView(syncedJob(n, stallsUntil(10, 10, 2*time.Second, 50), 50*time.Millisecond), led)
		for r, p := range j.Procs {
			// The window holds stalls: rank 1's kernels run short, its peers' long.
			busy := 30 * time.Millisecond
			if n >= 3*20 && n <= lastStall+3*echoSteps {
				busy = 200 * time.Millisecond
				if r == 1 {
					busy = time.Millisecond
				}
			}
			p.Comms[0].Done = &snapshot.Completion{Issued: int64(n), Done: int64(n),
				Timing: &snapshot.Timing{N: 20, Window: 10e6, Busy: busy.Microseconds(), Queue: 1000}}
		}
		fs := Slowdowns(j, cfg, TimingOK)
		switch {
		case len(fs) == 0:
			seen.WriteByte('.')
		case fs[0].measured:
			seen.WriteByte('M')
		default:
			seen.WriteByte('X')
		}
		for _, f := range fs {
			if f.Cause != incident.CauseHostStalled {
				t.Fatalf("at position %d, cause %q: %s", n, f.Cause, f.Summary)
			}
		}
	}
	if strings.Contains(seen.String(), "M") || !strings.Contains(seen.String(), "X") {
		t.Fatalf("X: the arrival ledger's episode, M: a measured straggler: %s", seen.String())
	}
}

// A rank that only waited is never blamed: rank 0 arrives late at its tensor-parallel
// pair's collectives {0,1} because its host waited in its data-parallel pair {0,2} for rank
// 2, which arrived late there. Rank 2 is not in the first pair: only following the wait
// across communicators finds it.
func TestSlowdownFollowsAWaitAcrossCommunicators(t *testing.T) {
	const n, hold = 40, 100 * time.Millisecond
	comm := func(id string, r int) snapshot.Comm {
		return snapshot.Comm{ID: id, Ptr: "0x" + id[2:], Rank: r, NRanks: 2, State: "ready", Count: n}
	}
	op := func(k int64, at time.Duration, idx int64) snapshot.Op {
		return snapshot.Op{Seq: k, Op: "AllReduce", Count: 8, Dtype: "float32", Red: "sum", T: us(at), Idx: idx}
	}
	dp0, tp0, dp2, tp1 := comm("0xdp", 0), comm("0xtp", 0), comm("0xdp", 1), comm("0xtp", 1)
	for k := int64(1); k <= n; k++ {
		at := time.Duration(k) * 300 * time.Millisecond
		dp0.Recent = append(dp0.Recent, op(k, at, 2*k-1))
		dp2.Recent = append(dp2.Recent, op(k, at+hold, k))
		tp0.Recent = append(tp0.Recent, op(k, at+hold+2*time.Millisecond, 2*k)) // right after the dp op completed
		tp1.Recent = append(tp1.Recent, op(k, at+10*time.Millisecond, k))
	}
	proc := func(r int, cs ...snapshot.Comm) *Proc {
		for i := range cs {
			last := cs[i].Recent[n-1]
			cs[i].Last = &last
		}
		host := "node" + string(rune('0'+r))
		return &Proc{Process: snapshot.Process{Host: host, PID: 100 + r, Rank: r, Comms: cs}, Node: host}
	}
	j := NewJob("j", t0.Add(13*time.Second), []*Proc{proc(0, dp0, tp0), proc(1, tp1), proc(2, dp2)}, map[string]*snapshot.Node{})
	fs := Slowdowns(j, DefaultConfig(), TimingOK)
	if len(fs) != 1 || culpritRanks(fs[0])[0] != 2 {
		for _, f := range fs {
			t.Log(f.Summary)
		}
		t.Fatalf("want rank 2 alone, got %d findings", len(fs))
	}
}

// timedRank is rank r whose plugin timed its collectives on 0xc0ffee: mean busy and queue.
func timedRank(r int, busy, queue time.Duration) *Proc {
	p := rank(r, 40, fakePeriod, 0, nil)
	p.Comms[0].Done = &snapshot.Completion{Issued: 40, Done: 40,
		Timing: &snapshot.Timing{N: 200, Window: 30e6, Busy: busy.Microseconds(), Queue: queue.Microseconds()}}
	return p
}

// With the plugin: a late rank's kernels run shortest (its peers wait in theirs), 200 ops of
// a 30 s window: 25 ms late per op is 17% of the time.
func TestMeasuredSlowdowns(t *testing.T) {
	cfg := DefaultConfig()
	ms := time.Millisecond
	for _, c := range []struct {
		name    string
		procs   []*Proc
		culprit int // -1: none
		cause   incident.Cause
	}{
		{"slow GPU", []*Proc{timedRank(0, 31*ms, ms), timedRank(1, 30*ms, ms), timedRank(2, 5*ms, 26*ms), timedRank(3, 30*ms, ms)}, 2, incident.CauseGPUBusy},
		{"late host", []*Proc{timedRank(0, 31*ms, ms), timedRank(1, 5*ms, ms), timedRank(2, 30*ms, ms)}, 1, incident.CauseHostSlow},
		{"two ranks", []*Proc{timedRank(0, 40*ms, ms), timedRank(1, 8*ms, ms)}, 1, incident.CauseHostSlow},
		{"jitter", []*Proc{timedRank(0, 31*ms, ms), timedRank(1, 28*ms, ms), timedRank(2, 33*ms, ms)}, -1, ""},
		{"7% of the time", []*Proc{timedRank(0, 12*ms, ms), timedRank(1, 2*ms, ms)}, -1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := Slowdowns(job(10*time.Second, c.procs...), cfg, TimingOK)
			if c.culprit < 0 {
				if len(fs) != 0 {
					t.Fatalf("%+v", fs)
				}
				return
			}
			f := only(t, fs, incident.KindStraggler)
			if got := culpritRanks(f); got[0] != c.culprit || !f.measured || f.Cause != c.cause {
				t.Fatalf("culprit %v cause %s: %s\n%s", got, f.Cause, f.Summary, strings.Join(f.Evidence, "\n"))
			}
		})
	}
}

// NVML names another process on a late rank's GPU: the cause is the GPU, not the host.
func TestSlowdownOnASharedGPU(t *testing.T) {
	j := syncedJob(3*40, late(0, 1<<30, 80*time.Millisecond), 0)
	node := gpuNode("node1", snapshot.GPUComputing)
	node.GPUs[0].T = snapshot.MicrosOf(j.Now)
	node.GPUs[0].Procs = []snapshot.GPUProc{{PID: 101}, {PID: 9999, Name: "python3"}}
	j.Nodes["node1"] = node
	f := only(t, Slowdowns(j, DefaultConfig(), TimingOK), incident.KindStraggler)
	if culpritRanks(f)[0] != 1 || f.Cause != incident.CauseGPUBusy || !strings.Contains(f.Summary, "shared with 1 other process") {
		t.Fatalf("cause %s: %s", f.Cause, f.Summary)
	}
}

func TestSlowLinks(t *testing.T) {
	ring := func(slow int64, slowFrom ...int) *Job {
		var ps []*Proc
		for r := 0; r < 4; r++ {
			p := timedRank(r, 30*time.Millisecond, time.Millisecond)
			p.NetDevs = []string{"mlx5_" + string(rune('0'+r)) + ":1/IB"}
			for _, peer := range []int{(r + 1) % 4, (r + 2) % 4} {
				net := int64(300)
				for _, s := range slowFrom {
					if r == s && (peer == (r+1)%4 || len(slowFrom) == 1) {
						net = slow
					}
				}
				p.Comms[0].Done.Peers = append(p.Comms[0].Done.Peers, snapshot.PeerProgress{Peer: peer, Dir: snapshot.DirSend, NetUs: net, NetSteps: 5000})
			}
			ps = append(ps, p)
		}
		return job(10*time.Second, ps...)
	}
	cfg := DefaultConfig()
	if fs := Slowdowns(ring(500, 1), cfg, TimingOK); len(fs) != 0 {
		t.Fatalf("a link within the spread: %+v", fs)
	}
	// Rank 1's sends are slow to both its peers: one root, its NIC.
	f := only(t, Slowdowns(ring(2000, 1), cfg, TimingOK), incident.KindLink)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.Cause != incident.CauseLink || !strings.Contains(f.Summary, "network of rank 1") ||
		f.Culprits[0].Port != "mlx5_1:1/IB" {
		t.Fatalf("culprits %v: %s\n%s", got, f.Summary, strings.Join(f.Evidence, "\n"))
	}
	// Two slow links with no endpoint in common: two pairs.
	fs := Slowdowns(ring(2000, 0, 2), cfg, TimingOK)
	if len(fs) != 2 || fs[0].Kind != incident.KindLink || len(fs[0].Culprits) != 2 {
		t.Fatalf("%+v", fs)
	}
	// Rank 1's sends are slow and its threads wait for a CPU: its host starves it, the
	// network is not at fault. Starvation every rank shares names nobody.
	starved := ring(2000, 1)
	for _, p := range starved.Procs {
		p.Stat, p.RunqPct = snapshot.SchedRunning, 2
	}
	starved.Procs[1].RunqPct = 45
	f = only(t, Slowdowns(starved, cfg, TimingOK), incident.KindStraggler)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.Cause != incident.CauseHostSlow || !strings.Contains(f.Summary, "starved of CPU") {
		t.Fatalf("culprits %v cause %s: %s", got, f.Cause, f.Summary)
	}
	for _, p := range starved.Procs {
		p.RunqPct = 45
	}
	if f = only(t, Slowdowns(starved, cfg, TimingOK), incident.KindLink); f.Cause != incident.CauseLink {
		t.Fatalf("cause %s: %s", f.Cause, f.Summary)
	}
}

// Live on one H100, a two-rank communicator's send steps from rank 3 to rank 2 took 857 µs
// against 143 µs the other way, before any fault: rank 2's GPU, shared with three other
// ranks, posted its receives late. A pair's reverse direction does not witness against it.
func TestSlowLinkNeedsOtherLinks(t *testing.T) {
	var ps []*Proc
	for r, net := range []int64{143, 857} {
		p := timedRank(r, 30*time.Millisecond, time.Millisecond)
		p.Comms[0].Done.Peers = []snapshot.PeerProgress{{Peer: 1 - r, Dir: snapshot.DirSend, NetUs: net, NetSteps: 136},
			{Peer: 1 - r, Dir: snapshot.DirRecv}}
		ps = append(ps, p)
	}
	if fs := Slowdowns(job(10*time.Second, ps...), DefaultConfig(), TimingOK); len(fs) != 0 {
		t.Fatalf("one direction of a two-rank communicator is no slow link: %+v", fs)
	}
}

// Every rank arrives on time, but the steps grow from 300 to 450 ms (a slow link seen only
// from logs, a GPU the hosts wait for): the job's own baseline says it slowed, and the one
// rank whose GPU NVML shows shared is the root; without such evidence nobody is blamed.
func TestUnattributedSlowdown(t *testing.T) {
	slower := func(from int64, extra time.Duration, pauseAt int64) *Job {
		shift := func(s int64, o *snapshot.Op) {
			k := (s - 1) / 3
			if k > from {
				o.T += snapshot.Micros((time.Duration(k-from) * extra).Microseconds())
			}
			if pauseAt > 0 && k > pauseAt {
				o.T += snapshot.Micros((60 * time.Second).Microseconds())
			}
		}
		n := 3 * 90
		end := time.Duration(n)*fakePeriod + time.Duration(90-from)*extra + time.Second
		if pauseAt > 0 {
			end += 60 * time.Second
		}
		return job(end, rank(0, n, fakePeriod, 0, shift), rank(1, n, fakePeriod, time.Millisecond, shift), rank(2, n, fakePeriod, 2*time.Millisecond, shift))
	}
	cfg := DefaultConfig()
	f := only(t, Slowdowns(slower(50, 150*time.Millisecond, 0), cfg, TimingOK), incident.KindStraggler)
	if len(f.Culprits) != 0 || !strings.Contains(f.Summary, "50% of their time more") {
		t.Fatalf("%+v: %s", f.Culprits, f.Summary)
	}
	j := slower(50, 150*time.Millisecond, 0)
	node := gpuNode("node2", snapshot.GPUComputing)
	node.GPUs[0].T = snapshot.MicrosOf(j.Now)
	node.GPUs[0].Procs = []snapshot.GPUProc{{PID: 102}, {PID: 4242}}
	j.Nodes["node2"] = node
	f = only(t, Slowdowns(j, cfg, TimingOK), incident.KindStraggler)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 2 || f.Cause != incident.CauseGPUBusy {
		t.Fatalf("%v %s: %s", got, f.Cause, f.Summary)
	}
	// All ranks on one GPU (one host's ranks, or four ranks as four hosts on one GPU), and
	// NVML lists a process of no rank on it: the GPU is the root, not "cannot say".
	j = slower(50, 150*time.Millisecond, 0)
	node = gpuNode("node0", snapshot.GPUComputing)
	node.GPUs[0].T = snapshot.MicrosOf(j.Now)
	node.GPUs[0].Procs = []snapshot.GPUProc{{PID: 100}, {PID: 101}, {PID: 102}, {PID: 4242}}
	j.Nodes["node0"] = node
	for _, p := range j.Procs {
		p.Node = "node0"
	}
	f = only(t, Slowdowns(j, cfg, TimingOK), incident.KindStraggler)
	if f.Key != "slowdown:j" || f.Cause != incident.CauseGPUBusy || len(f.Culprits) != 1 || f.Culprits[0].Rank != -1 || f.Culprits[0].GPU != "0 (bus 1b000)" {
		t.Fatalf("%+v %s: %s", f.Culprits, f.Cause, f.Summary)
	}
	// One rank's threads wait for a CPU (its host starves it): it is the root, whether or
	// not the others' arrivals show it (live on one H200, a rank at 5 % CPU and 245 % of a
	// core waiting on the run queue went unnamed from INFO logs).
	j = slower(50, 150*time.Millisecond, 0)
	for _, p := range j.Procs {
		p.Stat, p.RunqPct = snapshot.SchedRunning, 0.1
	}
	j.Procs[1].RunqPct = 245
	f = only(t, Slowdowns(j, cfg, TimingOK), incident.KindStraggler)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.Cause != incident.CauseHostSlow || !strings.Contains(f.Summary, "starves it of CPU") {
		t.Fatalf("%v %s: %s", got, f.Cause, f.Summary)
	}
	for _, c := range []struct {
		name string
		j    *Job
	}{{"steady", slower(200, 0, 0)}, {"a 60 s pause between two steps", slower(200, 0, 40)}, {"5% slower", slower(50, 15*time.Millisecond, 0)}} {
		if fs := Slowdowns(c.j, cfg, TimingOK); len(fs) != 0 {
			t.Errorf("%s: %s", c.name, fs[0].Summary)
		}
	}
}

// A two-rank communicator has no other link to compare with: its slow direction is judged
// against its own speed before and the other direction now (the live 2-GPU run: rank 1's
// sends limited by the shim went from 250 µs to 3.6 ms a step, rank 0's stayed at 230 µs).
func TestSlowLinkOfAPair(t *testing.T) {
	led := NewLedger()
	pair := func(at time.Duration, r0, r1 int64) *Job {
		var ps []*Proc
		for r, net := range []int64{r0, r1} {
			p := timedRank(r, 30*time.Millisecond, time.Millisecond)
			p.Comms[0].Done.Peers = []snapshot.PeerProgress{{Peer: 1 - r, Dir: snapshot.DirSend, NetUs: net, NetSteps: 2000}}
			ps = append(ps, p)
		}
		j := job(at, ps...)
		j.Ledger = led
		return j
	}
	if fs := Slowdowns(pair(10*time.Second, 230, 250), DefaultConfig(), TimingOK); len(fs) != 0 {
		t.Fatalf("healthy: %s", fs[0].Summary)
	}
	// Live, a slow pair is named once it stayed slow pairHold (a NIC's other pairs show).
	if fs := Slowdowns(pair(20*time.Second, 236, 3628), DefaultConfig(), TimingOK); len(fs) != 0 {
		t.Fatalf("named at first sight: %s", fs[0].Summary)
	}
	f := only(t, Slowdowns(pair(20*time.Second+pairHold, 236, 3628), DefaultConfig(), TimingOK), incident.KindLink)
	if got := culpritRanks(f); len(got) != 2 || got[0] != 1 || !strings.Contains(f.Summary, "before and in the other direction") {
		t.Fatalf("%v: %s", got, f.Summary)
	}
	// A pair asymmetric from its start (one H100 shared by four ranks: 857 against 143 µs)
	// has no speed before to fall from.
	led = NewLedger()
	if fs := Slowdowns(pair(10*time.Second, 143, 857), DefaultConfig(), TimingOK); len(fs) != 0 {
		t.Fatalf("asymmetric from the start: %s", fs[0].Summary)
	}
}

// Live with the plugin, a rank SIGSTOPped for seconds and resumed was named a straggler once
// the hang had resolved: the plugin's timing window averaged the one stall over its ops. A
// single stall is one episode (a hang that resolved), not a slowdown.
func TestOneStallIsNoMeasuredStraggler(t *testing.T) {
	j := syncedJob(3*40, late(30, 31, 8*time.Second), 0)
	for r, p := range j.Procs {
		busy := 30 * time.Millisecond
		if r == 1 {
			busy = time.Millisecond
		}
		p.Comms[0].Done = &snapshot.Completion{Issued: 120, Done: 120,
			Timing: &snapshot.Timing{N: 40, Window: 10e6, Busy: busy.Microseconds(), Queue: 1000}}
	}
	if fs := Slowdowns(j, DefaultConfig(), TimingOK); len(fs) != 0 {
		t.Fatalf("one stall named: %s", fs[0].Summary)
	}
}

// Stream order: rank 1's host is late, so on the tensor-parallel pair {0,1} rank 0's kernel
// waits for it (runs long); rank 0's GPU then starts its data-parallel collective with rank
// 2 late, so there rank 0's kernels run short and start late after issue, as a busy GPU's
// would. Rank 0 only waited: the root is rank 1, and rank 0 is never named, even where
// rank 1's own timings are too few to name it.
func TestMeasuredWaiterBehindAnotherCommunicatorIsNoRoot(t *testing.T) {
	ms := time.Millisecond
	tmpl := rank(0, 40, fakePeriod, 0, nil).Comms[0]
	timed := func(p *Proc, id string, rank int, busy, queue time.Duration) {
		c := tmpl
		c.ID, c.Rank, c.NRanks = id, rank, 2
		c.Done = &snapshot.Completion{Issued: 40, Done: 40,
			Timing: &snapshot.Timing{N: 200, Window: 30e6, Busy: busy.Microseconds(), Queue: queue.Microseconds()}}
		p.Comms = append(p.Comms, c)
	}
	ps := []*Proc{rank(0, 40, fakePeriod, 0, nil), rank(1, 40, fakePeriod, 0, nil), rank(2, 40, fakePeriod, 0, nil)}
	for _, p := range ps {
		p.Comms = nil
	}
	timed(ps[0], "tp", 0, 40*ms, ms) // waits for rank 1
	timed(ps[1], "tp", 1, 10*ms, ms) // late host: its peer waits for it
	// ... and it completed fewer ops than the plugin needs to judge it (measured_min_ops).
	ps[1].Comms[0].Done.Timing.N = 5
	timed(ps[0], "dp", 0, 8*ms, 32*ms) // reaches dp late: its GPU was in tp
	timed(ps[2], "dp", 1, 40*ms, ms)   // waits for rank 0 there
	j := NewJob("j", t0.Add(10*time.Second), ps, map[string]*snapshot.Node{})
	for _, f := range Slowdowns(j, DefaultConfig(), TimingOK) {
		if got := culpritRanks(f); len(got) != 1 || got[0] != 1 {
			t.Fatalf("named %v, want rank 1 alone: %s", got, f.Summary)
		}
	}
}

// Offline tells the whole run: one stall of 15 s that the job waited for and went on from
// is a resolved hang, with its span; one of 8 s (under hang_floor) is not.
func TestOfflineLongStallIsAResolvedHang(t *testing.T) {
	for _, c := range []struct {
		stall time.Duration
		want  int
	}{{15 * time.Second, 1}, {8 * time.Second, 0}} {
		j := syncedJob(3*60, late(10, 11, c.stall), 2*time.Second)
		j.Offline = true
		fs := Slowdowns(j, DefaultConfig(), TimingOK)
		if len(fs) != c.want {
			t.Fatalf("stall %s: %d findings, want %d: %+v", c.stall, len(fs), c.want, fs)
		}
		if c.want == 0 {
			continue
		}
		f := fs[0]
		if f.Kind != incident.KindHang || culpritRanks(f)[0] != 1 || f.Episode == nil || f.Episode.End.IsZero() ||
			!strings.Contains(f.Summary, "stalled the job for 15s") {
			t.Fatalf("%+v: %s", f.Episode, f.Summary)
		}
	}
}
