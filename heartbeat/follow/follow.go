package follow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Handler receives the lines and events of every followed file. All calls
// come from the goroutine running Follower.Run, one at a time.
// Checkpointer is an optional Handler extension for consumers that keep per-file state
// (a parser): when the follower saves its offsets it asks for a JSON checkpoint of each
// file, taken between two Line calls so it matches the saved offset exactly, and hands it
// back through File.Payload when the file is Resumed after a restart.
type Checkpointer interface {
	Checkpoint(f *File) []byte
}

type Handler interface {
	// Line delivers one line without its newline. line is valid only during
	// the call. readAt is when the follower read it (one clock reading per
	// read, shared by the lines of that read).
	Line(f *File, line []byte, readAt time.Time, flags LineFlags)
	// Event reports a change in the file's life; see EventKind.
	Event(f *File, ev EventKind)
}

// LineFlags qualify a delivered line.
type LineFlags uint8

const (
	// LinePartial: the file ended (deleted, rotated away or truncated) before
	// the line's newline was written.
	LinePartial LineFlags = 1 << iota
	// LineCapped: the line was longer than Options.MaxLine; only its first
	// MaxLine bytes are delivered.
	LineCapped
	// LineNUL: NUL bytes were removed from the line.
	LineNUL
	// LineGap: a hole or a run of NUL bytes came before the line's text, where a line
	// began: bytes the writer wrote there were freed (a log bound, Options.Keep, here or in
	// an earlier run) or never read (a copytruncate), so lines may be missing before it.
	LineGap
)

// EventKind is a change in a followed file's life.
type EventKind uint8

const (
	// Opened: the file is followed from File.Offset (0, or its last line
	// boundary with Options.FromEnd). Always the first event of a File
	// unless Resumed is.
	Opened EventKind = iota + 1
	// Resumed: the file is followed from the offset saved in the state file;
	// lines before it were delivered by an earlier run.
	Resumed
	// Truncated: the file shrank below the read offset; reading restarts
	// at 0 (a new stream: copytruncate, or a new process reusing the name).
	Truncated
	// Renamed: the file moved to File.Path, another path matching the
	// patterns; reading goes on at the same offset.
	Renamed
	// Idle: no data for Options.IdleAfter.
	Idle
	// Active: data after Idle.
	Active
	// Rotated (final): the path now names another file; this one was read to
	// its end and is closed. The new file comes as a new File.
	Rotated
	// Deleted (final): no file is at the path any more; this one was read to
	// its end and is closed.
	Deleted
	// Stopped (final): the follower is stopping; the offset is saved.
	Stopped
)

var eventNames = [...]string{"", "opened", "resumed", "truncated", "renamed", "idle", "active", "rotated", "deleted", "stopped"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Final reports whether no call for the File follows this event.
func (k EventKind) Final() bool { return k == Rotated || k == Deleted || k == Stopped }

// Options configure a Follower. Zero values take the defaults in brackets.
type Options struct {
	// Patterns are filepath.Glob patterns of the files to follow
	// [/var/log/nccl/*.log]. Relative patterns are made absolute at New.
	Patterns []string
	// StatePath is the JSON file that keeps offsets across restarts; empty
	// means no resume.
	StatePath string
	// StateEvery is how often the state file is written while running [2s].
	StateEvery time.Duration
	// MaxFiles bounds the files followed at once [1024].
	MaxFiles int
	// MaxLine caps a delivered line, in bytes [64 KiB].
	MaxLine int
	// Rescan is the period of glob re-evaluation (discovery, rotation,
	// deletion) [500ms].
	Rescan time.Duration
	// SafetyPoll is the period of the fstat poll of every open file
	// [1s with inotify, 10ms without].
	SafetyPoll time.Duration
	// BatchInterval is the least time between two reads of the inotify
	// queue. A write after a quiet spell is read at once; under a steady
	// stream of writes the follower wakes at most once per BatchInterval and
	// reads what accumulated, which bounds both the added latency and the
	// CPU spent on wake-ups. [3ms; negative: no batching]
	BatchInterval time.Duration
	// IdleAfter is how long without data makes a file Idle [30s]; negative
	// disables Idle/Active events.
	IdleAfter time.Duration
	// FromEnd starts files found at start-up without a usable saved offset at
	// their last line boundary instead of 0. Files that appear later are
	// always read from 0.
	FromEnd bool
	// Keep bounds each file on disk: its header (up to the line the Handler marks with
	// File.EndHeader, at most MaxHeader) and its last Keep bytes stay; what lies between,
	// already read (and saved in the state file, with StatePath), is freed every StateEvery
	// by punching a hole (fallocate PUNCH_HOLE|KEEP_SIZE): the writer keeps its offset and
	// the hole reads as zeros. 0: files are never touched.
	Keep int64
	// MaxHeader caps the header of a file whose Handler marks no end [16 MiB].
	MaxHeader int64
	// DisableWatch turns inotify off: polling only.
	DisableWatch bool
	// Logger [slog.Default()].
	Logger *slog.Logger
	// Now is the clock for readAt and idleness [time.Now].
	Now func() time.Time
}

// DefaultPattern is the glob followed when Options.Patterns is empty.
const DefaultPattern = "/var/log/nccl/*.log"

const (
	defaultMaxFiles   = 1024
	defaultMaxLine    = 64 << 10
	maxMaxLine        = 64 << 20
	defaultRescan     = 500 * time.Millisecond
	defaultSafetyPoll = time.Second
	defaultPollOnly   = 10 * time.Millisecond
	defaultStateEvery = 2 * time.Second
	defaultIdleAfter  = 30 * time.Second
	defaultMaxHeader  = 16 << 20
	// defaultBatchInterval trades latency (p99 about 3 ms, BenchmarkLatency)
	// for wake-ups: at most ~330 a second under a steady load, about 3% of
	// a core for 8 files at 2,000 lines/s each (BenchmarkThroughput).
	defaultBatchInterval = 3 * time.Millisecond
	readBufSize          = 128 << 10
	// readBudget bounds the bytes read from one file before the loop serves
	// others and its timers, when a file is far behind.
	readBudget = 4 << 20
	// maxDirs bounds the directories watched.
	maxDirs = 256
	// maxSkipped bounds the set of paths remembered as skipped (logged once).
	maxSkipped = 8192
)

// Stats are cumulative counters for /metrics.
type Stats struct {
	Files          int    // files followed now
	Lines          uint64 // lines delivered
	Bytes          uint64 // bytes read
	CappedLines    uint64 // lines longer than MaxLine
	PartialLines   uint64 // partial lines delivered at a file's end
	Truncations    uint64
	Rotations      uint64
	Deletions      uint64
	Renames        uint64
	DroppedFiles   uint64 // paths skipped because MaxFiles were followed
	ReadErrors     uint64 // failed opens, reads and stats
	WatchErrors    uint64 // inotify errors, queue overflows included
	StateErrors    uint64 // failed state file writes
	WatchAvailable bool   // inotify in use (false: polling)
	// FreedBytes are the disk blocks freed by the log bound (Options.Keep); TrimFailures
	// count the files it could not free, by reason.
	FreedBytes   uint64
	TrimFailures map[TrimFailure]uint64
}

type counters struct {
	files, lines, bytes, capped, partial                atomic.Uint64
	truncations, rotations, deletions, renames, dropped atomic.Uint64
	readErrors, watchErrors, stateErrors                atomic.Uint64
	watching                                            atomic.Bool
	freed                                               atomic.Uint64
	trimFailures                                        [numTrimFailures]atomic.Uint64
}

// Follower follows the files matching its patterns. Create with New, start
// with Run.
type Follower struct {
	opts    Options
	h       Handler
	log     *slog.Logger
	now     func() time.Time
	started atomic.Bool
	c       counters

	// Owned by the Run goroutine.
	files      map[string]*File // by current path
	byID       map[fileID]*File
	dirty      []*File
	skipped    map[string]struct{}
	saved      map[string]savedFile
	buf        []byte
	notify     *notifier
	keyBuf     []byte
	initial    bool
	rescanNow  bool
	stateGen   uint64 // bumped when an offset may have moved
	savedGen   uint64
	lines      uint64 // pending counters, flushed to c after each batch
	bytes      uint64
	lastWatchE time.Time
}

// New checks the options and returns a Follower; nothing is opened until Run.
func New(opts Options, h Handler) (*Follower, error) {
	if h == nil {
		return nil, errors.New("follow: nil handler")
	}
	if len(opts.Patterns) == 0 {
		opts.Patterns = []string{DefaultPattern}
	}
	pats := make([]string, 0, len(opts.Patterns))
	for _, p := range opts.Patterns {
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, fmt.Errorf("follow: pattern %q: %w", p, err)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("follow: pattern %q: %w", p, err)
		}
		if !slices.Contains(pats, abs) {
			pats = append(pats, abs)
		}
	}
	opts.Patterns = pats
	if opts.StatePath != "" {
		abs, err := filepath.Abs(opts.StatePath)
		if err != nil {
			return nil, fmt.Errorf("follow: state path %q: %w", opts.StatePath, err)
		}
		opts.StatePath = abs
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = defaultMaxFiles
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = defaultMaxLine
	}
	if opts.MaxLine > maxMaxLine {
		return nil, fmt.Errorf("follow: MaxLine %d above %d", opts.MaxLine, maxMaxLine)
	}
	if opts.Rescan <= 0 {
		opts.Rescan = defaultRescan
	}
	if opts.StateEvery <= 0 {
		opts.StateEvery = defaultStateEvery
	}
	if opts.IdleAfter == 0 {
		opts.IdleAfter = defaultIdleAfter
	}
	if opts.BatchInterval == 0 {
		opts.BatchInterval = defaultBatchInterval
	}
	if opts.Keep < 0 {
		return nil, fmt.Errorf("follow: Keep %d is negative", opts.Keep)
	}
	if opts.MaxHeader <= 0 {
		opts.MaxHeader = defaultMaxHeader
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Follower{
		opts: opts,
		h:    h,
		log:  opts.Logger.With("component", "follow"),
		now:  opts.Now,
	}, nil
}

// Stats returns the counters; safe from any goroutine.
func (fw *Follower) Stats() Stats {
	c := &fw.c
	return Stats{
		Files:          int(c.files.Load()),
		Lines:          c.lines.Load(),
		Bytes:          c.bytes.Load(),
		CappedLines:    c.capped.Load(),
		PartialLines:   c.partial.Load(),
		Truncations:    c.truncations.Load(),
		Rotations:      c.rotations.Load(),
		Deletions:      c.deletions.Load(),
		Renames:        c.renames.Load(),
		DroppedFiles:   c.dropped.Load(),
		ReadErrors:     c.readErrors.Load(),
		WatchErrors:    c.watchErrors.Load(),
		StateErrors:    c.stateErrors.Load(),
		WatchAvailable: c.watching.Load(),
		FreedBytes:     c.freed.Load(),
		TrimFailures:   c.trimFailureCounts(),
	}
}

// Run follows the files until ctx is done, then sends Stopped for each file,
// writes the state file and returns. It returns nil after a cancel, or the
// error that kept it from saving the state at the end. Run may be called
// once; it starts no goroutine.
func (fw *Follower) Run(ctx context.Context) (err error) {
	if !fw.started.CompareAndSwap(false, true) {
		return errors.New("follow: Run called twice")
	}
	fw.files = make(map[string]*File)
	fw.byID = make(map[fileID]*File)
	fw.skipped = make(map[string]struct{})
	fw.buf = make([]byte, readBufSize)
	fw.saved = fw.loadState()

	if !fw.opts.DisableWatch {
		n, nerr := newNotifier()
		if nerr != nil {
			fw.log.Warn("inotify unavailable, polling", "err", nerr)
			fw.c.watchErrors.Add(1)
		} else {
			fw.notify = n
			fw.c.watching.Store(true)
			defer context.AfterFunc(ctx, n.wake)()
		}
	}
	poll := fw.opts.SafetyPoll
	if poll <= 0 {
		poll = defaultSafetyPoll
		if fw.notify == nil {
			poll = defaultPollOnly
		}
	}
	defer func() { err = fw.stop() }()

	fw.addWatches()
	fw.initial = true
	fw.rescan()
	fw.initial = false

	now := time.Now()
	nextRescan, nextPoll, nextSave := now.Add(fw.opts.Rescan), now.Add(poll), now.Add(fw.opts.StateEvery)
	var lastBatch time.Time
	var idle *time.Timer // poll-only waits
	for {
		fw.work()
		if ctx.Err() != nil {
			return nil
		}
		now = time.Now()
		if !now.Before(nextRescan) {
			fw.rescanNow = true
			nextRescan = now.Add(fw.opts.Rescan)
		}
		if !now.Before(nextPoll) {
			fw.pollAll()
			nextPoll = now.Add(poll)
		}
		if !now.Before(nextSave) {
			nextSave = now.Add(fw.opts.StateEvery)
			if fw.stateGen != fw.savedGen {
				if serr := fw.saveState(); serr != nil {
					fw.log.Warn("state file not written", "path", fw.opts.StatePath, "err", serr)
				}
			}
			// After the save: what is freed is behind the offsets a restart resumes at.
			fw.trimAll()
		}
		if len(fw.dirty) > 0 || fw.rescanNow {
			continue
		}
		deadline := earliest(nextRescan, nextPoll, nextSave)

		if fw.notify == nil {
			if idle == nil {
				idle = time.NewTimer(deadline.Sub(now))
				defer idle.Stop()
			} else {
				idle.Reset(deadline.Sub(now))
			}
			select {
			case <-ctx.Done():
			case <-idle.C:
			}
			continue
		}

		// Batch: after a read that found events, leave the queue alone for
		// BatchInterval so that the writes of that time are read together.
		if wait := lastBatch.Add(fw.opts.BatchInterval).Sub(now); wait > 0 {
			fw.notify.sleep(min(wait, deadline.Sub(now)))
		}
		if ctx.Err() != nil {
			return nil
		}
		evs, rerr := fw.notify.read(deadline)
		if rerr != nil {
			fw.watchLost(rerr)
			poll = min(poll, defaultPollOnly)
			nextPoll = time.Now()
			continue
		}
		if len(evs) > 0 {
			lastBatch = time.Now()
			fw.notify.each(evs, fw.onEvent)
		}
	}
}

func earliest(ts ...time.Time) time.Time {
	e := ts[0]
	for _, t := range ts[1:] {
		if t.Before(e) {
			e = t
		}
	}
	return e
}

// watchLost switches to polling when inotify fails.
func (fw *Follower) watchLost(err error) {
	fw.c.watchErrors.Add(1)
	fw.c.watching.Store(false)
	fw.log.Warn("inotify failed, polling", "err", err)
	fw.notify.close()
	fw.notify = nil
}

// onEvent turns one inotify event into work: a read, a discovery or a rescan.
func (fw *Follower) onEvent(ev notifyEvent) {
	switch {
	case ev.mask&evOverflow != 0:
		fw.c.watchErrors.Add(1)
		if now := time.Now(); now.Sub(fw.lastWatchE) > time.Minute {
			fw.lastWatchE = now
			fw.log.Warn("inotify queue overflow, polling all files")
		}
		fw.pollAll()
		fw.rescanNow = true
		return
	case ev.dir == "":
		return
	case ev.mask&evDirGone != 0:
		fw.notify.forget(ev.wd)
		fw.rescanNow = true // re-adds the watch if the directory is back
		return
	case len(ev.name) == 0:
		return
	}
	// The path, built without allocating: a map index by string(bytes)
	// does not copy.
	key := append(fw.keyBuf[:0], ev.dir...)
	if len(ev.dir) == 0 || ev.dir[len(ev.dir)-1] != '/' {
		key = append(key, '/')
	}
	key = append(key, ev.name...)
	fw.keyBuf = key
	f := fw.files[string(key)]
	switch {
	case ev.mask&evWrite != 0:
		if f != nil {
			fw.markDirty(f)
		}
	case ev.mask&evGone != 0:
		// The rescan decides between rotation, deletion and a rename into
		// another matching path.
		if f != nil {
			fw.rescanNow = true
		}
	case ev.mask&evCreate != 0:
		switch {
		case ev.mask&evIsDir != 0:
			fw.rescanNow = true // may match a pattern's directory part
		case f != nil:
			fw.rescanNow = true // the path names a new file: rotation
		default:
			path := string(key)
			if _, known := fw.skipped[path]; !known && fw.matches(path) {
				fw.discover(path)
			}
		}
	}
}

// work performs what events and timers asked for: the rescan, then the reads.
func (fw *Follower) work() {
	if fw.rescanNow {
		fw.rescanNow = false
		fw.addWatches()
		fw.rescan()
	}
	if len(fw.dirty) > 0 {
		batch := fw.dirty
		fw.dirty = nil
		for _, f := range batch {
			f.dirty = false
			if f.closed {
				continue
			}
			if fw.readFile(f, readBudget) {
				fw.markDirty(f)
			}
		}
		clear(batch)
		if fw.dirty == nil {
			fw.dirty = batch[:0]
		}
	}
	fw.flushCounters()
}

func (fw *Follower) markDirty(f *File) {
	if !f.dirty && !f.closed {
		f.dirty = true
		fw.dirty = append(fw.dirty, f)
	}
}

func (fw *Follower) flushCounters() {
	if fw.lines != 0 {
		fw.c.lines.Add(fw.lines)
		fw.lines = 0
	}
	if fw.bytes != 0 {
		fw.c.bytes.Add(fw.bytes)
		fw.bytes = 0
	}
}

// stop ends every file with Stopped and writes the state file.
func (fw *Follower) stop() error {
	fw.flushCounters()
	var err error
	if serr := fw.saveState(); serr != nil {
		err = fmt.Errorf("follow: saving state: %w", serr)
	}
	for _, f := range fw.sortedFiles() {
		fw.h.Event(f, Stopped)
		fw.close(f)
	}
	fw.c.files.Store(0)
	if fw.notify != nil {
		if cerr := fw.notify.close(); cerr != nil {
			fw.log.Debug("closing inotify", "err", cerr)
		}
		fw.notify = nil
	}
	fw.c.watching.Store(false)
	return err
}

func (fw *Follower) sortedFiles() []*File {
	out := make([]*File, 0, len(fw.files))
	for _, f := range fw.files {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *File) int { return strings.Compare(a.path, b.path) })
	return out
}
