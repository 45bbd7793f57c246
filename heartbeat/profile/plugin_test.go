package profile

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/profile/profiletest"
)

// The plugin tests build profiler/plugin.c and profiler/test/driver.c with gcc, run the
// driver (which calls the plugin the way NCCL does) and read the region back with this
// package. Each build variant runs the same scenarios; the sanitizer variants are skipped,
// saying why, where the toolchain cannot build or run them.

// pluginCFlags are the Makefile's `plugin` flags plus -Werror: the plugin stays warning-free.
var pluginCFlags = []string{"-std=gnu11", "-O2", "-g", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
	"-Wall", "-Wextra", "-Werror", "-Wl,-z,nodelete"}

type variant struct {
	name   string
	cflags []string
	env    []string
	ops    int // operations per communicator in the threads scenario
}

var variants = []variant{
	// 4 comms x 30,000 ops x 36 plugin calls: about four million events.
	{name: "plain", ops: 30000},
	{name: "asan+ubsan", cflags: []string{"-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"},
		env: []string{"ASAN_OPTIONS=detect_leaks=0:halt_on_error=1", "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"}, ops: 2000},
	{name: "tsan", cflags: []string{"-fsanitize=thread"}, env: []string{"TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1"}, ops: 1000},
}

type built struct {
	so, driver string
	// standin[v] is the chain test's second plugin exporting ncclProfiler_v3 to _v<v>
	// (profiler/test/standin.c); notable a library that exports no table at all.
	standin map[int]string
	notable string
	env     []string
	skip    string
	err     error
}

var (
	buildMu sync.Mutex
	builds  = map[string]*built{}
)

// build compiles the plugin and the driver of a variant once per test binary.
func build(t *testing.T, gcc string, v variant) *built {
	t.Helper()
	buildMu.Lock()
	b, ok := builds[v.name]
	if !ok {
		b = doBuild(t, gcc, v)
		builds[v.name] = b
	}
	buildMu.Unlock()
	if b.skip != "" {
		t.Skip(b.skip)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b
}

func doBuild(t *testing.T, gcc string, v variant) *built {
	root := repoRoot(t)
	dir := filepath.Join(buildDir, strings.ReplaceAll(v.name, "+", "-"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &built{err: err}
	}
	b := &built{so: filepath.Join(dir, "libnccl-profiler-ncclwatch.so"), driver: filepath.Join(dir, "driver"), env: v.env}
	if len(v.cflags) > 0 {
		// Does this toolchain build and run the sanitizer at all?
		probe := filepath.Join(dir, "probe")
		src := filepath.Join(dir, "probe.c")
		if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
			return &built{err: err}
		}
		args := append(slices.Clone(v.cflags), "-o", probe, src)
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			return &built{skip: fmt.Sprintf("gcc cannot build with %v here: %v\n%s", v.cflags, err, out)}
		}
		cmd := exec.Command(probe)
		cmd.Env = append(os.Environ(), v.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return &built{skip: fmt.Sprintf("a %v program does not run here: %v\n%s", v.cflags, err, out)}
		}
	}
	args := append(slices.Clone(pluginCFlags), v.cflags...)
	args = append(args, "-o", b.so)
	args = append(append(args, pluginSources(root)...), "-ldl")
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		return &built{err: fmt.Errorf("gcc plugin.c %v: %v\n%s", args, err, out)}
	}
	args = append([]string{"-std=gnu11", "-O1", "-g", "-pthread", "-Wall", "-Wextra", "-Werror"}, v.cflags...)
	args = append(args, "-o", b.driver, filepath.Join(root, "profiler", "test", "driver.c"), "-ldl")
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		return &built{err: fmt.Errorf("gcc driver.c %v: %v\n%s", args, err, out)}
	}
	b.standin = map[int]string{}
	for _, max := range []int{3, 4, 6} {
		so := filepath.Join(dir, fmt.Sprintf("libstandin-v%d.so", max))
		args = append([]string{"-std=gnu11", "-O1", "-g", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread", "-Wall",
			"-Wextra", "-Werror", fmt.Sprintf("-DSTANDIN_MAX=%d", max)}, v.cflags...)
		args = append(args, "-o", so, filepath.Join(root, "profiler", "test", "standin.c"))
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			return &built{err: fmt.Errorf("gcc standin.c %v: %v\n%s", args, err, out)}
		}
		b.standin[max] = so
	}
	b.notable = filepath.Join(dir, "libnotable.so")
	src := filepath.Join(dir, "notable.c")
	if err := os.WriteFile(src, []byte("int not_a_profiler(void) { return 0; }\n"), 0o644); err != nil {
		return &built{err: err}
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", b.notable, src).CombinedOutput(); err != nil {
		return &built{err: fmt.Errorf("gcc notable.c: %v\n%s", err, out)}
	}
	return b
}

// run runs one driver scenario with its region directory dir and returns its output.
func (b *built) run(t *testing.T, dir, scenario string, ver, n int, env ...string) string {
	t.Helper()
	out, err := b.command(context.Background(), dir, scenario, ver, n, env...).CombinedOutput()
	if err != nil {
		t.Fatalf("driver %s v%d: %v\n%s", scenario, ver, err, out)
	}
	return string(out)
}

func (b *built) command(ctx context.Context, dir, scenario string, ver, n int, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, b.driver, b.so, scenario, strconv.Itoa(ver), strconv.Itoa(n))
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "NCCLWATCH_PROFILER", "NCCLWATCH_PROFILER_DIR", "NCCLWATCH_PROFILER_STEPS", "NCCLWATCH_PROFILER_CHAIN",
			"NCCL_DEBUG_FILE", "STANDIN_DIR", "STANDIN_QUIET", "STANDIN_INIT_FAIL", "STANDIN_MASK", "DRIVER_LOG",
			"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=test-job")
	if dir != "" {
		cmd.Env = append(cmd.Env, "NCCLWATCH_PROFILER_DIR="+dir)
	}
	cmd.Env = append(cmd.Env, b.env...)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// regions reads every region in dir and fails on any file that does not read.
func regions(t *testing.T, dir string) []*Region {
	t.Helper()
	found, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*Region
	for _, f := range found {
		if f.Err != nil {
			t.Fatalf("%s: %v", f.Path, f.Err)
		}
		if len(f.Region.Busy) > 0 {
			t.Fatalf("%s: busy slots %v after the writer exited", f.Path, f.Region.Busy)
		}
		out = append(out, f.Region)
	}
	return out
}

func oneRegion(t *testing.T, dir string) *Region {
	t.Helper()
	rs := regions(t, dir)
	if len(rs) != 1 {
		t.Fatalf("%d regions in %s, want 1", len(rs), dir)
	}
	return rs[0]
}

// settled zeroes the wall-clock fields of a comm after checking the ones that must be set,
// so that the rest compares with a literal.
func settled(t *testing.T, c Comm) Comm {
	t.Helper()
	if c.Init == 0 || c.LastEvent == 0 {
		t.Errorf("comm %s: init %d, last event %d", c.ID, c.Init, c.LastEvent)
	}
	if c.TimedColls > c.CollDone || (c.TimedColls == 0 && (c.BusyUs != 0 || c.QueueUs != 0)) {
		t.Errorf("comm %s: %d timed collectives of %d done, queue %d µs, busy %d µs", c.ID, c.TimedColls, c.CollDone,
			c.QueueUs, c.BusyUs)
	}
	c.Init, c.LastEvent, c.LastDone, c.Gen, c.QueueUs, c.BusyUs = 0, 0, 0, 0, 0, 0
	for _, op := range []*Op{c.InFlight, c.Last} {
		if op == nil {
			continue
		}
		if op.Issued == 0 || (op.KernelChStarted > 0) != (op.GPUStarted != 0) {
			t.Errorf("comm %s op %d: issued %d, gpu started %d with %d channels", c.ID, op.Seq, op.Issued,
				op.GPUStarted, op.KernelChStarted)
		}
		op.Issued, op.GPUStarted = 0, 0
	}
	c.Sigs = slices.Clone(c.Sigs)
	for i := range c.Sigs {
		if c.Sigs[i].Issued == 0 {
			t.Errorf("comm %s signature %d: no issue time", c.ID, c.Sigs[i].Seq)
		}
		c.Sigs[i].Issued = 0
	}
	if want := refDigest(c.Sigs); len(c.Sigs) == int(c.CollIssued) && c.Digest != want {
		t.Errorf("comm %s: digest %#x, the signatures give %#x", c.ID, c.Digest, want)
	}
	c.Timings = slices.Clone(c.Timings)
	for i := range c.Timings {
		// Host-clock timings (ABI v3 has no GPU timer) take what the machine took.
		if m := &c.Timings[i]; m.GPUTimed == 0 {
			if m.ExecNs > m.Ops*uint64(time.Minute) {
				t.Errorf("comm %s: %d ns for %d ops", c.ID, m.ExecNs, m.Ops)
			}
			m.ExecNs = 0
		}
	}
	c.Peers = slices.Clone(c.Peers)
	for i := range c.Peers {
		for _, d := range []*PeerDir{&c.Peers[i].Send, &c.Peers[i].Recv} {
			if (d.P2PIssued > 0) != (d.LastP2P != 0) || (d.StepsDone > 0 && d.LastStep == 0) {
				t.Errorf("comm %s peer %d: times %+v", c.ID, c.Peers[i].Rank, *d)
			}
			// The driver's steps take microseconds: a second per step means a broken sum.
			if (d.NetSteps == 0 && d.NetUs != 0) || d.NetUs > d.NetSteps*1_000_000 {
				t.Errorf("comm %s peer %d: %d µs of network time for %d steps", c.ID, c.Peers[i].Rank, d.NetUs, d.NetSteps)
			}
			d.LastP2P, d.LastStep, d.StateAt, d.NetUs = 0, 0, 0, 0
		}
	}
	return c
}

func checkProcess(t *testing.T, p Process, abi int) {
	t.Helper()
	if p.PID <= 0 || p.Host == "" || p.Started == 0 || p.StartedMono == 0 || p.ProcStartTicks == 0 {
		t.Errorf("identity not recorded: %+v", p)
	}
	if p.ABI != abi || p.Rank != 3 || p.LocalRank != 1 || p.WorldSize != 8 || p.LocalWorldSize != 2 ||
		p.JobID != "test-job" || p.EventMask != 0x5f || p.Plugin != "ncclwatch-profiler 4" || p.Disabled {
		t.Errorf("process header: %+v", p)
	}
	// The driver is not linked with NCCL, so there is no ncclGetVersion to ask.
	if p.NCCLVersion != "" {
		t.Errorf("NCCL version %q without NCCL", p.NCCLVersion)
	}
}

func TestPlugin(t *testing.T) {
	gcc := needGCC(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			b := build(t, gcc, v)
			if v.name == "plain" {
				checkExports(t, b.so)
			}
			for ver := 3; ver <= 6; ver++ {
				t.Run(fmt.Sprintf("basic/v%d", ver), func(t *testing.T) { testBasic(t, b, ver) })
				t.Run(fmt.Sprintf("orders/v%d", ver), func(t *testing.T) { testOrders(t, b, ver) })
			}
			t.Run("overflow", func(t *testing.T) { testOverflow(t, b) })
			t.Run("burst", func(t *testing.T) { testBurst(t, b) })
			t.Run("threads", func(t *testing.T) { testThreads(t, b, v.ops, v.name == "plain") })
			t.Run("fork", func(t *testing.T) { testFork(t, b) })
			t.Run("disabled", func(t *testing.T) { testDisabled(t, b) })
			t.Run("debug-file-dir", func(t *testing.T) { testDebugFileDir(t, b) })
		})
	}
}

// checkExports: NCCL finds the plugin by these four symbols; nothing else may leak out of
// the training process's namespace.
func checkExports(t *testing.T, so string) {
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL {
			got = append(got, s.Name)
		}
	}
	slices.Sort(got)
	want := []string{"ncclProfiler_v3", "ncclProfiler_v4", "ncclProfiler_v5", "ncclProfiler_v6"}
	if !slices.Equal(got, want) {
		t.Errorf("exported %v, want %v", got, want)
	}
}

// testBasic runs the basic scenario (env: more of the driver's environment, e.g. a chained
// plugin, which must change nothing in the region) and returns the region.
func testBasic(t *testing.T, b *built, ver int, env ...string) *Region {
	dir := t.TempDir()
	out := b.run(t, dir, "basic", ver, 0, env...)
	if ver >= 4 && !strings.Contains(out, "NCCL watchdog profiler: recording to "+dir) {
		t.Errorf("no INFO line through NCCL's logger:\n%s", out)
	}
	r := oneRegion(t, dir)
	checkProcess(t, r.Process, ver)
	p := r.Process
	if p.State != ProcExited || p.Exited == 0 || p.CommsInited != 2 || p.CommsFinalized != 1 ||
		p.DroppedEvents != 0 || p.DroppedComms != 0 || p.DroppedPeers != 0 {
		t.Errorf("process: %+v", p)
	}
	if len(r.Comms) != 1 {
		t.Fatalf("%d comms, want the one not finalized: %+v", len(r.Comms), r.Comms)
	}
	// ABI v3's init says nothing of the comm: its id and rank come from the first Coll.
	nranks, nnodes, timer, p2pCh := 4, 2, uint64(12345), 1
	if ver == 3 {
		nranks, nnodes, timer, p2pCh = -1, -1, 0, 0
	}
	want := Comm{
		Slot: 0, ID: 0xA1A2A3A4A5A6A7A8, Rank: 1, NRanks: nranks, NNodes: nnodes,
		CollIssued: 3, CollStarted: 3, CollDone: 2, NCCLSeq: 2, P2PIssued: 3, P2PDone: 2, Pending: 2, TimedColls: 2,
		InFlight: &Op{Kind: OpColl, Seq: 3, NCCLSeq: 2, Func: "AllReduce", Count: 3000, Datatype: "ncclFloat32",
			Algo: "RING", Proto: "SIMPLE", NChannels: 2, KernelChStarted: 2, ProxyOpen: 2, GPUTimer: timer, ProcSeq: 5},
		Last: &Op{Kind: OpP2P, Seq: 2, Func: "Send", Count: 8192, Datatype: "ncclInt8", Root: 3, NChannels: p2pCh, ProcSeq: 6},
		Sigs: []Sig{{Seq: 1, Func: "AllReduce", Count: 1000, Datatype: "ncclFloat32", ProcSeq: 1},
			{Seq: 2, Func: "AllReduce", Count: 2000, Datatype: "ncclFloat32", ProcSeq: 2},
			{Seq: 3, Func: "AllReduce", Count: 3000, Datatype: "ncclFloat32", ProcSeq: 5}},
		Peers: []Peer{
			// Network steps: every send step that reached SendWait and ended (4 + 4 + 1).
			{Rank: 2, Send: PeerDir{ProxyOps: 3, ProxyOpsDone: 2, Steps: 12, StepsDone: 9, State: StateSendPeerWait, NetSteps: 9}},
			{Rank: 0, Recv: PeerDir{ProxyOps: 3, ProxyOpsDone: 2, Steps: 12, StepsDone: 8, State: StateRecvWait, Channel: 1}},
			{Rank: 3,
				Send: PeerDir{P2PIssued: 2, P2PDone: 1, ProxyOps: 1, ProxyOpsDone: 1, Steps: 2, StepsDone: 2, State: StateSendWait, Channel: 3, NetSteps: 2},
				Recv: PeerDir{P2PIssued: 1, P2PDone: 1, ProxyOps: 1, ProxyOpsDone: 1, Steps: 2, StepsDone: 2, State: StateRecvGPUWait, Channel: 3}},
		},
	}
	want.Digest = refDigest(want.Sigs)
	// The completed ops, timed by the kernel channels' GPU clock from the first start to the
	// last stop (the driver's timers: starts 1000+seq and 1001+seq, stops 2000 and 2001; a
	// p2p's channel 5000 to 5001); under v3 by the host's clock.
	want.Timings = []OpTiming{{Func: BWAllReduce, Bucket: 0, Ops: 1, Bytes: 4000, ExecNs: 1001, GPUTimed: 1},
		{Func: BWAllReduce, Bucket: 1, Ops: 1, Bytes: 8000, ExecNs: 1000, GPUTimed: 1},
		{Func: BWSend, Bucket: 1, Ops: 1, Bytes: 4096, ExecNs: 1, GPUTimed: 1},
		{Func: BWRecv, Bucket: 1, Ops: 1, Bytes: 4096, ExecNs: 1, GPUTimed: 1}}
	if ver == 3 {
		for i := range want.Timings {
			want.Timings[i].ExecNs, want.Timings[i].GPUTimed = 0, 0
		}
	}
	if got := settled(t, r.Comms[0]); !reflect.DeepEqual(got, want) {
		t.Errorf("comm\n got %s\nwant %s", dump(got), dump(want))
	}
	return r
}

func dump(c Comm) string {
	s := fmt.Sprintf("%+v", c)
	if c.InFlight != nil {
		s += fmt.Sprintf("\n  in flight %+v", *c.InFlight)
	}
	if c.Last != nil {
		s += fmt.Sprintf("\n  last %+v", *c.Last)
	}
	return s
}

func testOrders(t *testing.T, b *built, ver int, env ...string) {
	dir := t.TempDir()
	b.run(t, dir, "orders", ver, 0, env...)
	r := oneRegion(t, dir)
	p := r.Process
	if p.CommsInited != 2 || p.CommsFinalized != 1 || p.DroppedEvents != 0 {
		t.Errorf("process: %+v", p)
	}
	if len(r.Comms) != 1 {
		t.Fatalf("comms %+v", r.Comms)
	}
	c := r.Comms[0]
	// Stale handles of the finalized comm must not have touched its successor in the slot.
	if c.ID != 0xD00D || c.CollIssued != 1 || c.CollDone != 1 || c.Pending != 0 || c.InFlight != nil ||
		len(c.Peers) != 1 || c.Peers[0].Send.ProxyOps != 1 || c.Peers[0].Send.StepsDone != 2 {
		t.Errorf("comm after finalize and reuse:\n%s", dump(c))
	}
}

func testOverflow(t *testing.T, b *built, env ...string) {
	dir := t.TempDir()
	b.run(t, dir, "overflow", 5, 0, env...)
	r := oneRegion(t, dir)
	p := r.Process
	// 6 comms past 64 slots (each dropping a Group and a Coll), a send past a ring full of
	// collectives, 76 proxy ops past the pool of 1024; 6 peers past 64 rows, once at the p2p
	// and once at its proxy op. The 44 collectives past the ring are merged, not dropped.
	if p.DroppedComms != 6 || p.DroppedEvents != 12+1+76 || p.DroppedPeers != 12 || p.CommsInited != 71 ||
		p.CommsFinalized != 61 {
		t.Errorf("process: %+v", p)
	}
	byID := map[CommID]Comm{}
	for _, c := range r.Comms {
		byID[c.ID] = c
	}
	if len(byID) != 4 {
		t.Fatalf("%d comms, want 4: %+v", len(byID), r.Comms)
	}
	if c := byID[0x9000]; len(c.Peers) != 64 || c.DroppedPeers != 12 || c.P2PIssued != 70 || c.P2PDone != 70 {
		t.Errorf("peer overflow: %d peers, %d dropped, p2p %d/%d", len(c.Peers), c.DroppedPeers, c.P2PDone, c.P2PIssued)
	}
	if c := byID[0x9001]; c.CollIssued != 300 || c.CollDone != 0 || c.Pending != 256 || c.MergedOps != 44 ||
		c.DroppedEvents != 1 || c.InFlight == nil || c.InFlight.Seq != 1 || c.Last == nil || c.Last.Kind != OpP2P ||
		c.P2PIssued != 1 {
		t.Errorf("ring overflow:\n%s", dump(c))
	}
	if c := byID[0x9002]; c.DroppedEvents != 76 || c.InFlight == nil || c.InFlight.ProxyOpen != 1024 ||
		len(c.Peers) != 1 || c.Peers[0].Send.ProxyOps != 512 || c.Peers[0].Recv.ProxyOps != 512 {
		t.Errorf("proxy pool overflow:\n%s", dump(c))
	}
	if c := byID[0x9999]; c.Slot != 3 || c.CollDone != 1 {
		t.Errorf("a comm after finalizes should take the first freed slot (3) and run: %s", dump(c))
	}
}

// testBurst replays the smoke run's pattern (300 small all-reduces queued ahead of the GPU,
// each with its send and receive proxy op posted at launch), in which the first plugin
// dropped 132 events and left coll_done below coll_issued once the queue drained. Now nothing
// is dropped while queued, and everything completes.
func testBurst(t *testing.T, b *built, env ...string) {
	for _, c := range []struct {
		done                         int
		collDone, pending, inFlight  uint64
		sendOpen, stepsDone, netStep uint64
	}{
		{done: 0, collDone: 0, pending: 256, inFlight: 1, sendOpen: 300},
		{done: 100, collDone: 100, pending: 156, inFlight: 101, sendOpen: 200, stepsDone: 100, netStep: 100},
		{done: 300, collDone: 300, sendOpen: 0, stepsDone: 300, netStep: 300},
	} {
		dir := t.TempDir()
		b.run(t, dir, "burst", 5, c.done, env...)
		r := oneRegion(t, dir)
		if r.Process.DroppedEvents != 0 || len(r.Comms) != 1 {
			t.Fatalf("burst %d: dropped %d, %d comms", c.done, r.Process.DroppedEvents, len(r.Comms))
		}
		m := r.Comms[0]
		s := m.Peers[0].Send
		switch {
		case m.CollIssued != 300 || m.CollDone != c.collDone || uint64(m.Pending) != c.pending || m.MergedOps != 44 ||
			(c.done > 0) != (m.TimedColls > 0):
			t.Errorf("burst %d: %s", c.done, dump(m))
		case (c.inFlight == 0) != (m.InFlight == nil) || (m.InFlight != nil && m.InFlight.Seq != c.inFlight):
			t.Errorf("burst %d: in flight %+v, want seq %d", c.done, m.InFlight, c.inFlight)
		case s.ProxyOps != 300 || s.OpenProxyOps() != c.sendOpen || s.StepsDone != c.stepsDone || s.NetSteps != c.netStep ||
			m.Peers[0].Recv.ProxyOps != 300:
			t.Errorf("burst %d: peer %+v", c.done, m.Peers[0])
		}
		checkHistory(t, m, Sig{Func: "AllReduce", Count: 1024, Datatype: "ncclFloat32"})
	}
}

// checkHistory checks a comm's call history after CollIssued collectives of one signature:
// the newest 64 signatures, the last four marks every 16 positions (and the level above),
// and digests equal to the signatures'.
func checkHistory(t *testing.T, m Comm, each Sig) {
	t.Helper()
	n := m.CollIssued
	all := make([]Sig, n)
	for i := range all {
		all[i] = each
		all[i].Seq = uint64(i + 1)
	}
	if m.Digest != refDigest(all) {
		t.Errorf("digest %#x, want %#x", m.Digest, refDigest(all))
	}
	if len(m.Sigs) != min(int(n), numSigs) || m.Sigs[len(m.Sigs)-1].Seq != n {
		t.Fatalf("%d signatures ending at %d, want the newest %d", len(m.Sigs), m.Sigs[len(m.Sigs)-1].Seq, min(int(n), numSigs))
	}
	for _, g := range m.Sigs {
		if g.Issued == 0 || g.Func != each.Func || g.Count != each.Count || g.Datatype != each.Datatype {
			t.Errorf("signature %+v", g)
		}
	}
	want := map[uint64]bool{}
	for k := range uint64(marksPerLevel) {
		if s := (n/16 - k) * 16; s > 0 && n/16 >= k {
			want[s] = true
		}
	}
	for s := uint64(256); s <= n; s += 256 {
		if n/256-s/256 < marksPerLevel {
			want[s] = true
		}
	}
	if len(m.Marks) != len(want) {
		t.Errorf("marks %+v, want positions %v", m.Marks, want)
	}
	for _, mk := range m.Marks {
		if !want[mk.Seq] || mk.Digest != refDigest(all[:mk.Seq]) || mk.T == 0 {
			t.Errorf("mark %+v (want the digest %#x)", mk, refDigest(all[:mk.Seq]))
		}
	}
}

// testThreads runs four communicators with NCCL's three calling threads each. With
// `watch`, the test reads the region all along and checks what must hold at any moment.
func testThreads(t *testing.T, b *built, ops int, watch bool, env ...string) string {
	dir := t.TempDir()
	start := time.Now()
	cmd := b.command(context.Background(), dir, "threads", 5, ops, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	reads, busy, retries0 := 0, 0, slotRetries.Load()
	var werr error
	prev := map[CommID]Comm{}
	for running := true; running; {
		if !watch {
			werr = <-done
			break
		}
		select {
		case werr = <-done:
			running = false
		default:
		}
		found, _ := Scan(dir)
		for _, f := range found {
			if f.Err != nil {
				t.Fatalf("read while written: %v", f.Err)
			}
			reads++
			busy += len(f.Region.Busy)
			for _, c := range f.Region.Comms {
				checkMonotonic(t, prev[c.ID], c)
				prev[c.ID] = c
			}
		}
	}
	if werr != nil {
		t.Fatalf("driver: %v\n%s", werr, out.String())
	}
	r := oneRegion(t, dir)
	events := 4 * ops * 36
	t.Logf("%d comms x %d ops, %d plugin calls in %v; %d concurrent reads, %d slot copies retried, %d busy",
		4, ops, events, time.Since(start).Round(time.Millisecond), reads, slotRetries.Load()-retries0, busy)
	if len(r.Comms) != 4 || r.Process.DroppedEvents != 0 {
		t.Fatalf("%d comms, %d dropped", len(r.Comms), r.Process.DroppedEvents)
	}
	colls, p2ps := uint64(ops-ops/4), uint64(ops/4)
	for _, c := range r.Comms {
		if c.CollIssued != colls || c.CollDone != colls || c.CollStarted != colls || c.P2PIssued != p2ps ||
			c.P2PDone != p2ps || c.Pending != 0 || c.InFlight != nil || len(c.Peers) != 2 {
			t.Errorf("comm after the run:\n%s", dump(c))
			continue
		}
		n := uint64(ops)
		s, v := c.Peers[0].Send, c.Peers[1].Recv
		if s.ProxyOps != n || s.ProxyOpsDone != n || s.Steps != 2*n || s.StepsDone != 2*n ||
			v.ProxyOps != n || v.ProxyOpsDone != n || v.Steps != 2*n || v.StepsDone != 2*n {
			t.Errorf("comm %s peers %+v", c.ID, c.Peers)
		}
	}
	return out.String()
}

// checkMonotonic: counters never go back, and an op is never done before it started or
// started before it was issued.
func checkMonotonic(t *testing.T, prev, c Comm) {
	t.Helper()
	if c.CollDone > c.CollStarted || c.CollStarted > c.CollIssued || c.P2PDone > c.P2PIssued {
		t.Fatalf("comm %s: done %d, started %d, issued %d, p2p %d/%d", c.ID, c.CollDone, c.CollStarted,
			c.CollIssued, c.P2PDone, c.P2PIssued)
	}
	if c.CollIssued < prev.CollIssued || c.CollStarted < prev.CollStarted || c.CollDone < prev.CollDone ||
		c.P2PDone < prev.P2PDone {
		t.Fatalf("comm %s went back:\n%s\nafter\n%s", c.ID, dump(c), dump(prev))
	}
	for _, p := range c.Peers {
		for _, d := range []PeerDir{p.Send, p.Recv} {
			if d.StepsDone > d.Steps || d.ProxyOpsDone > d.ProxyOps {
				t.Fatalf("comm %s peer %d: %+v", c.ID, p.Rank, d)
			}
		}
	}
}

func testFork(t *testing.T, b *built, env ...string) {
	dir := t.TempDir()
	out := b.run(t, dir, "fork", 5, 0, env...)
	var parent, child int
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "child" {
			child, _ = strconv.Atoi(f[1])
		} else if len(f) == 5 && f[0] == "ok" {
			parent, _ = strconv.Atoi(f[4])
		}
	}
	rs := regions(t, dir)
	if len(rs) != 2 || parent == 0 || child == 0 {
		t.Fatalf("%d regions for parent %d and child %d:\n%s", len(rs), parent, child, out)
	}
	for _, r := range rs {
		want, ok := map[int]struct {
			id   CommID
			done uint64
		}{parent: {0xF0, 2}, child: {0xF1, 3}}[r.Process.PID]
		if !ok || len(r.Comms) != 1 || r.Comms[0].ID != want.id || r.Comms[0].CollDone != want.done {
			t.Errorf("region of pid %d: %+v", r.Process.PID, r.Comms)
		}
	}
}

func testDisabled(t *testing.T, b *built) {
	dir := t.TempDir()
	b.run(t, dir, "disabled", 5, 0, "NCCLWATCH_PROFILER=0")
	if rs := regions(t, dir); len(rs) != 0 {
		t.Errorf("NCCLWATCH_PROFILER=0 still wrote %d regions", len(rs))
	}
	for _, ver := range []int{3, 5} {
		missing := filepath.Join(dir, "no", "such", "dir")
		out := b.run(t, missing, "disabled", ver, 0)
		if ver >= 4 && !strings.Contains(out, "LOG 2 NCCL watchdog profiler disabled: cannot create "+missing) {
			t.Errorf("v%d: no WARN through NCCL's logger:\n%s", ver, out)
		}
	}
}

// Without NCCLWATCH_PROFILER_DIR the region goes where NCCL_DEBUG_FILE writes.
func testDebugFileDir(t *testing.T, b *built) {
	dir := t.TempDir()
	b.run(t, "", "basic", 5, 0, "NCCL_DEBUG_FILE="+filepath.Join(dir, "nccl.%h.%p.log"))
	r := oneRegion(t, dir)
	if len(r.Comms) != 1 || !strings.HasPrefix(filepath.Base(r.Path), FilePrefix) {
		t.Errorf("region %s: %+v", r.Path, r.Comms)
	}
}

// TestPluginNCCLVersion: the plugin asks the libnccl.so.2 already loaded in the process for
// its version (RTLD_NOLOAD). A stand-in library with that soname, preloaded, answers 22809.
func TestPluginNCCLVersion(t *testing.T) {
	gcc := needGCC(t)
	b := build(t, gcc, variants[0])
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "fake.c"), filepath.Join(dir, "libnccl.so.2")
	code := "int ncclGetVersion(int *v) { *v = 22809; return 0; }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("fake libnccl: %v\n%s", err, out)
	}
	regions := filepath.Join(dir, "regions")
	if err := os.Mkdir(regions, 0o755); err != nil {
		t.Fatal(err)
	}
	b.run(t, regions, "basic", 5, 0, "LD_PRELOAD="+lib)
	if v := oneRegion(t, regions).Process.NCCLVersion; v != "2.28.9" {
		t.Errorf("NCCL version %q, want 2.28.9", v)
	}
}

// TestPluginCost measures the plugin's cost per call on one thread, with and without
// ProxyStep events; the bound only catches a pathological regression.
func TestPluginCost(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	b := build(t, needGCC(t), variants[0])
	for _, steps := range []string{"1", "0"} {
		out := b.run(t, t.TempDir(), "bench", 5, 50000, "NCCLWATCH_PROFILER_STEPS="+steps)
		i := strings.Index(out, "bench ")
		if i < 0 {
			t.Fatalf("no bench line:\n%s", out)
		}
		line, _, _ := strings.Cut(out[i:], "\n")
		t.Logf("NCCLWATCH_PROFILER_STEPS=%s: %s", steps, line)
		f := strings.Fields(line)
		ns, err := strconv.ParseFloat(f[4], 64)
		if err != nil || ns > 5000 {
			t.Errorf("%s: %v", line, err)
		}
	}
}

// TestRegionLockTellsALiveProcess: a region whose process runs is locked; once the process
// is killed (its header still says running) the lock is gone.
func TestRegionLockTellsALiveProcess(t *testing.T) {
	rank := profiletest.Build(t).Start(t, t.TempDir())
	rank.Do("init 0 77 2 0", "coll 0 AllReduce 8 1")
	if alive, err := Alive(rank.Path()); err != nil || !alive {
		t.Fatalf("running process: alive %v, %v", alive, err)
	}
	rank.Kill()
	r, err := Read(rank.Path())
	if err != nil || r.Process.State != ProcRunning {
		t.Fatalf("a killed process's region should still say running: %+v, %v", r, err)
	}
	if alive, err := Alive(rank.Path()); err != nil || alive {
		t.Fatalf("killed process: alive %v, %v", alive, err)
	}
}

// refDigest is the plugin's call-history digest, written from its contract in
// profiler/region.h: per signature the function and datatype as their 16 NUL-padded bytes
// (two words each), the root for rooted collectives only, then the count.
func refDigest(sigs []Sig) uint64 {
	mix := func(d, v uint64) uint64 {
		d ^= v + 0x9e3779b97f4a7c15
		d *= 0xbf58476d1ce4e5b9
		return d ^ d>>31
	}
	words := func(s string) (uint64, uint64) {
		var b [16]byte
		copy(b[:15], s)
		return le.Uint64(b[:8]), le.Uint64(b[8:])
	}
	var d uint64
	for _, g := range sigs {
		f0, f1 := words(g.Func)
		t0, t1 := words(g.Datatype)
		root := uint64(0)
		switch g.Func {
		case "Broadcast", "Reduce", "Gather", "Scatter":
			root = uint64(uint32(int32(g.Root)))
		}
		for _, v := range []uint64{f0, f1, t0, t1, root, g.Count} {
			d = mix(d, v)
		}
	}
	return d
}
