package proc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Defaults for Options.
const (
	DefaultProcRoot = "/proc"
	DefaultEvery    = 250 * time.Millisecond
	DefaultMaxPIDs  = 4096
)

// maxEnviron caps how much of a process environment is read.
const maxEnviron = 1 << 20

// userHZ is the unit of /proc/<pid>/stat times; fixed at 100 on Linux for every
// architecture the project runs on.
const userHZ = 100

// CPUWindow is the shortest interval CPU use is measured over: at 100 ticks a second, a
// shorter one would move in steps of several percent.
const CPUWindow = time.Second

// ErrFull is returned by Watch when MaxPIDs processes are watched and none has exited.
var ErrFull = errors.New("proc: watch set full")

// State is what the Watcher knows of a pid.
type State int

const (
	// NotVisible: no /proc/<pid> when first asked. The process runs in another pid
	// namespace (the usual reason), or exited before anyone looked: /proc cannot tell.
	NotVisible State = iota
	// Running: seen, and the same process (same start time) is still there.
	Running
	// Exited: seen, then gone, a zombie, or the pid now belongs to a later process.
	Exited
)

// String gives the snapshot.Process.State spelling ("" for not visible: liveness unknown).
func (s State) String() string {
	switch s {
	case Running:
		return string(snapshot.ProcRunning)
	case Exited:
		return string(snapshot.ProcExited)
	}
	return string(snapshot.ProcUnknown)
}

// Info is what the Watcher knows of one process.
type Info struct {
	PID   int
	State State
	Comm  string
	// StartTicks is the start time in clock ticks after boot; with PID it names the
	// process. Started is the same as a wall-clock time (zero when boot time is unknown).
	StartTicks uint64
	Started    time.Time
	// Env holds the launcher variables; EnvKnown is false when the environment could not
	// be read (another user's process without CAP_SYS_PTRACE: normal), or was empty: a
	// process caught in execve shows none for a moment, and Check reads it again.
	Env      Env
	EnvKnown bool
	ExitedAt time.Time // when the Watcher noticed the exit
	// Sched, CPUTicks and CPUPct are Check's latest reading of a running process: its
	// scheduler state letter (R, S, D, T, ...), its CPU time (utime+stime, clock ticks),
	// and its CPU use in percent of one core over the last CPUWindow or more. They come
	// together: Sched is 0 until two reads CPUWindow apart made CPUPct a measurement. They
	// keep their last values once the process exited.
	Sched    byte
	CPUTicks uint64
	CPUPct   float64
	// RunqPct is the time the process's threads waited on a run queue for a CPU over the
	// same window, in percent of one core (summed over its threads, like CPUPct); -1 when
	// it could not be read. A process starved of CPU (other processes on its cores, a CPU
	// limit) waits there, whatever its own CPU use.
	RunqPct float64
}

// CPUSeconds is CPUTicks in seconds.
func (i Info) CPUSeconds() float64 { return float64(i.CPUTicks) / userHZ }

// Options configure a Watcher.
type Options struct {
	ProcRoot string           // DefaultProcRoot if empty
	Every    time.Duration    // poll period of Run; DefaultEvery if zero
	Now      func() time.Time // time.Now if nil
	Logger   *slog.Logger     // discarded if nil
	MaxPIDs  int              // DefaultMaxPIDs if zero
}

type entry struct {
	info     Info
	notified bool // onExit was called
	// envRetries counts the checks left to read an environment that was empty: a process
	// caught between execve and the loader's setting up of its stack shows none yet.
	envRetries int
	// cpuTicks and cpuAt are the reading CPU use is measured from (see sample).
	cpuTicks uint64
	cpuAt    time.Time
	runqNS   uint64 // the run-queue wait at cpuAt; runqOK when it was read
	runqOK   bool
}

// sample takes one stat reading of the running process in, read at at: its state and CPU
// time, and its CPU use (and its threads' run-queue wait) since the reference reading once
// that lies CPUWindow back, as the check found before it read (window).
func (e *entry) sample(st Stat, window bool, runq uint64, runqOK bool, at time.Time) {
	ticks := st.CPUTicks()
	if ticks < e.cpuTicks || e.cpuAt.IsZero() || at.Before(e.cpuAt) {
		// No usable reference (a clock or counter that went back): start one.
		e.cpuTicks, e.cpuAt, e.runqNS, e.runqOK = ticks, at, runq, runqOK
		return
	}
	if dt := at.Sub(e.cpuAt); window && dt >= CPUWindow {
		pct := float64(ticks-e.cpuTicks) / userHZ / dt.Seconds() * 100
		e.info.CPUPct = math.Round(pct*10) / 10
		e.info.RunqPct = -1
		if runqOK && e.runqOK && runq >= e.runqNS {
			e.info.RunqPct = math.Round(float64(runq-e.runqNS)/1e9/dt.Seconds()*1000) / 10
		}
		e.cpuTicks, e.cpuAt, e.runqNS, e.runqOK = ticks, at, runq, runqOK
	} else if e.info.Sched == 0 {
		return // no measurement yet: nothing to show
	}
	e.info.Sched, e.info.CPUTicks = st.State, ticks
}

// envRetries is how many checks (a period each) re-read an empty environment.
const envRetries = 20

// Watcher tracks a bounded set of pids. Its methods are safe for concurrent use.
type Watcher struct {
	root    string
	every   time.Duration
	now     func() time.Time
	log     *slog.Logger
	maxPIDs int

	// readFile reads a /proc file; a seam for the permission tests, which run as root.
	readFile func(path string) ([]byte, error)

	mu    sync.Mutex
	procs map[int]*entry
	boot  time.Time
	boots bool // boot time was looked up
}

// New returns a Watcher; it reads nothing until Watch.
func New(opts Options) *Watcher {
	w := &Watcher{
		root:     opts.ProcRoot,
		every:    opts.Every,
		now:      opts.Now,
		log:      opts.Logger,
		maxPIDs:  opts.MaxPIDs,
		procs:    map[int]*entry{},
		readFile: readLimited,
	}
	if w.root == "" {
		w.root = DefaultProcRoot
	}
	if w.every <= 0 {
		w.every = DefaultEvery
	}
	if w.now == nil {
		w.now = time.Now
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.maxPIDs <= 0 {
		w.maxPIDs = DefaultMaxPIDs
	}
	return w
}

// Watch starts watching pid and returns what is known of it. A pid already watched
// returns its current Info unchanged (call Unwatch first to look again). A pid not in
// /proc returns State NotVisible and is not watched. A process already a zombie is
// watched as Exited and reported once to Run's onExit.
func (w *Watcher) Watch(pid int) (Info, error) {
	if pid <= 0 {
		return Info{}, fmt.Errorf("proc: watch pid %d: not a pid", pid)
	}
	w.mu.Lock()
	if e, ok := w.procs[pid]; ok {
		info := e.info
		w.mu.Unlock()
		return info, nil
	}
	w.mu.Unlock()

	st, err := w.readStat(pid)
	if gone(err) || errors.Is(err, fs.ErrPermission) {
		// Permission: /proc mounted with hidepid=1 shows the directory, not the content.
		return Info{PID: pid, State: NotVisible, Env: UnknownEnv}, nil
	}
	if err != nil {
		return Info{}, fmt.Errorf("proc: watch pid %d: %w", pid, err)
	}
	info := Info{
		PID:        pid,
		State:      Running,
		Comm:       st.Comm,
		StartTicks: st.StartTicks,
		Started:    w.startTime(st.StartTicks),
		Env:        UnknownEnv,
	}
	if st.Exited() {
		info.State, info.ExitedAt = Exited, w.now()
	}
	env, err := w.readEnviron(pid)
	retries := 0
	switch {
	case err == nil && len(env) == 0 && info.State == Running:
		retries = envRetries
	case err == nil:
		info.Env, info.EnvKnown = ParseEnviron(env), true
	case errors.Is(err, fs.ErrPermission):
		w.log.Debug("proc: environment not readable", "pid", pid, "err", err)
	default:
		w.log.Debug("proc: environment read failed", "pid", pid, "err", err)
	}

	runq, runqErr := w.readRunqWait(pid)

	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.procs[pid]; ok { // a concurrent Watch won
		return e.info, nil
	}
	if len(w.procs) >= w.maxPIDs && !w.evictLocked() {
		return Info{}, fmt.Errorf("proc: watch pid %d: %w (%d pids)", pid, ErrFull, w.maxPIDs)
	}
	w.procs[pid] = &entry{info: info, envRetries: retries, cpuTicks: st.CPUTicks(), cpuAt: w.now(), runqNS: runq, runqOK: runqErr == nil}
	return info, nil
}

// evictLocked drops one exited, already reported entry, the oldest exit first.
func (w *Watcher) evictLocked() bool {
	victim, found := 0, false
	var at time.Time
	for pid, e := range w.procs {
		if e.info.State == Exited && e.notified && (!found || e.info.ExitedAt.Before(at)) {
			victim, at, found = pid, e.info.ExitedAt, true
		}
	}
	if found {
		delete(w.procs, victim)
	}
	return found
}

// Unwatch forgets pid.
func (w *Watcher) Unwatch(pid int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.procs, pid)
}

// Info returns what is known of a watched pid.
func (w *Watcher) Info(pid int) (Info, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.procs[pid]
	if !ok {
		return Info{}, false
	}
	return e.info, true
}

// Run checks the watched pids every Options.Every until ctx is done, calling onExit once
// per exited process, on Run's goroutine.
func (w *Watcher) Run(ctx context.Context, onExit func(pid int, at time.Time)) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		w.Check(onExit)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check looks at every running watched pid once and calls onExit (if not nil) for each
// exit not reported before, in pid order. Run calls it; tests call it directly.
func (w *Watcher) Check(onExit func(pid int, at time.Time)) {
	type probe struct {
		pid   int
		start uint64
		env   bool // its environment is still to be read
		// window: a CPU window is due (or none began): the threads' run-queue wait is read
		// then only (a process has hundreds of threads; the liveness check runs 4 times a
		// second).
		window bool
	}
	due := w.now().Add(-CPUWindow)
	w.mu.Lock()
	probes := make([]probe, 0, len(w.procs))
	for pid, e := range w.procs {
		if e.info.State == Running {
			probes = append(probes, probe{pid, e.info.StartTicks, e.envRetries > 0, e.cpuAt.IsZero() || !e.cpuAt.After(due)})
		}
	}
	w.mu.Unlock()

	// Read /proc without the lock: Watch and Info stay responsive.
	for _, p := range probes {
		if p.env {
			w.retryEnviron(p.pid, p.start)
		}
	}
	type reading struct {
		probe
		st     Stat
		runq   uint64
		runqOK bool
	}
	var exited []probe
	running := make([]reading, 0, len(probes))
	for _, p := range probes {
		st, err := w.readStat(p.pid)
		switch {
		case gone(err):
		case err != nil:
			// Unreadable for another reason: not evidence of an exit.
			w.log.Debug("proc: stat unreadable", "pid", p.pid, "err", err)
			continue
		case st.StartTicks == p.start && !st.Exited():
			r := reading{probe: p, st: st}
			if p.window {
				runq, err := w.readRunqWait(p.pid)
				r.runq, r.runqOK = runq, err == nil
			}
			running = append(running, r)
			continue
		}
		exited = append(exited, p)
	}

	at := w.now()
	type exit struct {
		pid int
		at  time.Time
	}
	var report []exit
	w.mu.Lock()
	for _, r := range running {
		if e, ok := w.procs[r.pid]; ok && e.info.State == Running && e.info.StartTicks == r.start {
			e.sample(r.st, r.window, r.runq, r.runqOK, at)
		}
	}
	for _, p := range exited {
		// Skip a pid unwatched, or re-watched as another process, while we read.
		if e, ok := w.procs[p.pid]; ok && e.info.State == Running && e.info.StartTicks == p.start {
			e.info.State, e.info.ExitedAt = Exited, at
		}
	}
	for pid, e := range w.procs {
		if e.info.State == Exited && !e.notified {
			e.notified = true
			report = append(report, exit{pid, e.info.ExitedAt})
		}
	}
	w.mu.Unlock()

	if onExit == nil {
		return
	}
	slices.SortFunc(report, func(a, b exit) int { return a.pid - b.pid })
	for _, x := range report {
		onExit(x.pid, x.at)
	}
}

// retryEnviron reads again the environment of a process that showed none when first seen.
func (w *Watcher) retryEnviron(pid int, start uint64) {
	env, err := w.readEnviron(pid)
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.procs[pid]
	if !ok || e.info.StartTicks != start || e.envRetries == 0 {
		return
	}
	switch {
	case err != nil: // unreadable now, or gone (the stat check reports that)
		e.envRetries = 0
	case len(env) > 0:
		e.info.Env, e.info.EnvKnown, e.envRetries = ParseEnviron(env), true, 0
	default:
		e.envRetries--
	}
}

func (w *Watcher) readStat(pid int) (Stat, error) {
	b, err := w.readFile(filepath.Join(w.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// maxTasks bounds the threads whose run-queue wait is read per process and check.
const maxTasks = 1024

// readRunqWait sums the run-queue wait of a process's threads (ns); an error when none of
// them could be read (no schedstat: a kernel without CONFIG_SCHEDSTATS).
func (w *Watcher) readRunqWait(pid int) (uint64, error) {
	dir := filepath.Join(w.root, strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("reading the threads of %d: %w", pid, err)
	}
	var sum uint64
	read := 0
	for _, t := range tasks[:min(len(tasks), maxTasks)] {
		b, err := w.readFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // a thread that ended since
		}
		if v, err := ParseSchedstat(b); err == nil {
			sum += v
			read++
		}
	}
	if read == 0 {
		return 0, fmt.Errorf("no schedstat of pid %d's threads", pid)
	}
	return sum, nil
}

func (w *Watcher) readEnviron(pid int) ([]byte, error) {
	return w.readFile(filepath.Join(w.root, strconv.Itoa(pid), "environ"))
}

// readLimited reads at most maxEnviron bytes of a file.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxEnviron))
}

// startTime converts start ticks to wall-clock time with the boot time from <root>/stat.
func (w *Watcher) startTime(ticks uint64) time.Time {
	w.mu.Lock()
	if !w.boots {
		w.boots = true
		w.boot = readBootTime(filepath.Join(w.root, "stat"))
	}
	boot := w.boot
	w.mu.Unlock()
	if boot.IsZero() {
		return time.Time{}
	}
	if ticks/userHZ > 1<<32 { // centuries: not a real start time
		return time.Time{}
	}
	return boot.Add(time.Duration(ticks/userHZ)*time.Second + time.Duration(ticks%userHZ)*(time.Second/userHZ))
}

// readBootTime reads the "btime <unix seconds>" line of /proc/stat; zero if unreadable.
func readBootTime(path string) time.Time {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("btime ")); ok {
			if s, err := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64); err == nil && s > 0 {
				return time.Unix(s, 0)
			}
		}
	}
	return time.Time{}
}

// gone reports whether a read error means the process no longer exists.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}
