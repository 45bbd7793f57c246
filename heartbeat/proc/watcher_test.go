package proc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeProc is a /proc tree in a temporary directory.
type fakeProc struct {
	t    *testing.T
	root string
}

const fakeBoot = 1_700_000_000 // btime of the fake /proc/stat

func newFakeProc(t *testing.T) *fakeProc {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "stat"),
		[]byte("cpu  1 2 3 4\nintr 0\nbtime "+strconv.Itoa(fakeBoot)+"\nprocesses 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &fakeProc{t, root}
}

func (f *fakeProc) set(pid int, comm string, state byte, start uint64, environ string) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(statLine(pid, comm, state, start)), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if environ != "" {
		if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(environ), 0o400); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fakeProc) remove(pid int) {
	if err := os.RemoveAll(filepath.Join(f.root, strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
}

// exits records onExit calls.
type exits struct {
	mu  sync.Mutex
	got []int
	at  []time.Time
	ch  chan int
}

func newExits() *exits { return &exits{ch: make(chan int, 100)} }

func (e *exits) onExit(pid int, at time.Time) {
	e.mu.Lock()
	e.got = append(e.got, pid)
	e.at = append(e.at, at)
	e.mu.Unlock()
	e.ch <- pid
}

func (e *exits) take() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	got := e.got
	e.got, e.at = nil, nil
	return got
}

func TestWatcherFakeProc(t *testing.T) {
	fp := newFakeProc(t)
	now := time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC)
	w := New(Options{ProcRoot: fp.root, Now: func() time.Time { return now }})

	env := "HOME=/root\x00RANK=1\x00LOCAL_RANK=1\x00WORLD_SIZE=2\x00TORCHELASTIC_RUN_ID=none\x00"
	fp.set(100, "pt_main) (thread 1", 'S', 5000, env) // comm with ") (" and spaces
	fp.set(200, "python3", 'R', 6000, env)
	fp.set(300, "python3", 'S', 7000, "")
	fp.set(400, "python3", 'Z', 8000, "") // already a zombie when first seen

	info, err := w.Watch(100)
	if err != nil {
		t.Fatal(err)
	}
	want := Info{
		PID: 100, State: Running, Comm: "pt_main) (thread 1", StartTicks: 5000,
		Started:  time.Unix(fakeBoot+50, 0),
		Env:      Env{Rank: 1, LocalRank: 1, WorldSize: 2, GroupRank: -1, RunID: "none"},
		EnvKnown: true,
	}
	if !reflect.DeepEqual(info, want) {
		t.Errorf("Watch(100) = %+v\nwant %+v", info, want)
	}
	for _, pid := range []int{200, 300, 400} {
		if _, err := w.Watch(pid); err != nil {
			t.Fatal(err)
		}
	}
	if info, _ := w.Info(300); info.EnvKnown || info.Env != UnknownEnv || info.State != Running {
		t.Errorf("no environ file: %+v", info)
	}
	if info, _ := w.Info(400); info.State != Exited || !info.ExitedAt.Equal(now) {
		t.Errorf("zombie at Watch: %+v", info)
	}

	// Another pid namespace: the pid is not in our /proc.
	info, err = w.Watch(999)
	if err != nil || info.State != NotVisible || info.State.String() != "" {
		t.Errorf("Watch(999) = %+v, %v; want NotVisible", info, err)
	}
	if _, ok := w.Info(999); ok {
		t.Error("a pid not visible is watched")
	}
	if _, err := w.Watch(0); err == nil {
		t.Error("Watch(0) succeeded")
	}

	ex := newExits()
	w.Check(ex.onExit)
	if got := ex.take(); !reflect.DeepEqual(got, []int{400}) {
		t.Errorf("first check: exits %v, want [400] (zombie seen at Watch)", got)
	}

	now = now.Add(time.Second)
	fp.remove(100)                        // exited and reaped
	fp.set(200, "python3", 'S', 6001, "") // pid reused by a later process
	fp.set(300, "python3", 'Z', 7000, "") // exited, parent has not reaped it
	w.Check(ex.onExit)
	if got := ex.take(); !reflect.DeepEqual(got, []int{100, 200, 300}) {
		t.Errorf("exits %v, want [100 200 300]", got)
	}
	for _, pid := range []int{100, 200, 300} {
		info, ok := w.Info(pid)
		if !ok || info.State != Exited || info.State.String() != "exited" || !info.ExitedAt.Equal(now) {
			t.Errorf("Info(%d) = %+v, %v", pid, info, ok)
		}
	}
	w.Check(ex.onExit)
	if got := ex.take(); got != nil {
		t.Errorf("exits reported twice: %v", got)
	}

	// Watch of an exited pid keeps the old answer; after Unwatch it looks again.
	if info, _ := w.Watch(200); info.State != Exited {
		t.Errorf("re-Watch of exited pid: %+v", info)
	}
	w.Unwatch(200)
	if info, _ := w.Watch(200); info.State != Running || info.StartTicks != 6001 {
		t.Errorf("Watch after Unwatch: %+v", info)
	}
}

// TestWatcherEnvironLater: a process seen between execve and the loader's setting up of
// its stack has an empty environ; the watcher reads it again, a bounded number of times.
func TestWatcherEnvironLater(t *testing.T) {
	fp := newFakeProc(t)
	w := New(Options{ProcRoot: fp.root})
	for _, pid := range []int{10, 20} {
		fp.set(pid, "python3", 'S', 100, "")
		if err := os.WriteFile(filepath.Join(fp.root, strconv.Itoa(pid), "environ"), nil, 0o400); err != nil {
			t.Fatal(err)
		}
		if info, err := w.Watch(pid); err != nil || info.EnvKnown {
			t.Fatalf("Watch(%d) = %+v, %v; want the environment unknown", pid, info, err)
		}
	}
	fp.set(10, "python3", 'S', 100, "RANK=3\x00WORLD_SIZE=4\x00")
	w.Check(nil)
	if info, _ := w.Info(10); !info.EnvKnown || info.Env.Rank != 3 || info.Env.WorldSize != 4 {
		t.Errorf("after the environment appeared: %+v", info)
	}
	for i := 0; i < 2*envRetries; i++ {
		w.Check(nil)
	}
	w.mu.Lock()
	left := w.procs[20].envRetries
	w.mu.Unlock()
	if info, _ := w.Info(20); info.EnvKnown || left != 0 || info.State != Running {
		t.Errorf("an environment that stays empty: %+v, %d retries left", info, left)
	}
}

func TestWatcherEnvironPermission(t *testing.T) {
	fp := newFakeProc(t)
	fp.set(100, "python3", 'S', 5000, "RANK=3\x00")
	fp.set(200, "python3", 'S', 5000, "RANK=3\x00")
	w := New(Options{ProcRoot: fp.root})
	// Tests run as root, which reads every environ: refuse like the kernel does for
	// another user's process.
	w.readFile = func(path string) ([]byte, error) {
		if strings.HasSuffix(path, "environ") {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrPermission}
		}
		if strings.Contains(path, "/200/") {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrPermission}
		}
		return readLimited(path)
	}
	info, err := w.Watch(100)
	if err != nil || info.State != Running || info.EnvKnown || info.Env != UnknownEnv {
		t.Errorf("environ denied: %+v, %v", info, err)
	}
	// hidepid=1: the directory is there, its files are not readable.
	info, err = w.Watch(200)
	if err != nil || info.State != NotVisible {
		t.Errorf("stat denied: %+v, %v", info, err)
	}
}

func TestWatcherCap(t *testing.T) {
	fp := newFakeProc(t)
	for pid := 1; pid <= 3; pid++ {
		fp.set(pid, "p", 'S', 10, "")
	}
	w := New(Options{ProcRoot: fp.root, MaxPIDs: 2})
	for pid := 1; pid <= 2; pid++ {
		if _, err := w.Watch(pid); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Watch(3); !errors.Is(err, ErrFull) {
		t.Fatalf("third Watch: %v, want ErrFull", err)
	}
	fp.remove(1)
	w.Check(nil)
	if info, err := w.Watch(3); err != nil || info.State != Running {
		t.Fatalf("Watch after an exit: %+v, %v", info, err)
	}
	if _, ok := w.Info(1); ok {
		t.Error("the exited pid was not evicted")
	}
}

func TestWatcherRunFake(t *testing.T) {
	fp := newFakeProc(t)
	fp.set(100, "python3", 'S', 5000, "")
	w := New(Options{ProcRoot: fp.root, Every: 10 * time.Millisecond})
	if _, err := w.Watch(100); err != nil {
		t.Fatal(err)
	}
	ex := newExits()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, ex.onExit) }()
	fp.remove(100)
	select {
	case pid := <-ex.ch:
		if pid != 100 {
			t.Errorf("exit of %d", pid)
		}
	case <-time.After(time.Second):
		t.Fatal("no exit within 1s")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run did not stop")
	}
}

// A real child process: watched, killed, its exit noticed within 1 s. The child is not
// reaped until the exit is seen, so this also covers the zombie case.
func TestWatcherRealChild(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8", "SLURM_JOB_ID=4242")
	if err := cmd.Start(); err != nil {
		t.Skip("cannot start sleep:", err)
	}
	reaped := false
	defer func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	pid := cmd.Process.Pid

	w := New(Options{}) // the real /proc, default 250 ms period
	info, err := w.Watch(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Caught inside execve, the child shows no environment yet: Check reads it again.
	for i := 0; i < envRetries && !info.EnvKnown; i++ {
		time.Sleep(10 * time.Millisecond)
		w.Check(nil)
		info, _ = w.Info(pid)
	}
	if info.State != Running || !info.EnvKnown || info.Env.Rank != 5 || info.Env.WorldSize != 8 || info.Env.JobID() != "4242" {
		t.Fatalf("Watch(child) = %+v", info)
	}
	if !info.Started.IsZero() {
		if d := time.Since(info.Started); d < -2*time.Second || d > time.Minute {
			t.Errorf("child started %v ago", d)
		}
	}

	ex := newExits()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, ex.onExit) }()

	time.Sleep(50 * time.Millisecond) // let Run see it alive once
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case got := <-ex.ch:
		if got != pid {
			t.Errorf("exit of pid %d, want %d", got, pid)
		}
		if d := time.Since(killed); d > time.Second {
			t.Errorf("exit noticed after %v", d)
		}
	case <-time.After(time.Second):
		t.Fatal("exit not noticed within 1s")
	}
	cmd.Wait()
	reaped = true
	cancel()
	<-done
	if info, _ := w.Info(pid); info.State != Exited {
		t.Errorf("after exit: %+v", info)
	}
}

// TestWatcherCPU: Check keeps the scheduler state and CPU time of each running process,
// and its CPU use over windows of at least CPUWindow, measured on the watcher's clock.
func TestWatcherCPU(t *testing.T) {
	fp := newFakeProc(t)
	now := time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC)
	w := New(Options{ProcRoot: fp.root, Now: func() time.Time { return now }})
	write := func(state byte, utime, stime uint64) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(fp.root, "100", "stat"), []byte(statLineCPU(100, "python3", state, utime, stime, 5000)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fp.set(100, "python3", 'S', 5000, "")
	write('S', 100, 0)
	if info, err := w.Watch(100); err != nil || info.Sched != 0 || info.CPUTicks != 0 || info.CPUPct != 0 {
		t.Fatalf("at Watch: %+v, %v; want nothing measured yet", info, err)
	}
	for _, step := range []struct {
		name         string
		after        time.Duration
		state        byte
		utime, stime uint64
		sched        byte
		ticks        uint64
		pct          float64
	}{
		{"half a window: nothing yet", 500 * time.Millisecond, 'R', 150, 0, 0, 0, 0},
		{"a window: one core busy", 500 * time.Millisecond, 'R', 190, 10, 'R', 200, 100},
		{"within the next window: state and time move, use stays", 500 * time.Millisecond, 'S', 200, 10, 'S', 210, 100},
		{"the window closes idle", 500 * time.Millisecond, 'D', 200, 10, 'D', 210, 10},
		{"two seconds on 3.25 cores, kernel time counted", 2 * time.Second, 'R', 600, 260, 'R', 860, 325},
		{"no CPU for a second: 0 is a measurement", time.Second, 'S', 600, 260, 'S', 860, 0},
		{"a counter that goes back starts over, the reading unused", time.Second, 't', 10, 0, 'S', 860, 0},
		{"a window after it", time.Second, 't', 43, 0, 't', 43, 33},
	} {
		now = now.Add(step.after)
		write(step.state, step.utime, step.stime)
		w.Check(nil)
		info, _ := w.Info(100)
		if info.Sched != step.sched || info.CPUTicks != step.ticks || info.CPUPct != step.pct || info.State != Running {
			t.Errorf("%s: state %q ticks %d cpu %.1f%% (%v), want %q %d %.1f%%", step.name,
				[]byte{info.Sched}, info.CPUTicks, info.CPUPct, info.State, []byte{step.sched}, step.ticks, step.pct)
		}
	}
	if info, _ := w.Info(100); info.CPUSeconds() != 0.43 {
		t.Errorf("CPU seconds %v, want 0.43", info.CPUSeconds())
	}
	// After the exit the last reading stays, and Check reads no more.
	now = now.Add(time.Second)
	write('Z', 99, 0)
	w.Check(nil)
	if info, _ := w.Info(100); info.State != Exited || info.Sched != 't' || info.CPUTicks != 43 {
		t.Errorf("after the exit: %+v", info)
	}
}

// TestWatcherRunQueue: the threads' run-queue wait is summed over /proc/<pid>/task/*/schedstat
// and measured over the CPU window, read only when a window is due (the liveness check runs
// four times a second); a thread that ended makes the sum go back: no measurement then.
func TestWatcherRunQueue(t *testing.T) {
	fp := newFakeProc(t)
	now := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	w := New(Options{ProcRoot: fp.root, Now: func() time.Time { return now }})
	fp.set(100, "python3", 'R', 5000, "")
	writeTasks := func(waits ...uint64) {
		t.Helper()
		dir := filepath.Join(fp.root, "100", "task")
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		for i, ns := range waits {
			td := filepath.Join(dir, strconv.Itoa(100+i))
			if err := os.MkdirAll(td, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(td, "schedstat"), []byte(fmt.Sprintf("1000 %d 7\n", ns)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeTasks(0, 0)
	if _, err := w.Watch(100); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name  string
		after time.Duration
		waits []uint64
		runq  float64
	}{
		{"within the window from Watch: not read", 250 * time.Millisecond, []uint64{9e9, 9e9}, 0},
		{"not yet", 250 * time.Millisecond, []uint64{9e9, 9e9}, 0},
		{"not yet", 250 * time.Millisecond, []uint64{9e9, 9e9}, 0},
		{"a window: two threads waited 0.3 s and 0.15 s", 250 * time.Millisecond, []uint64{3e8, 1.5e8}, 45},
		{"a thread ended: the sum went back", time.Second, []uint64{4e8}, -1},
		{"a window after it", time.Second, []uint64{6e8}, 20},
	} {
		now = now.Add(step.after)
		writeTasks(step.waits...)
		w.Check(nil)
		if info, _ := w.Info(100); info.RunqPct != step.runq {
			t.Errorf("%s: run queue %.1f%%, want %.1f%%", step.name, info.RunqPct, step.runq)
		}
	}
}

// TestWatcherCPURealChildren: a sleeping and a spinning child, read through the real /proc.
func TestWatcherCPURealChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	start := func(args ...string) int {
		cmd := exec.Command(args[0], args[1:]...)
		if err := cmd.Start(); err != nil {
			t.Skip("cannot start", args, err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	sleeper, spinner := start("sleep", "30"), start("sh", "-c", "while :; do :; done")
	w := New(Options{})
	for _, pid := range []int{sleeper, spinner} {
		if _, err := w.Watch(pid); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		w.Check(nil)
		s, _ := w.Info(sleeper)
		b, _ := w.Info(spinner)
		if s.Sched != 0 && b.Sched != 0 {
			// The machine may be shared: the spinner gets some CPU, the sleeper none.
			if s.Sched != 'S' || s.CPUPct > 5 || b.CPUPct < 10 {
				t.Errorf("sleeper %q %.1f%%, spinner %q %.1f%%", []byte{s.Sched}, s.CPUPct, []byte{b.Sched}, b.CPUPct)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CPU use measured within 5 s: sleeper %+v, spinner %+v", s, b)
		}
	}
}
