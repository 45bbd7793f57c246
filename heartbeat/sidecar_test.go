package heartbeat_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/heartbeat"
	"github.com/ncclwatch/watchdog/heartbeat/gpu"
	"github.com/ncclwatch/watchdog/heartbeat/proc"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/snapshot"
)

// rankWriter writes an NCCL 2.28 log like a real rank.
type rankWriter struct {
	f    *os.File
	pid  int
	comm string
	n    int
}

func newRankWriter(t *testing.T, dir string, pid, rank int) *rankWriter {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("nccl.node0.%d.log", pid)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	w := &rankWriter{f: f, pid: pid, comm: fmt.Sprintf("0x%x", 0x1000+rank)}
	w.line("NCCL version 2.28.9+cuda13.0")
	w.line(fmt.Sprintf("ncclCommInitRankConfig comm %s rank %d nranks 2 cudaDev %d nvmlDev %d busId %d0000 commId 0xfeed - Init START", w.comm, rank, rank, rank, rank+1))
	w.line(fmt.Sprintf("ncclCommInitRankConfig comm %s rank %d nranks 2 cudaDev %d nvmlDev %d busId %d0000 commId 0xfeed - Init COMPLETE", w.comm, rank, rank, rank, rank+1))
	return w
}

func (w *rankWriter) line(msg string) {
	fmt.Fprintf(w.f, "node0:%d:%d [0] NCCL INFO %s\n", w.pid, w.pid, msg)
}

func (w *rankWriter) allReduce(k int) {
	for i := 0; i < k; i++ {
		w.n++
		w.line(fmt.Sprintf("AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count %d datatype 7 op 0 root 0 comm %s [nranks=2] stream (nil)", 1000+w.n%3, w.comm))
	}
}

type testEtcd struct {
	srv  *etcdembed.Server
	dir  string
	addr string
}

func startEtcd(t *testing.T, dir, addr string) *testEtcd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Options{Dir: dir, ClientAddr: addr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &testEtcd{srv: srv, dir: dir, addr: addr}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type harness struct {
	t       *testing.T
	cli     *clientv3.Client
	cancel  context.CancelFunc
	done    chan struct{}
	side    *heartbeat.Sidecar
	release func()
}

// startSidecar runs a sidecar as cmd/watchdog builds it (no GPU, port, RAS or liveness
// source) on the logs in logDir, publishing to endpoint.
func startSidecar(t *testing.T, endpoint, logDir, stateDir string, ttl time.Duration) *harness {
	t.Helper()
	return startSidecarWith(t, endpoint, logDir, stateDir, ttl, nil)
}

// startSidecarWith is startSidecar with sources added to the configuration by extra.
func startSidecarWith(t *testing.T, endpoint, logDir, stateDir string, ttl time.Duration, extra func(*assemble.SidecarConfig)) *harness {
	t.Helper()
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg := assemble.SidecarConfig{Job: "job1", Node: "node0",
		LogPatterns: []string{filepath.Join(logDir, "*.log")}, StateDir: stateDir, SampleEvery: 200 * time.Millisecond,
		Publish: assemble.PublishConfig{LeaseTTL: ttl, Interval: 200 * time.Millisecond, MaxBackoff: time.Second},
		Logger:  slog.New(slog.DiscardHandler)}
	if extra != nil {
		extra(&cfg)
	}
	s, release, err := assemble.Sidecar(ctx, cli, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	h := &harness{t: t, cli: cli, cancel: cancel, done: make(chan struct{}), side: s, release: release}
	go func() { defer close(h.done); s.Run(ctx) }()
	return h
}

func (h *harness) stop() {
	h.cancel()
	<-h.done
	h.release()
	h.cli.Close()
}

// runLocalSidecar runs a sidecar without etcd on the logs in logDir until the test ends.
func runLocalSidecar(t *testing.T, logDir string, extra func(*heartbeat.Options)) *heartbeat.Sidecar {
	t.Helper()
	opts := heartbeat.Options{Job: "j", Node: "node0", LogPatterns: []string{filepath.Join(logDir, "*.log")},
		Logger: slog.New(slog.DiscardHandler)}
	if extra != nil {
		extra(&opts)
	}
	s, err := heartbeat.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s
}

// published reads the node key; nil when there is none.
func published(t *testing.T, cli *clientv3.Client) *snapshot.Node {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := cli.Get(ctx, snapshot.NodeKey("job1", "node0"))
	if err != nil || len(r.Kvs) == 0 {
		return nil
	}
	n, err := snapshot.Decode(r.Kvs[0].Value)
	if err != nil {
		t.Fatalf("published snapshot does not decode: %v", err)
	}
	return n
}

// counts reads the node key and returns the collective count per pid.
func counts(t *testing.T, cli *clientv3.Client) (map[int]int64, bool) {
	n := published(t, cli)
	if n == nil {
		return nil, false
	}
	out := map[int]int64{}
	for _, p := range n.Processes {
		for _, c := range p.Comms {
			out[p.PID] += c.Count
		}
	}
	return out, true
}

func waitFor(t *testing.T, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

// TestNewCollectiveReachesEtcd: the node key shows a new collective within 2 s of its line.
func TestNewCollectiveReachesEtcd(t *testing.T) {
	e := startEtcd(t, t.TempDir(), "127.0.0.1:0")
	defer e.srv.Close()
	logs := t.TempDir()
	w := newRankWriter(t, logs, 4242, 0)
	h := startSidecar(t, e.srv.Endpoints()[0], logs, "", 10*time.Second)
	defer h.stop()
	for i := 1; i <= 5; i++ {
		w.allReduce(1)
		d := waitFor(t, 2*time.Second, func() bool { c, ok := counts(t, h.cli); return ok && c[4242] == int64(i) })
		if d < 0 {
			c, _ := counts(t, h.cli)
			t.Fatalf("collective %d not in etcd within 2 s (have %v)", i, c)
		}
		t.Logf("collective %d visible in etcd after %s", i, d.Round(time.Millisecond))
	}
}

// TestKilledSidecarKeyExpires: a sidecar that dies without a clean stop loses its key when
// its lease expires, not before.
func TestKilledSidecarKeyExpires(t *testing.T) {
	e := startEtcd(t, t.TempDir(), "127.0.0.1:0")
	defer e.srv.Close()
	logs := t.TempDir()
	w := newRankWriter(t, logs, 4243, 0)
	w.allReduce(3)
	h := startSidecar(t, e.srv.Endpoints()[0], logs, "", 2*time.Second)
	if waitFor(t, 5*time.Second, func() bool { _, ok := counts(t, h.cli); return ok }) < 0 {
		t.Fatal("no snapshot published")
	}
	watcher, err := etcdconn.New(etcdconn.Config{Endpoints: e.srv.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	// "Kill": the client vanishes without revoking its lease, like a SIGKILLed process.
	killed := time.Now()
	h.cli.Close()
	var gone time.Duration
	if gone = waitFor(t, 10*time.Second, func() bool { _, ok := counts(t, watcher); return !ok }); gone < 0 {
		t.Fatal("node key still there 10 s after the sidecar died")
	}
	t.Logf("node key removed %s after the kill (lease TTL 2 s)", time.Since(killed).Round(100*time.Millisecond))
	if gone < time.Second {
		t.Errorf("key removed after %s, before its lease could expire", gone)
	}
	h.cancel()
	<-h.done
}

// TestEtcdOutage: etcd stopped for 20 s then restarted on the same port and data: the
// sidecar recovers by itself and republishes, with its place in the logs kept, within 5 s
// of etcd's return (gRPC's own reconnect backoff made that 15-20 s); meanwhile its
// liveness probe (/healthz, over real HTTP) stays 200 and /readyz says etcd is unreachable.
func TestEtcdOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s outage")
	}
	dir, addr := t.TempDir(), freeAddr(t)
	e := startEtcd(t, dir, addr)
	logs := t.TempDir()
	w := newRankWriter(t, logs, 4244, 0)
	w.allReduce(2)
	h := startSidecar(t, "http://"+addr, logs, "", 3*time.Second)
	defer h.stop()
	api := httptest.NewServer(h.side.HTTPHandler(nil))
	defer api.Close()
	if waitFor(t, 5*time.Second, func() bool { c, ok := counts(t, h.cli); return ok && c[4244] == 2 }) < 0 {
		t.Fatal("first snapshot missing")
	}
	if code := httpStatus(t, api.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d while publishing", code)
	}
	e.srv.Close()
	// The job goes on while etcd is down.
	for i := 0; i < 4; i++ {
		time.Sleep(5 * time.Second)
		w.allReduce(10)
		if code := httpStatus(t, api.URL+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz %d %ds into the etcd outage: liveness must not depend on etcd", code, 5*(i+1))
		}
	}
	if code := httpStatus(t, api.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d during the etcd outage, want 503", code)
	}
	e = startEtcd(t, dir, addr)
	defer e.srv.Close()
	d := waitFor(t, 5*time.Second, func() bool { c, ok := counts(t, h.cli); return ok && c[4244] == 42 })
	if d < 0 {
		c, _ := counts(t, h.cli)
		t.Fatalf("5 s after etcd came back the node key shows %v, want 42 collectives", c)
	}
	t.Logf("republished the full state %s after etcd came back", d.Round(100*time.Millisecond))
}

// httpStatus is the status of a GET, 0 when it fails.
func httpStatus(t *testing.T, url string) int {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRestartResumes: a restarted sidecar resumes each log where it stopped, with its
// communicators and counts, without reading the file again.
func TestRestartResumes(t *testing.T) {
	e := startEtcd(t, t.TempDir(), "127.0.0.1:0")
	defer e.srv.Close()
	logs, state := t.TempDir(), t.TempDir()
	w := newRankWriter(t, logs, 4245, 0)
	w.allReduce(40)
	h := startSidecar(t, e.srv.Endpoints()[0], logs, state, 10*time.Second)
	if waitFor(t, 5*time.Second, func() bool { c, ok := counts(t, h.cli); return ok && c[4245] == 40 }) < 0 {
		t.Fatal("first run did not publish 40")
	}
	h.stop()
	w.allReduce(25)
	h = startSidecar(t, e.srv.Endpoints()[0], logs, state, 10*time.Second)
	defer h.stop()
	if waitFor(t, 5*time.Second, func() bool { c, ok := counts(t, h.cli); return ok && c[4245] == 65 }) < 0 {
		c, _ := counts(t, h.cli)
		t.Fatalf("after restart: %v, want 65", c)
	}
	snap := h.side.Snapshot()
	if len(snap.Processes) != 1 || snap.Processes[0].Lines != 3+65 {
		t.Fatalf("process %+v: want lines counted once (68)", snap.Processes)
	}
	if id := snap.Processes[0].Comms[0].ID; id != "0xfeed" {
		t.Fatalf("resumed communicator identity %q, want 0xfeed", id)
	}
}

// TestGPUsAndWaiting: with a fake NVML, GPUs are published, matched to ranks by bus id,
// and a spinning GPU marks the communicator the rank waits in.
func TestGPUsAndWaiting(t *testing.T) {
	logs := t.TempDir()
	w := newRankWriter(t, logs, 4246, 0)
	w.allReduce(5)
	fake := gpu.NewFake(2)
	fake.Update(0, func(g *gpu.FakeGPU) {
		g.BusID = "00000000:10:00.0"
		g.Util, g.PowerMW, g.PowerLimitMW = 100, 121000, 700000
	})
	fake.SetProcesses(0, gpu.ComputeProcess{PID: 4246, UsedMemory: 70_000 << 20}, gpu.ComputeProcess{PID: 9999, UsedMemory: 600 << 20})
	sampler, err := gpu.NewWithLibrary(fake, gpu.Options{Window: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sampler.Close()
	s := runLocalSidecar(t, logs, func(o *heartbeat.Options) { o.GPU, o.SampleEvery = sampler, 50*time.Millisecond })
	var p snapshot.Process
	if waitFor(t, 5*time.Second, func() bool {
		n := s.Snapshot()
		if len(n.Processes) == 1 && len(n.GPUs) == 2 && n.Processes[0].GPUState != "" {
			p = n.Processes[0]
			return true
		}
		return false
	}) < 0 {
		t.Fatalf("no GPU state on the rank: %+v", s.Snapshot())
	}
	if p.BusID != "10000" || p.GPUState != "waiting" || !p.Comms[0].Waiting {
		t.Fatalf("rank bus %s state %s waiting %v; want 10000, waiting, true", p.BusID, p.GPUState, p.Comms[0].Waiting)
	}
	// The processes on each GPU go out with it, through the encoding a publish uses.
	b, err := snapshot.Encode(s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	n, err := snapshot.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if procs := n.GPUs[0].Procs; len(procs) != 2 || procs[0].PID != 4246 || procs[0].MemMiB != 70_000 || procs[1].PID != 9999 ||
		!n.GPUs[1].Has("procs") || n.GPUs[1].Procs != nil {
		t.Fatalf("GPU processes published: %+v and %+v", n.GPUs[0], n.GPUs[1])
	}
}

// TestRankFromLateEnvironment: a rank whose environment was still empty when its log
// appeared (caught inside execve) gets its RANK once the watcher reads it again.
func TestRankFromLateEnvironment(t *testing.T) {
	procRoot := t.TempDir()
	dir := filepath.Join(procRoot, "4247")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(procRoot, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", "cpu  1 2 3 4\nbtime 1700000000\n")
	write("4247/stat", "4247 (python3) S 1 4247 4247 0 -1 4194560 1520 0 0 0 12 3 0 0 20 0 1 0 100 9027584 396\n")
	write("4247/environ", "")
	watcher := proc.New(proc.Options{ProcRoot: procRoot, Every: 20 * time.Millisecond})

	logs := t.TempDir()
	w := newRankWriter(t, logs, 4247, 0)
	w.allReduce(1)
	s := runLocalSidecar(t, logs, func(o *heartbeat.Options) { o.Liveness, o.SampleEvery = watcher, 50*time.Millisecond })
	if waitFor(t, 5*time.Second, func() bool { n := s.Snapshot(); return len(n.Processes) == 1 }) < 0 {
		t.Fatal("the rank's log was not picked up")
	}
	if p := s.Snapshot().Processes[0]; p.WorldSize != 0 {
		t.Fatalf("world size %d before the environment was readable", p.WorldSize)
	}
	write("4247/environ", "RANK=1\x00LOCAL_RANK=0\x00WORLD_SIZE=2\x00")
	if waitFor(t, 5*time.Second, func() bool { p := s.Snapshot().Processes[0]; return p.Rank == 1 && p.WorldSize == 2 }) < 0 {
		t.Fatalf("rank and world size from the late environment not in the snapshot: %+v", s.Snapshot().Processes[0])
	}
}

// TestOwnsRank: a node keeps only its own ranks' RAS counts: same pid and, when NCCL printed
// one, the same bootstrap address.
func TestOwnsRank(t *testing.T) {
	logs := t.TempDir()
	w := newRankWriter(t, logs, 4247, 0)
	w.line("Bootstrap: Using eth0:10.1.2.3<0>")
	w.allReduce(1)
	s := runLocalSidecar(t, logs, nil)
	if waitFor(t, 5*time.Second, func() bool { return s.OwnsRank("10.1.2.3", 4247) }) < 0 {
		t.Fatal("own rank not recognised")
	}
	for _, c := range []struct {
		host string
		pid  int
	}{{"10.1.2.4", 4247}, {"10.1.2.3", 4248}} {
		if s.OwnsRank(c.host, c.pid) {
			t.Errorf("%s pid %d is not ours", c.host, c.pid)
		}
	}
}

// TestProcStatsPublished: a rank's scheduler state and CPU use, read from /proc by the
// liveness watcher, reach the node key in etcd; once the process exits they leave it.
func TestProcStatsPublished(t *testing.T) {
	procRoot := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(procRoot, "4248"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(procRoot, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat := func(state string, utime, stime int) string {
		return fmt.Sprintf("4248 (python3) %s 1 4248 4248 0 -1 4194560 1520 0 0 0 %d %d 0 0 20 0 1 0 100 9027584 396\n", state, utime, stime)
	}
	write("stat", "cpu  1 2 3 4\nbtime 1700000000\n")
	write("4248/stat", stat("S", 0, 0))
	e := startEtcd(t, t.TempDir(), "127.0.0.1:0")
	defer e.srv.Close()
	logs := t.TempDir()
	w := newRankWriter(t, logs, 4248, 0)
	w.allReduce(1)
	h := startSidecarWith(t, e.srv.Endpoints()[0], logs, "", 10*time.Second, func(c *assemble.SidecarConfig) {
		c.CheckPIDs, c.ProcRoot = true, procRoot
	})
	defer h.stop()
	if waitFor(t, 5*time.Second, func() bool { n := published(t, h.cli); return n != nil && len(n.Processes) == 1 }) < 0 {
		t.Fatal("the rank was not published")
	}
	// The rank burns 1.5 s of CPU in its main thread (user and kernel time both count).
	write("4248/stat", stat("R", 120, 30))
	var p snapshot.Process
	if waitFor(t, 5*time.Second, func() bool {
		n := published(t, h.cli)
		if n == nil || len(n.Processes) != 1 || n.Processes[0].Stat == "" {
			return false
		}
		p = n.Processes[0]
		return p.CPU == 1.5
	}) < 0 {
		t.Fatalf("no /proc reading of the rank in etcd: %+v", p)
	}
	if p.Stat != snapshot.SchedRunning || p.State != snapshot.ProcRunning || p.CPUPct <= 0 || p.CPUPct > 150 {
		t.Fatalf("published state %q, liveness %q, cpu %.2f s, %.1f%%; want R, running, 1.5 s, (0, 150]%%", p.Stat, p.State, p.CPU, p.CPUPct)
	}
	if err := os.RemoveAll(filepath.Join(procRoot, "4248")); err != nil {
		t.Fatal(err)
	}
	if waitFor(t, 5*time.Second, func() bool {
		n := published(t, h.cli)
		return n != nil && len(n.Processes) == 1 && n.Processes[0].State == snapshot.ProcExited
	}) < 0 {
		t.Fatal("the exit was not published")
	}
	if p := published(t, h.cli).Processes[0]; p.Stat != "" || p.CPU != 0 || p.CPUPct != 0 {
		t.Fatalf("an exited process keeps its /proc reading: %q %.2f s %.1f%%", p.Stat, p.CPU, p.CPUPct)
	}
}
