package assemble

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/heartbeat"
	"github.com/ncclwatch/watchdog/heartbeat/profile/profiletest"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The completion-aware rules judged on what the sidecar reads from real profiler regions:
// simulated ranks (profiletest: the plugin, called as NCCL calls it) play each case; the
// sidecar, as this package wires it, publishes their state; the rules judge it on a fake
// clock set after the regions' own times.

// pluginSidecar runs a sidecar reading the regions in dir until the test ends.
func pluginSidecar(t *testing.T, dir string) *heartbeat.Sidecar {
	t.Helper()
	sc, release, err := Sidecar(context.Background(), nil, SidecarConfig{Job: "j", Node: "n0",
		LogPatterns: []string{t.TempDir() + "/*.log"}, PollLogs: true, SampleEvery: 20 * time.Millisecond,
		ProfilerDirs: []string{dir}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; release() })
	return sc
}

// settled waits until the sidecar shows ranks processes, all of them read after every
// rank's last script line ran, and cond holds.
func settled(t *testing.T, sc *heartbeat.Sidecar, ranks int, cond func(n *snapshot.Node) bool) *snapshot.Node {
	t.Helper()
	after := snapshot.MicrosOf(time.Now())
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := sc.Snapshot()
		ok := len(n.Processes) == ranks
		for _, p := range n.Processes {
			ok = ok && p.Plugin != nil && p.Plugin.Read > after
		}
		if ok && (cond == nil || cond(n)) {
			return n
		}
		if time.Now().After(deadline) {
			for _, p := range n.Processes {
				for _, c := range p.Comms {
					if c.Done != nil {
						t.Logf("rank %d comm %s: %+v timing %+v", p.Rank, c.ID, *c.Done, c.Done.Timing)
					}
				}
			}
			t.Fatalf("sidecar snapshot not settled")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// judge evaluates the node's ranks at `after` past the newest time the regions hold.
func judge(n *snapshot.Node, after time.Duration) detect.Result {
	var newest snapshot.Micros
	var procs []*detect.Proc
	for i := range n.Processes {
		p := n.Processes[i]
		for _, c := range p.Comms {
			if d := c.Done; d != nil {
				newest = max(newest, d.LastDone, d.LastEvent)
			}
		}
		procs = append(procs, &detect.Proc{Process: p, Node: n.Node})
	}
	j := detect.NewJob("j", newest.Time().Add(after), procs, map[string]*snapshot.Node{n.Node: n})
	return detect.Evaluate(j, detect.DefaultConfig(), detect.TimingOK)
}

func rankEnv(r, world int) []string {
	return []string{fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", world)}
}

// runOps has a rank issue and complete n collectives on comm c, numbering its ops from
// first; each runs its proxy ops with peer.
func runOps(c, first, n, peer int) []string {
	var out []string
	for o := first; o < first+n; o++ {
		out = append(out, fmt.Sprintf("coll %d AllReduce 1024 1", c), fmt.Sprintf("run %d %d 2", o, peer))
	}
	return out
}

func oneFinding(t *testing.T, res detect.Result, kind incident.Kind, rank int, says string) detect.Finding {
	t.Helper()
	if len(res.Findings) != 1 {
		t.Fatalf("want one %s finding, got %d: %+v", kind, len(res.Findings), res.Findings)
	}
	f := res.Findings[0]
	if f.Kind != kind || len(f.Culprits) != 1 || f.Culprits[0].Rank != rank || !strings.Contains(f.Summary, says) {
		t.Fatalf("want %s naming rank %d (%q), got %s %+v: %s\n%s", kind, rank, says, f.Kind, f.Culprits, f.Summary,
			strings.Join(f.Evidence, "\n"))
	}
	return f
}

// TestPluginSilentRank: rank 1 stops issuing; rank 0 runs collective 6 on its GPU, its
// transfers waiting on rank 1. Named within the completion window (2 s), where the log rule
// waits 10 s for the communicator to stand still.
func TestPluginSilentRank(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	r0, r1 := kit.Start(t, dir, rankEnv(0, 2)...), kit.Start(t, dir, rankEnv(1, 2)...)
	r0.Do(append(append([]string{"init 0 abc 2 0"}, runOps(0, 0, 5, 1)...),
		"coll 0 AllReduce 1024 1", "start 5", "px 5 1 1 4 0", "px 5 1 0 4 0", "step 10 0 2", "step 11 0 1")...)
	r1.Do(append([]string{"init 0 abc 2 1"}, runOps(0, 0, 5, 0)...)...)
	n := settled(t, pluginSidecar(t, dir), 2, nil)
	if res := judge(n, 1500*time.Millisecond); len(res.Findings) != 0 {
		t.Fatalf("inside the window: %+v", res.Findings)
	}
	f := oneFinding(t, judge(n, 3500*time.Millisecond), incident.KindHang, 1, "has not issued collective 6")
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "waits on rank 1 (send, channel 0: SendPeerWait") {
		t.Fatalf("evidence:\n%s", ev)
	}
}

// TestPluginFrozenRank: both ranks run collective 6 on their GPUs; rank 0's transfers wait
// on rank 1, which posted none (its proxy thread stopped): the stuck collective names it.
func TestPluginFrozenRank(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	r0, r1 := kit.Start(t, dir, rankEnv(0, 2)...), kit.Start(t, dir, rankEnv(1, 2)...)
	r0.Do(append(append([]string{"init 0 abc 2 0"}, runOps(0, 0, 5, 1)...),
		"coll 0 AllReduce 1024 1", "start 5", "px 5 1 1 4 0", "px 5 1 0 4 0", "step 10 0 2", "step 11 0 1")...)
	r1.Do(append(append([]string{"init 0 abc 2 1"}, runOps(0, 0, 5, 0)...), "coll 0 AllReduce 1024 1", "start 5")...)
	n := settled(t, pluginSidecar(t, dir), 2, nil)
	oneFinding(t, judge(n, 3500*time.Millisecond), incident.KindStuckInFlight, 1, "wait on rank 1")
}

// TestPluginOrderInversion: the Megatron deadlock with NCCL_DEBUG=WARN: four ranks, a world
// communicator and tensor-parallel groups {0,1} and {2,3}; at step 4 rank 1 calls the world
// AllReduce first. Each rank's GPU runs its first call; ranks 2 and 3 finish their
// tensor-parallel op and wait in the world one. One finding, rank 1, from the plugin's
// count of calls.
func TestPluginOrderInversion(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	var ranks []*profiletest.Rank
	for r := 0; r < 4; r++ {
		ranks = append(ranks, kit.Start(t, dir, rankEnv(r, 4)...))
	}
	for r, rk := range ranks {
		tp, peer, next := 0x70+r/2, r^1, (r+1)%4
		script := []string{fmt.Sprintf("init 0 77 4 %d", r), fmt.Sprintf("init 1 %x 2 %d", tp, r%2)}
		o := 0
		for step := 1; step <= 3; step++ {
			script = append(script, runOps(1, o, 1, peer)...)
			script = append(script, runOps(0, o+1, 1, next)...)
			o += 2
		}
		tpColl, worldColl := "coll 1 AllReduce 4096 1", "coll 0 AllReduce 1024 1"
		switch r {
		case 1:
			script = append(script, worldColl, tpColl, fmt.Sprintf("start %d", o))
		case 0:
			script = append(script, tpColl, worldColl, fmt.Sprintf("start %d", o))
		default:
			script = append(script, tpColl, worldColl, fmt.Sprintf("run %d %d 1", o, peer), fmt.Sprintf("start %d", o+1))
		}
		rk.Do(script...)
	}
	n := settled(t, pluginSidecar(t, dir), 4, nil)
	f := oneFinding(t, judge(n, 3500*time.Millisecond), incident.KindOrderInversion, 1,
		"called AllReduce(count 1024 float32) on communicator 0x77 before AllReduce(count 4096 float32) on communicator 0x70")
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "sibling communicator 0x71") ||
		!strings.Contains(ev, "profiler plugin counted its calls") {
		t.Fatalf("evidence:\n%s", ev)
	}
}

// TestPluginHealthyAndPaused: everything issued completed; a minute later (a checkpoint,
// an evaluation) nothing is in flight and nothing pages.
func TestPluginHealthyAndPaused(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	r0, r1 := kit.Start(t, dir, rankEnv(0, 2)...), kit.Start(t, dir, rankEnv(1, 2)...)
	r0.Do(append([]string{"init 0 abc 2 0"}, runOps(0, 0, 8, 1)...)...)
	r1.Do(append([]string{"init 0 abc 2 1"}, runOps(0, 0, 8, 0)...)...)
	n := settled(t, pluginSidecar(t, dir), 2, nil)
	for _, after := range []time.Duration{time.Second, time.Minute} {
		if res := judge(n, after); len(res.Findings) != 0 {
			t.Fatalf("%s after the last op: %+v", after, res.Findings)
		}
	}
}

// timedOps has a rank run n collectives on comm 0, each on its GPU for busyMS; each sends
// one step to peer that spends netMS on the network.
func timedOps(n, busyMS, peer, netMS int) []string {
	var out []string
	for o := 0; o < n; o++ {
		out = append(out, "coll 0 AllReduce 1024 1", fmt.Sprintf("start %d", o), fmt.Sprintf("px %d %d 1 1 0", o, peer),
			fmt.Sprintf("step %d 0 3 %d", o, netMS), fmt.Sprintf("pxend %d", o), fmt.Sprintf("sleep %d", busyMS), fmt.Sprintf("end %d", o))
	}
	return out
}

// TestPluginMeasuredStragglerAndSlowLink: in a ring of three, rank 2's collectives take 2 ms
// on its GPU where the others' take 26 and 33 ms (they wait for it: it arrives late), and
// rank 1's sends to rank 2 spend 8 ms on the network where the others' spend 1 ms.
// Each runs 60 ops: a link is judged over at least 32 send steps (SlowLinkMinSteps), and a
// poll of the region during the first ops must not leave fewer than that in view.
func TestPluginMeasuredStragglerAndSlowLink(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	sc := pluginSidecar(t, dir)
	var ranks []*profiletest.Rank
	for r := range 3 {
		rk := kit.Start(t, dir, rankEnv(r, 3)...)
		rk.Do(fmt.Sprintf("init 0 abc 3 %d", r))
		ranks = append(ranks, rk)
	}
	// Timing covers the ops completed between two reads of a region: the sidecar must have
	// read each before its ops run.
	settled(t, sc, 3, nil)
	// The ranks run at once, as a job's do: each issues its ops when its previous one ended,
	// so rank 2 issues each op first and waits least on its GPU (it arrives late there).
	var wg sync.WaitGroup
	for r, c := range []struct{ busy, net int }{{25, 1}, {25, 8}, {1, 1}} {
		wg.Go(func() { ranks[r].Do(timedOps(60, c.busy, (r+1)%3, c.net)...) })
	}
	wg.Wait()
	n := settled(t, sc, 3, func(n *snapshot.Node) bool {
		for _, p := range n.Processes {
			if tm := p.Comms[0].Done.Timing; tm == nil || tm.N < 30 {
				return false
			}
		}
		return true
	})
	res := judge(n, time.Second)
	var kinds []string
	for _, f := range res.Findings {
		kinds = append(kinds, string(f.Kind))
		switch f.Kind {
		case incident.KindStraggler:
			if f.Culprits[0].Rank != 2 || f.LagSeconds < 0.02 {
				t.Errorf("straggler %+v lag %.3f: %s", f.Culprits, f.LagSeconds, f.Summary)
			}
		case incident.KindLink:
			if len(f.Culprits) != 2 || f.Culprits[0].Rank != 1 || f.Culprits[1].Rank != 2 {
				t.Errorf("slow link %+v: %s", f.Culprits, f.Summary)
			}
		}
	}
	if strings.Join(kinds, ",") != "link,straggler" {
		t.Fatalf("findings %v: %+v", kinds, res.Findings)
	}
}

// sizedOps has a rank issue and complete collectives on comm 0 with the given counts,
// numbering its ops from 0; each runs its proxy ops with peer.
func sizedOps(peer int, counts ...int) []string {
	var out []string
	for o, n := range counts {
		out = append(out, fmt.Sprintf("coll 0 AllReduce %d 1", n), fmt.Sprintf("run %d %d 2", o, peer))
	}
	return out
}

// TestPluginSizeMismatch: with NCCL_DEBUG=WARN, in a communicator of two, rank 1 all-reduces
// 3072 elements where its peer (and its own pattern) says 4096, and both complete: no log
// line shows it, the plugin's signatures do. The rank that broke its pattern is named.
func TestPluginSizeMismatch(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	counts := make([][]int, 2)
	for r := range counts {
		for i := range 40 {
			n := 1024
			if i%2 == 0 {
				n = 4096
			}
			if r == 1 && i == 20 {
				n = 3072
			}
			counts[r] = append(counts[r], n)
		}
	}
	r0, r1 := kit.Start(t, dir, rankEnv(0, 2)...), kit.Start(t, dir, rankEnv(1, 2)...)
	r0.Do(append([]string{"init 0 abc 2 0"}, sizedOps(1, counts[0]...)...)...)
	r1.Do(append([]string{"init 0 abc 2 1"}, sizedOps(0, counts[1]...)...)...)
	n := settled(t, pluginSidecar(t, dir), 2, nil)
	f := oneFinding(t, judge(n, time.Second), incident.KindMismatch, 1, "collective mismatch at position 21")
	if !strings.Contains(f.Summary, "AllReduce(count 3072 float32) on global rank 1") {
		t.Fatalf("summary: %s", f.Summary)
	}
}

// TestPluginOldMismatchByDigest: rank 2 of four all-reduced a different size long before the
// newest signatures the sidecar publishes; the digests at aligned positions still differ
// from the other three, so the mismatch is found, as an interval.
func TestPluginOldMismatchByDigest(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	var ranks []*profiletest.Rank
	for r := range 4 {
		counts := make([]int, 85)
		for i := range counts {
			counts[i] = 1024
		}
		if r == 2 {
			counts[4] = 2048
		}
		rk := kit.Start(t, dir, rankEnv(r, 4)...)
		rk.Do(append([]string{fmt.Sprintf("init 0 abc 4 %d", r)}, sizedOps((r+1)%4, counts...)...)...)
		ranks = append(ranks, rk)
	}
	n := settled(t, pluginSidecar(t, dir), 4, nil)
	f := oneFinding(t, judge(n, time.Second), incident.KindMismatch, 2, "the ranks' op histories differ")
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "differ at position 32") {
		t.Fatalf("evidence:\n%s", ev)
	}
}
