package heartbeat

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/follow"
	"github.com/ncclwatch/watchdog/heartbeat/proc"
	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

// rankKey identifies a log file across renames.
type rankKey struct{ dev, ino uint64 }

// rankLog is one rank process seen through its log file.
type rankLog struct {
	key  rankKey
	host string
	pid  int

	mu       sync.Mutex // guards the fields below and the tracker
	tracker  *logparse.Tracker
	path     string
	offset   int64
	info     proc.Info
	watched  bool
	exitedAt time.Time
	goneAt   time.Time // the file was deleted or rotated away
	// sent is, per communicator pointer, the newest position already published.
	sent map[uint64]int64
}

// logHandler receives the follower's lines; all its calls come from one goroutine.
type logHandler struct {
	s     *Sidecar
	files map[*follow.File]*rankLog
	dirty atomic.Bool
}

func (h *logHandler) Line(f *follow.File, line []byte, readAt time.Time, flags follow.LineFlags) {
	r := h.files[f]
	if r == nil {
		r = h.open(f, false)
	}
	r.mu.Lock()
	if flags&follow.LineGap != 0 {
		// Lines were freed or lost before this one: positions counted from here are not
		// the other ranks'.
		r.tracker.Gap()
	}
	l := r.tracker.Observe(line, readAt)
	r.offset = f.Offset()
	r.mu.Unlock()
	if l.Kind == logparse.KindColl {
		f.EndHeader() // the log bound keeps everything before the first per-op line
	}
	h.s.m.line(l.Kind)
	if flags&follow.LineCapped != 0 {
		h.s.m.cappedLines.Inc()
	}
	switch l.Kind {
	case logparse.KindInfo, logparse.KindTuning, logparse.KindChannel, logparse.KindRing, logparse.KindBlank, logparse.KindUnknown:
	default:
		h.s.markChanged()
	}
}

func (h *logHandler) Event(f *follow.File, ev follow.EventKind) {
	switch ev {
	case follow.Opened:
		h.open(f, false)
	case follow.Resumed:
		h.open(f, true)
	case follow.Truncated:
		// A new stream: copytruncate, or a new process that reused the pid and the name.
		if r := h.files[f]; r != nil {
			r.mu.Lock()
			r.tracker = logparse.NewTracker(trackerOptions())
			r.tracker.Host, r.tracker.PID = r.host, r.pid
			r.exitedAt = time.Time{}
			r.mu.Unlock()
		}
	case follow.Renamed:
		if r := h.files[f]; r != nil {
			r.mu.Lock()
			r.path = f.Path()
			r.mu.Unlock()
		}
	case follow.Rotated, follow.Deleted:
		if r := h.files[f]; r != nil {
			r.mu.Lock()
			r.goneAt = h.s.opts.Now()
			r.mu.Unlock()
		}
		delete(h.files, f)
	case follow.Stopped:
		delete(h.files, f)
	}
	h.s.markChanged()
}

// open starts (or resumes) a rank log for a followed file.
func (h *logHandler) open(f *follow.File, resumed bool) *rankLog {
	if h.files == nil {
		h.files = map[*follow.File]*rankLog{}
	}
	s := h.s
	key := rankKey{f.Device(), f.Inode()}
	r := &rankLog{key: key, host: f.Host(), pid: f.PID(), path: f.Path(), offset: f.Offset()}
	if resumed {
		if t, err := logparse.RestoreTracker(f.Payload(), trackerOptions()); err == nil {
			r.tracker = t
		} else {
			s.opts.Logger.Warn("parser checkpoint unusable; this file's counts restart", "path", f.Path(), "err", err)
		}
	}
	if r.tracker == nil {
		r.tracker = logparse.NewTracker(trackerOptions())
		r.tracker.Host, r.tracker.PID = r.host, r.pid
	}
	if r.pid > 0 && s.opts.Liveness != nil {
		if info, err := s.opts.Liveness.Watch(r.pid); err == nil {
			r.info, r.watched = info, true
			if info.State == proc.Exited {
				r.exitedAt = info.ExitedAt
			}
		} else {
			s.opts.Logger.Debug("cannot watch rank process", "pid", r.pid, "err", err)
		}
	}
	h.files[f] = r
	s.mu.Lock()
	if old := s.ranks[key]; old != nil && old != r {
		s.opts.Logger.Debug("log file reopened", "path", f.Path())
	}
	s.ranks[key] = r
	s.mu.Unlock()
	s.opts.Logger.Info("following NCCL log", "path", f.Path(), "pid", r.pid, "resumed", resumed)
	return r
}

// Checkpoint gives the follower the parser state matching the file's saved offset, so a
// restarted sidecar resumes mid-file with its communicators and counts.
func (h *logHandler) Checkpoint(f *follow.File) []byte {
	r := h.files[f]
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := r.tracker.MarshalState(16)
	if err != nil {
		h.s.opts.Logger.Warn("parser checkpoint", "path", f.Path(), "err", err)
		return nil
	}
	return b
}

// torchLog keeps PyTorch and launcher events from stdout logs, by rank or pid.
type torchLog struct {
	mu     sync.Mutex
	events []torchEvent // ring
	next   int
}

// torchEvent is an event and the global rank its line named (-1 when none).
type torchEvent struct {
	rank int
	ev   snapshot.Event
}

const maxTorchEvents = 64

func newTorchLog() *torchLog { return &torchLog{} }

func (t *torchLog) add(e torchEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.events) < maxTorchEvents {
		t.events = append(t.events, e)
		return
	}
	t.events[t.next] = e
	t.next = (t.next + 1) % maxTorchEvents
}

// forProcess returns the events about one process: those naming its pid (launcher exits),
// else those naming its rank.
func (t *torchLog) forProcess(rank, pid int) []snapshot.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []snapshot.Event
	for _, e := range t.events {
		if (e.ev.PID != 0 && e.ev.PID == pid) || (e.ev.PID == 0 && rank >= 0 && e.rank == rank) {
			out = append(out, e.ev)
		}
	}
	return out
}

// stdoutHandler reads torchrun/PyTorch output for watchdog timeouts and failures.
type stdoutHandler struct {
	s    *Sidecar
	line logparse.Line
}

func (h *stdoutHandler) Line(f *follow.File, line []byte, readAt time.Time, flags follow.LineFlags) {
	l := &h.line
	logparse.Parse(line, l)
	if !l.Kind.FromTorch() {
		return // NCCL lines are read from NCCL's own files
	}
	ev, ok := logparse.EventOf(l, int64(snapshot.MicrosOf(readAt)))
	if !ok {
		return
	}
	rank := l.Torch.Rank
	if l.LauncherRank >= 0 {
		rank = l.LauncherRank
	}
	h.s.torch.add(torchEvent{rank: rank, ev: ev})
	h.s.markChanged()
}

func (h *stdoutHandler) Event(*follow.File, follow.EventKind) {}
