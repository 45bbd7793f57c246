package heartbeat

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/proc"
	"github.com/ncclwatch/watchdog/heartbeat/profile"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The profiler plugin's regions are a source beside the logs: one file per rank process
// (heartbeat/profile reads them), polled at the sample interval on a goroutine of its own,
// so a slow or odd file never holds up log reading.

// DefaultProfilerDir is where the plugin writes when neither NCCLWATCH_PROFILER_DIR nor a
// folder of NCCL_DEBUG_FILE tells it otherwise.
const DefaultProfilerDir = "/dev/shm"

// maxRegions bounds the regions followed at once (rank processes of the node, and those
// that exited within KeepExited).
const maxRegions = 512

// maxSkipped bounds the files remembered as left out for good.
const maxSkipped = 4096

// DefaultProfilerDirs are the folders the plugin writes to by default: the folders of the
// NCCL_DEBUG_FILE logs the sidecar follows (its default when NCCL_DEBUG_FILE names a folder),
// then /dev/shm.
func DefaultProfilerDirs(logPatterns []string) []string {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		if d != "" && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, p := range logPatterns {
		if d := filepath.Dir(p); !strings.ContainsAny(d, "*?[") {
			add(d)
		}
	}
	add(DefaultProfilerDir)
	return dirs
}

// regionSet is the regions the sidecar follows, by path.
type regionSet struct {
	dirs []string
	log  *slog.Logger

	mu     sync.Mutex
	byPath map[string]*rankRegion
	// skipped are files left out for good (another layout version, unreadable, a process
	// gone for KeepExited), by path, with the size and time that identify that file: a new
	// file at the path (a new process reusing the pid) is read again.
	skipped map[string]fileStamp
	full    bool // maxRegions was reached (said once)
	// unwatch are pids of regions forgotten under the lock, to unwatch after it
	// (dropVanished); at most one per region.
	unwatch []int
}

type fileStamp struct {
	size int64
	mod  time.Time
}

func stampOf(fi fs.FileInfo) fileStamp { return fileStamp{size: fi.Size(), mod: fi.ModTime()} }

func newRegionSet(dirs []string, log *slog.Logger) *regionSet {
	return &regionSet{dirs: dirs, log: log, byPath: map[string]*rankRegion{}, skipped: map[string]fileStamp{}}
}

// rankRegion is one rank process seen through its region.
type rankRegion struct {
	path   string
	reg    *profile.Region
	readAt time.Time
	host   string // as NCCL prints it: up to the first dot
	pid    int
	start  uint64 // the process's start ticks, with pid its identity
	// exitedAt is when the sidecar learnt the process was gone: its header says so, its
	// lock is free, or (where locks cannot be asked) /proc shows the pid gone or reused. It
	// times KeepExited; exitTime is the exit itself when the header says (else exitedAt).
	exitedAt time.Time
	exitTime time.Time
	alive    bool // its lock is held: the process runs
	watched  bool // its pid is watched through Liveness
	issue    issueClock
	windows  map[commKey]*commWindow
	// last is each live communicator as last rendered; finalized the ones the process
	// finalized since, newest last (bounded by maxFinalized).
	last      map[commKey]snapshot.Comm
	finalized []snapshot.Comm

	// statsWatched: its pid is watched through Liveness for the process's /proc state and
	// CPU use only; its lock stays the judge of its liveness.
	statsWatched bool
}

// commKey names one communicator slot's tenure: a slot reused by a new communicator starts
// its windows over.
type commKey struct {
	slot int
	gen  uint32
}

func shortHost(h string) string {
	h, _, _ = strings.Cut(h, ".")
	return h
}

// pollRegions reads every region of the folders once and updates the set.
func (s *Sidecar) pollRegions() {
	rs := s.regions
	now := s.opts.Now()
	seen := map[string]bool{}
	for _, dir := range rs.dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			// No such folder is normal where the plugin is not used.
			rs.log.Debug("profiler region folder", "dir", dir, "err", err)
			continue
		}
		for _, e := range entries {
			if e.IsDir() || !profile.IsRegionFile(e.Name()) {
				continue
			}
			path := filepath.Join(dir, e.Name())
			if seen[path] {
				continue
			}
			seen[path] = true
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			if !rs.wanted(path, fi, now, s.opts.KeepExited) {
				continue
			}
			// Liveness first: a process seen dead here finalized and exited before the read
			// below, so the read holds its last word (finalized or not), never a state from
			// just before its clean end.
			alive, lockErr := profile.Alive(path)
			reg, err := profile.Read(path)
			if err != nil {
				rs.leaveOut(path, fi, err)
				continue
			}
			if rs.stale(path, fi, reg, alive, lockErr, now, s.opts.KeepExited) {
				continue
			}
			s.applyRegion(path, reg, alive, lockErr, now)
			s.m.bw.observe(path, reg, now)
		}
	}
	s.dropVanished(seen, now)
	s.m.bw.sample(now)
}

// wanted says whether a file is to be read this time: not left out for good, and not past
// the bound on regions followed.
func (rs *regionSet) wanted(path string, fi fs.FileInfo, now time.Time, keep time.Duration) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if st, ok := rs.skipped[path]; ok {
		if st == stampOf(fi) {
			return false
		}
		delete(rs.skipped, path)
	}
	rr := rs.byPath[path]
	if rr != nil && !rr.exitedAt.IsZero() && now.Sub(rr.exitedAt) > keep {
		// A process gone for KeepExited: its region stays on disk, never read again.
		delete(rs.byPath, path)
		if rr.watched || rr.statsWatched {
			rs.unwatch = append(rs.unwatch, rr.pid)
		}
		rs.skip(path, stampOf(fi))
		return false
	}
	if rr == nil && len(rs.byPath) >= maxRegions {
		if !rs.full {
			rs.full = true
			rs.log.Warn("profiler regions: too many to follow; newer ones are left out", "max", maxRegions)
		}
		return false
	}
	return true
}

func (rs *regionSet) skip(path string, st fileStamp) {
	if len(rs.skipped) >= maxSkipped {
		clear(rs.skipped) // bounded: what is forgotten is read and skipped again
	}
	rs.skipped[path] = st
}

// stale says whether a region first seen now belongs to a process that ended long ago (a
// previous job's, left in /dev/shm): it is left out for good, never reported as a crash. A
// process that ended within KeepExited (while the sidecar restarted) is still reported.
func (rs *regionSet) stale(path string, fi fs.FileInfo, reg *profile.Region, alive bool, lockErr error, now time.Time,
	keep time.Duration) bool {
	p := reg.Process
	dead := p.State == profile.ProcExited || (lockErr == nil && !alive)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rr := rs.byPath[path]; !dead || (rr != nil && rr.pid == p.PID && rr.start == p.ProcStartTicks) {
		return false
	}
	last := max(p.Started, p.Exited)
	for _, c := range reg.Comms {
		last = max(last, c.LastEvent)
	}
	if now.Sub(last.Time()) <= keep {
		return false
	}
	rs.skip(path, stampOf(fi))
	rs.log.Debug("profiler region of a process that ended long ago: left out", "path", path, "pid", p.PID,
		"last_activity", last.Time())
	return true
}

// leaveOut records a file that cannot be read: said once per file, read again only when
// the file changes. A region of another layout version is a plugin this sidecar does not
// know: its process is not watched through the plugin.
func (rs *regionSet) leaveOut(path string, fi fs.FileInfo, err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byPath[path] != nil {
		// A region read before that no longer reads (truncated by hand): forget it.
		delete(rs.byPath, path)
	}
	rs.skip(path, stampOf(fi))
	var ve *profile.VersionError
	switch {
	case errors.As(err, &ve):
		rs.log.Warn("profiler region of another layout version: skipped (the plugin and the sidecar come from different releases)",
			"path", path, "version", ve.Version, "known", profile.LayoutVersion)
	default:
		rs.log.Warn("profiler region unreadable: skipped", "path", path, "err", err)
	}
}

// applyRegion takes one read of a region into the set.
func (s *Sidecar) applyRegion(path string, reg *profile.Region, alive bool, lockErr error, now time.Time) {
	rs := s.regions
	p := reg.Process
	rs.mu.Lock()
	rr := rs.byPath[path]
	if rr != nil && (rr.pid != p.PID || rr.start != p.ProcStartTicks) {
		// The same name for another process: a restart that reused the pid.
		rr = nil
	}
	fresh := rr == nil
	if fresh {
		rr = &rankRegion{path: path, host: shortHost(p.Host), pid: p.PID, start: p.ProcStartTicks,
			windows: map[commKey]*commWindow{}}
		rs.byPath[path] = rr
	}
	rr.reg, rr.readAt, rr.alive = reg, now, lockErr == nil && alive
	switch {
	case !rr.exitedAt.IsZero():
	case p.State == profile.ProcExited:
		rr.exitedAt, rr.exitTime = now, p.Exited.Time()
	case lockErr == nil && !alive:
		// Killed: the header still says running, the lock is gone.
		rr.exitedAt = now
	}
	rr.observe(now)
	needWatch := fresh && lockErr != nil && rr.exitedAt.IsZero() && s.opts.Liveness != nil && p.PID > 0
	needStats := fresh && lockErr == nil && rr.alive && rr.exitedAt.IsZero() && s.opts.Liveness != nil && p.PID > 0
	rs.mu.Unlock()
	if fresh {
		rs.log.Info("following profiler region", "path", path, "pid", p.PID, "abi", p.ABI, "plugin", p.Plugin)
	}
	if needWatch {
		// Without a lock to ask (a filesystem without flock), /proc says whether the pid
		// still runs the process that wrote the region.
		s.watchRegionPID(rr)
	}
	if needStats {
		s.watchRegionStats(rr)
	}
	s.markChanged()
}

// watchRegionStats watches the pid of a region whose lock tells its liveness, for the
// process's /proc state and CPU use (addProcStats). A pid that names another process in
// this /proc (a later one, or the sidecar is in another pid namespace) is left alone.
func (s *Sidecar) watchRegionStats(rr *rankRegion) {
	info, err := s.opts.Liveness.Watch(rr.pid)
	if err != nil {
		return
	}
	same := info.State == proc.Running && (rr.start == 0 || info.StartTicks == rr.start)
	rs := s.regions
	rs.mu.Lock()
	rr.statsWatched = same
	rs.mu.Unlock()
	if !same && !s.pidInUse(rr.pid) {
		s.opts.Liveness.Unwatch(rr.pid)
	}
}

func (s *Sidecar) watchRegionPID(rr *rankRegion) {
	info, err := s.opts.Liveness.Watch(rr.pid)
	if err != nil {
		return
	}
	rs := s.regions
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case info.State == proc.Exited:
		rr.exitedAt, rr.exitTime = s.opts.Now(), info.ExitedAt
	case info.State == proc.Running && info.StartTicks != 0 && rr.start != 0 && info.StartTicks != rr.start:
		rr.exitedAt = s.opts.Now() // the pid now belongs to a later process
	case info.State == proc.Running:
		rr.watched = true
	}
}

// regionExited is the liveness callback's part for regions: a watched region's process is
// gone; and any region of that pid is read once more now, so that the exit is published
// with the process's last word (its communicators finalized or not), not with a read from
// before its clean end.
func (s *Sidecar) regionExited(pid int, at time.Time) {
	rs := s.regions
	if rs == nil {
		return
	}
	var paths []string
	rs.mu.Lock()
	for path, rr := range rs.byPath {
		if rr.pid != pid {
			continue
		}
		paths = append(paths, path)
		if rr.watched && rr.exitedAt.IsZero() {
			rr.exitedAt, rr.exitTime = s.opts.Now(), at
		}
	}
	rs.mu.Unlock()
	for _, path := range paths {
		if reg, err := profile.Read(path); err == nil && reg.Process.PID == pid {
			alive, lockErr := profile.Alive(path)
			s.applyRegion(path, reg, alive, lockErr, s.opts.Now())
		}
	}
}

// dropVanished forgets regions whose file is gone (someone cleaned the folder) once they
// have been gone for KeepExited, as a deleted log is.
func (s *Sidecar) dropVanished(seen map[string]bool, now time.Time) {
	rs := s.regions
	rs.mu.Lock()
	var unwatch []int
	for path, rr := range rs.byPath {
		if seen[path] {
			continue
		}
		if rr.exitedAt.IsZero() {
			rr.exitedAt = now
		}
		if now.Sub(rr.exitedAt) > s.opts.KeepExited {
			delete(rs.byPath, path)
			if rr.watched || rr.statsWatched {
				unwatch = append(unwatch, rr.pid)
			}
		}
	}
	unwatch = append(unwatch, rs.unwatch...)
	rs.unwatch = nil
	rs.mu.Unlock()
	for _, pid := range unwatch {
		if !s.pidInUse(pid) {
			s.opts.Liveness.Unwatch(pid)
		}
	}
}

// regionList is the regions followed now, oldest process first.
func (rs *regionSet) regionList() []*rankRegion {
	out := make([]*rankRegion, 0, len(rs.byPath))
	for _, rr := range rs.byPath {
		out = append(out, rr)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].pid != out[b].pid {
			return out[a].pid < out[b].pid
		}
		return out[a].path < out[b].path
	})
	return out
}

// pidInUse says whether a log or a region still needs the pid watched.
func (s *Sidecar) pidInUse(pid int) bool {
	s.mu.Lock()
	for _, r := range s.ranks {
		if r.pid == pid {
			s.mu.Unlock()
			return true
		}
	}
	s.mu.Unlock()
	return s.regions.watches(pid)
}

// issueClock widens the plugin's 32-bit issue counter (op.proc_seq) to 64 bits: every value
// a process shows at once lies within 2^31 of its newest.
type issueClock struct {
	hi   uint64
	seen bool
}

func (c *issueClock) widen(v uint32) uint64 {
	cand := c.hi&^0xffffffff | uint64(v)
	switch {
	case cand > c.hi+1<<31:
		if cand >= 1<<32 {
			cand -= 1 << 32
		}
	case cand+1<<31 < c.hi:
		cand += 1 << 32
	}
	return cand
}

// see takes a value in; at renders one. 0 stays 0 (unknown).
func (c *issueClock) see(v uint32) {
	if v == 0 {
		return
	}
	if !c.seen {
		c.hi, c.seen = uint64(v), true
		return
	}
	c.hi = max(c.hi, c.widen(v))
}

func (c *issueClock) at(v uint32) int64 {
	if v == 0 || !c.seen {
		return 0
	}
	return int64(c.widen(v))
}

// watches says whether a region still needs pid watched (nil set: none).
func (rs *regionSet) watches(pid int) bool {
	if rs == nil {
		return false
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, rr := range rs.byPath {
		if rr.pid == pid && (rr.watched || rr.statsWatched) {
			return true
		}
	}
	return false
}

// join adds the regions to the processes rendered from logs (starts: their start ticks, 0
// unknown): a region joins the log of the same process (host, pid, and start ticks where
// both know them), else it is a process of its own. Regions of processes gone for longer
// than keep are left out.
func (rs *regionSet) join(procs []snapshot.Process, starts []uint64, now time.Time, keep time.Duration, ro recentOps) []snapshot.Process {
	if rs == nil {
		return procs
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	joined := make([]bool, len(procs))
	for _, rr := range rs.regionList() {
		if rr.reg == nil || (!rr.exitedAt.IsZero() && now.Sub(rr.exitedAt) > keep) {
			continue
		}
		i := rr.logOf(procs, starts, joined)
		if i < 0 {
			procs = append(procs, rr.render(ro))
			continue
		}
		joined[i] = true
		rr.attach(&procs[i], ro)
	}
	return procs
}

func (rr *rankRegion) logOf(procs []snapshot.Process, starts []uint64, joined []bool) int {
	for i := range joined {
		p := &procs[i]
		if joined[i] || p.PID != rr.pid || (p.Host != "" && rr.host != "" && !strings.EqualFold(shortHost(p.Host), rr.host)) {
			continue
		}
		if starts[i] != 0 && rr.start != 0 && starts[i] != rr.start {
			continue // the log of an earlier process with the same pid
		}
		return i
	}
	return -1
}
