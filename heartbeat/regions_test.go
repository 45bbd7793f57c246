package heartbeat_test

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat"
	"github.com/ncclwatch/watchdog/heartbeat/proc"
	"github.com/ncclwatch/watchdog/heartbeat/profile"
	"github.com/ncclwatch/watchdog/heartbeat/profile/profiletest"
	"github.com/ncclwatch/watchdog/internal/syncbuf"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The profiler source's tests run simulated ranks (profiletest: the real plugin, called the
// way NCCL calls it) that write real regions, and read them through a running sidecar.

// fakeClock is the sidecar's clock, advanced by the test.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }
func hostShort(t *testing.T) string      { h, _ := os.Hostname(); h, _, _ = strings.Cut(h, "."); return h }
func env(rank, world int) []string {
	return []string{fmt.Sprintf("RANK=%d", rank), fmt.Sprintf("WORLD_SIZE=%d", world)}
}
func procByPID(n *snapshot.Node, pid int) *snapshot.Process {
	for i := range n.Processes {
		if n.Processes[i].PID == pid {
			return &n.Processes[i]
		}
	}
	return nil
}

// regionSidecar runs a sidecar reading regions in dir (and logs in logs) on clock.
func regionSidecar(t *testing.T, logs, dir string, clock *fakeClock, logOut *syncbuf.Buffer) *heartbeat.Sidecar {
	return runLocalSidecar(t, logs, func(o *heartbeat.Options) {
		o.ProfilerDirs, o.SampleEvery, o.KeepExited = []string{dir}, 20*time.Millisecond, time.Minute
		if clock != nil {
			o.Now = clock.Now
		}
		if logOut != nil {
			o.Logger = slog.New(slog.NewTextHandler(logOut, nil))
		}
	})
}

func waitSnapshot(t *testing.T, s *heartbeat.Sidecar, what string, cond func(n *snapshot.Node) bool) *snapshot.Node {
	t.Helper()
	var n *snapshot.Node
	if waitFor(t, 10*time.Second, func() bool { n = s.Snapshot(); return cond(n) }) < 0 {
		t.Fatalf("%s: snapshot %+v", what, n)
	}
	return n
}

// TestRegionWithoutLogIsAProcess: a job at NCCL_DEBUG=WARN has no per-op lines: each region
// is a rank process of its own, with its completion state, its op in flight and its peers.
func TestRegionWithoutLogIsAProcess(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	r0 := kit.Start(t, dir, env(0, 2)...)
	r0.Do("init 0 c0ffee 2 0",
		"coll 0 AllReduce 1024 1", "run 0 1 2",
		"coll 0 AllReduce 1024 1", "start 1", "px 1 1 1 4 0", "px 1 1 0 4 0", "step 2 0 3", "step 2 1 2", "step 3 0 1")
	s := regionSidecar(t, t.TempDir(), dir, nil, nil)
	n := waitSnapshot(t, s, "region as a process", func(n *snapshot.Node) bool { return procByPID(n, r0.PID) != nil })
	p := procByPID(n, r0.PID)
	if p.Source != snapshot.SourcePlugin || p.Plugin == nil || p.Plugin.ABI != 5 || p.Rank != 0 || p.WorldSize != 2 ||
		p.Host != hostShort(t) || p.State != snapshot.ProcRunning || len(p.Comms) != 1 {
		t.Fatalf("process %+v", p)
	}
	c := p.Comms[0]
	d := c.Done
	if c.ID != "0xc0ffee" || c.NRanks != 2 || c.Count != 2 || d == nil || d.Issued != 2 || d.Started != 2 || d.Done != 1 {
		t.Fatalf("comm %+v done %+v", c, d)
	}
	f := d.InFlight
	if f == nil || f.Seq != 2 || f.Op.Op != "AllReduce" || f.Dtype != "float32" || f.GPUStart == 0 || f.ProxyOpen != 2 ||
		f.Idx != 2 || c.Last == nil || c.Last.Seq != 2 || c.Last.Idx != 2 {
		t.Fatalf("in flight %+v, last %+v", f, c.Last)
	}
	var send, recv *snapshot.PeerProgress
	for i := range d.Peers {
		switch pp := &d.Peers[i]; pp.Dir {
		case snapshot.DirSend:
			send = pp
		case snapshot.DirRecv:
			recv = pp
		}
	}
	// The run's two steps each way, then one send step done and one waiting for the peer's
	// receive; the receive waits for the peer's data.
	if send == nil || recv == nil || send.Peer != 1 || send.Open != 1 || send.State != snapshot.ProxySendPeerWait ||
		recv.State != snapshot.ProxyRecvWait || send.StepsDone != 3 || send.Steps != 6 || recv.StepsDone != 2 {
		t.Fatalf("peers %+v", d.Peers)
	}
}

// TestRegionJoinsItsLog: the log and the region of one process are one process: a root
// communicator joins by commId, a split child (no commId in the log) by creation order, size
// and rank, and then goes by the plugin's commId.
func TestRegionJoinsItsLog(t *testing.T) {
	kit := profiletest.Build(t)
	dir, logs := t.TempDir(), t.TempDir()
	r := kit.Start(t, dir, env(1, 2)...)
	r.Do("init 0 feed 2 1", "init 1 5b11 2 1", "coll 0 AllReduce 8 1", "run 0 0 1", "coll 1 AllGather 8 1")
	host := hostShort(t)
	line := func(msg string) string { return fmt.Sprintf("%s:%d:%d [0] NCCL INFO %s\n", host, r.PID, r.PID, msg) }
	log := line("NCCL version 2.28.9+cuda13.0") +
		line("ncclCommInitRankConfig comm 0xa rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xfeed - Init COMPLETE") +
		line("ncclCommSplit comm 0xb rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 parent 0xa splitCount 1 color 3 key 1 - Init COMPLETE") +
		line("AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream (nil)") +
		line("AllGather: opCount 0 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0xb [nranks=2] stream (nil)")
	if err := os.WriteFile(filepath.Join(logs, fmt.Sprintf("nccl.%s.%d.log", host, r.PID)), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	s := regionSidecar(t, logs, dir, nil, nil)
	n := waitSnapshot(t, s, "log and region joined", func(n *snapshot.Node) bool {
		p := procByPID(n, r.PID)
		return p != nil && p.Source == snapshot.SourceBoth && len(p.Comms) == 2 && p.Comms[1].Count == 1
	})
	if len(n.Processes) != 1 {
		t.Fatalf("one process expected, got %d: %+v", len(n.Processes), n.Processes)
	}
	p := n.Processes[0]
	world, split := p.Comms[0], p.Comms[1]
	if world.ID != "0xfeed" || world.Done == nil || world.Done.Done != 1 || world.Last == nil || world.Last.Red != "sum" {
		t.Fatalf("world %+v done %+v", world, world.Done)
	}
	if split.ID != "0x5b11" || split.Done == nil || split.Done.Issued != 1 || split.Done.InFlight == nil ||
		split.Done.InFlight.Op.Op != "AllGather" {
		t.Fatalf("split child %+v done %+v", split, split.Done)
	}
	// Log ops carry the log's issue order, the plugin's ops its own: each orders the process's calls.
	if world.Last.Idx != 1 || split.Last.Idx != 2 || split.Done.InFlight.Idx != 2 {
		t.Fatalf("issue order: world %d, split %d, in flight %d", world.Last.Idx, split.Last.Idx, split.Done.InFlight.Idx)
	}
}

// TestRegionOfAKilledProcess: a rank killed by a signal leaves a region that still says
// running; its lock says otherwise. The process is exited (never paged from as if alive),
// kept for KeepExited, then left out, and its region is not read again. A restarted rank
// (a new pid) is a new process.
func TestRegionOfAKilledProcess(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	clock := newFakeClock()
	old := kit.Start(t, dir, env(0, 2)...)
	old.Do("init 0 1234 2 0", "coll 0 AllReduce 8 1", "start 0")
	lb := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(lb.String())
		}
	})
	s := regionSidecar(t, t.TempDir(), dir, clock, lb)
	waitSnapshot(t, s, "running", func(n *snapshot.Node) bool {
		p := procByPID(n, old.PID)
		return p != nil && p.State == snapshot.ProcRunning
	})
	old.Kill()
	n := waitSnapshot(t, s, "killed", func(n *snapshot.Node) bool {
		p := procByPID(n, old.PID)
		return p != nil && p.State == snapshot.ProcExited
	})
	if p := procByPID(n, old.PID); p.ExitedAt == 0 || p.Comms[0].Done.InFlight == nil {
		t.Fatalf("a killed rank keeps its last state, exited: %+v", p)
	}
	restarted := kit.Start(t, dir, env(0, 2)...)
	restarted.Do("init 0 5678 2 0")
	n = waitSnapshot(t, s, "restart", func(n *snapshot.Node) bool { return procByPID(n, restarted.PID) != nil })
	if p := procByPID(n, old.PID); p == nil || p.State != snapshot.ProcExited {
		t.Fatalf("the killed rank must stay, exited, for KeepExited: %+v", n.Processes)
	}
	clock.Add(2 * time.Minute)
	after := snapshot.MicrosOf(clock.Now())
	waitSnapshot(t, s, "dropped after KeepExited", func(n *snapshot.Node) bool {
		p := procByPID(n, restarted.PID)
		return procByPID(n, old.PID) == nil && p != nil && p.Plugin.Read >= after // read on the new clock
	})
	// A rank that exits cleanly says so in its header.
	restarted.Exit()
	waitSnapshot(t, s, "clean exit", func(n *snapshot.Node) bool {
		p := procByPID(n, restarted.PID)
		return p != nil && p.State == snapshot.ProcExited
	})
}

// TestRegionsThatCannotBeRead: a region of another layout version is reported once and
// skipped; a truncated one and garbage are skipped; none of them stops the others.
func TestRegionsThatCannotBeRead(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	good := kit.Start(t, dir, env(0, 2)...)
	good.Do("init 0 99 2 0", "coll 0 AllReduce 8 1")
	img, err := os.ReadFile(good.Path())
	if err != nil {
		t.Fatal(err)
	}
	other := append([]byte(nil), img...)
	binary.LittleEndian.PutUint32(other[8:], profile.LayoutVersion+1)
	write := func(pid int, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, profile.FileName("elsewhere", pid)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(1, other)
	write(2, img[:5000])
	write(3, []byte("not a region"))
	logs := &syncbuf.Buffer{}
	s := regionSidecar(t, t.TempDir(), dir, nil, logs)
	n := waitSnapshot(t, s, "good region read", func(n *snapshot.Node) bool { return procByPID(n, good.PID) != nil })
	time.Sleep(200 * time.Millisecond) // several more polls
	n = s.Snapshot()
	if len(n.Processes) != 1 {
		t.Fatalf("only the good region is a process: %+v", n.Processes)
	}
	if c := strings.Count(logs.String(), "profiler region of another layout version"); c != 1 {
		t.Fatalf("another version reported %d times, want once:\n%s", c, logs.String())
	}
	if c := strings.Count(logs.String(), "profiler region unreadable"); c != 2 {
		t.Fatalf("truncated and garbage files reported %d times, want once each", c)
	}
}

// TestStaleRegionLeftOut: regions of processes that ended long before the sidecar came
// (an earlier job's, left in /dev/shm) are never reported, so never taken for a crash; one
// that ended within KeepExited of the sidecar's start still is (it crashed while the sidecar
// restarted), and so is a rank the sidecar saw alive, then dead.
func TestStaleRegionLeftOut(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	old := kit.Start(t, dir, env(0, 2)...)
	old.Do("init 0 1 2 0", "coll 0 AllReduce 8 1", "start 0")
	old.Kill()
	recent := kit.Start(t, dir, env(1, 2)...)
	recent.Do("init 0 2 2 1", "coll 0 AllReduce 8 1", "start 0")
	clock := newFakeClock()
	clock.Add(20 * time.Minute) // the sidecar starts 20 minutes after the first rank was killed
	s := regionSidecar(t, t.TempDir(), dir, clock, nil)
	n := waitSnapshot(t, s, "the live region", func(n *snapshot.Node) bool { return procByPID(n, recent.PID) != nil })
	if p := procByPID(n, old.PID); p != nil {
		t.Fatalf("a region of a process gone 20 minutes ago is reported: %+v", p)
	}
	recent.Kill()
	waitSnapshot(t, s, "a crash seen by the sidecar", func(n *snapshot.Node) bool {
		p := procByPID(n, recent.PID)
		return p != nil && p.State == snapshot.ProcExited
	})
}

// TestRegionProcStats: a rank known only by its region (its lock tells its liveness) is
// watched through /proc all the same, for its scheduler state and CPU use; once it is gone
// for KeepExited, the watcher lets go of its pid.
func TestRegionProcStats(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	clock := newFakeClock()
	r := kit.Start(t, dir, env(0, 2)...)
	r.Do("init 0 c0ffee 2 0", "coll 0 AllReduce 1024 1")
	watcher := proc.New(proc.Options{Every: 20 * time.Millisecond})
	s := runLocalSidecar(t, t.TempDir(), func(o *heartbeat.Options) {
		o.ProfilerDirs, o.SampleEvery, o.KeepExited, o.Now = []string{dir}, 20*time.Millisecond, time.Minute, clock.Now
		o.Liveness = watcher
	})
	// The driver waits for its next script line: asleep, no CPU to speak of.
	n := waitSnapshot(t, s, "/proc state of a plugin-only rank", func(n *snapshot.Node) bool {
		p := procByPID(n, r.PID)
		return p != nil && p.Stat != ""
	})
	if p := procByPID(n, r.PID); p.Source != snapshot.SourcePlugin || p.State != snapshot.ProcRunning ||
		p.Stat != snapshot.SchedSleeping || p.CPUPct > 20 {
		t.Fatalf("process %+v", p)
	}
	r.Kill()
	n = waitSnapshot(t, s, "killed", func(n *snapshot.Node) bool {
		p := procByPID(n, r.PID)
		return p != nil && p.State == snapshot.ProcExited
	})
	if p := procByPID(n, r.PID); p.Stat != "" || p.CPU != 0 {
		t.Fatalf("an exited rank keeps its /proc reading: %+v", p)
	}
	clock.Add(2 * time.Minute)
	if waitFor(t, 5*time.Second, func() bool { _, ok := watcher.Info(r.PID); return !ok }) < 0 {
		t.Fatal("the pid of a rank gone for KeepExited is still watched")
	}
}

// A process that finalized a communicator (destroy_process_group) and lives on still shows
// it, destroyed at its last counts: the plugin frees the slot, and its peers, which wait for
// it there, must see that it left rather than lose it.
func TestRegionKeepsAFinalizedCommunicatorWhileItLives(t *testing.T) {
	kit := profiletest.Build(t)
	dir := t.TempDir()
	r0 := kit.Start(t, dir, env(0, 2)...)
	r0.Do("init 0 c0ffee 2 0", "coll 0 AllReduce 1024 1", "run 0 1 2", "init 1 beef 2 0", "coll 1 AllReduce 1024 1", "run 1 1 2")
	s := regionSidecar(t, t.TempDir(), dir, nil, nil)
	waitSnapshot(t, s, "both communicators", func(n *snapshot.Node) bool {
		p := procByPID(n, r0.PID)
		return p != nil && len(p.Comms) == 2
	})
	r0.Do("fin 0")
	n := waitSnapshot(t, s, "the finalized communicator, destroyed", func(n *snapshot.Node) bool {
		p := procByPID(n, r0.PID)
		return p != nil && len(p.Comms) == 2 && (p.Comms[0].State == snapshot.CommDestroyed || p.Comms[1].State == snapshot.CommDestroyed)
	})
	for _, c := range procByPID(n, r0.PID).Comms {
		switch c.ID {
		case "0xc0ffee":
			if c.State != snapshot.CommDestroyed || c.Count != 1 || c.Rank != 0 || c.NRanks != 2 {
				t.Fatalf("finalized comm %+v", c)
			}
		case "0xbeef":
			if c.State.Ended() {
				t.Fatalf("live comm %+v", c)
			}
		default:
			t.Fatalf("comm %+v", c)
		}
	}
}
