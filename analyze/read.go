package analyze

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/ras"
	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

// maxLine caps one line; longer lines are cut (NCCL itself caps most at 1 KiB).
const maxLine = 1 << 20

// maxRAS caps a RAS report read whole.
const maxRAS = 64 << 20

// nameRE matches NCCL_DEBUG_FILE=nccl.%h.%p.log names.
var nameRE = regexp.MustCompile(`(?:^|[./])nccl\.([^/]+)\.(\d+)\.log(?:\.gz|\.zst)?$`)

// procKey identifies a process: host and pid from NCCL's prefix. NCCL lines without one get
// a key of their file (anon), never shared with another file.
type procKey struct {
	host string
	pid  int
	anon string
}

type torchEvent struct {
	rank int // global rank, -1 when unknown
	// task is srun's label or a rank tag on the line (-1: none) and local torchrun's
	// "[defaultN]:" (-1: none), when no prefix gave the rank in the job: resolved against
	// the processes of file, where the file's labels are ranks (resolveRanks).
	task, local int
	file        string
	// host and pid: the process nccl-tests names in its failure lines ("" and 0: none).
	host string
	pid  int
	ev   snapshot.Event
	// yearless is the glog time of a line that printed no year (torchrun's agent,
	// PyTorch's C++ logging): the job's other times give it its year (evaluate).
	yearless logparse.Timestamp
}

// FileStat says what a file held.
type FileStat struct {
	Path    string `json:"path"`
	Lines   int64  `json:"lines"`
	Unknown int64  `json:"unknown"` // neither NCCL nor PyTorch (training output, other tools)
	NCCL    int64  `json:"nccl_lines,omitempty"`
	Torch   int64  `json:"torch_lines,omitempty"`
	Coll    int64  `json:"collectives"`
	TooLong int64  `json:"too_long,omitempty"`
	// Fragments are pieces of NCCL lines cut by interleaved writers that could not be put
	// back together; Rejoined were.
	Fragments int64 `json:"fragments,omitempty"`
	Rejoined  int64 `json:"rejoined,omitempty"`
	// Gaps are holes and runs of NULs where lines began (GapBytes in all): bytes freed by a
	// sidecar's log bound, or left by a copytruncate. Positions after one are not compared.
	Gaps     int    `json:"gaps,omitempty"`
	GapBytes int64  `json:"gap_bytes,omitempty"`
	Procs    int    `json:"processes"`
	Codec    string `json:"codec,omitempty"`
	Kind     string `json:"kind,omitempty"` // "ras-text", "ras-json" for RAS reports; "fr-pickle", "fr-json" for Flight Recorder dumps
	// FREntries counts a Flight Recorder dump's entries read.
	FREntries int64  `json:"fr_entries,omitempty"`
	ReadErr   string `json:"error,omitempty"`
}

// proc is one process as one file saw it.
type proc struct {
	key      procKey
	t        *logparse.Tracker
	lostColl int64 // collective lines of it lost to interleaving
	files    []string
	named    bool // from an nccl.<host>.<pid>.log name only
	// task is the launcher's label its NCCL lines carry (srun's "N: "), -1 for none yet:
	// a line of no kind under another label is another task's output, never this one's.
	task int
	// What is kept once the file is read: the rendered process and the tracker's counts
	// (rendering in the reading worker keeps it parallel).
	snap     snapshot.Process
	claims   logparse.RankClaims
	kinds    [logparse.NumKinds]int64
	version  string
	tsDigits int
	lines    int64
}

// render keeps what the report needs from the tracker and lets the tracker go.
func (p *proc) render() {
	t := p.t
	p.claims = t.RankClaims()
	p.snap = t.Snapshot(logparse.SnapshotOptions{Recent: -1, Final: true})
	p.kinds, p.version, p.tsDigits, p.lines = t.Kinds, t.Version, t.TimestampDigits, t.Lines
	t.Release()
	p.t = nil
}

// fileResult is everything one file holds, read independently of the others.
type fileResult struct {
	stat    FileStat
	procs   map[procKey]*proc
	order   []procKey
	torch   []torchEvent
	ras     []*snapshot.RAS
	fr      *frFile // a Flight Recorder dump
	version string  // bare "NCCL version" lines seen
	skip    string  // why the file was not read as a log
	err     error
}

// fileReader reads one file's lines into its processes.
type fileReader struct {
	opts  *Options
	res   *fileResult
	cur   *proc
	byPID map[int][]*proc
	line  logparse.Line
	tail  logparse.Line
	// pre is the line being fed as the cutter parsed it, preRaw its bytes (nil: none).
	pre    *logparse.Line
	preRaw []byte
	// pending are heads of NCCL lines cut by another writer, waiting for their rest.
	pending []fragment
	comms   map[uint64]*proc // communicator pointers by owner, to catch misattributed lines
	// lastComms and lastOwners are the last two per-op lines' communicators and their
	// owners, the newer first: most per-op lines repeat one of them.
	lastComms  [2]uint64
	lastOwners [2]*proc
	scratch    []byte
	// quoteFor is the rank whose PyTorch error said "Last error:" at the end of its line:
	// the next line is NCCL's last WARN, quoted (-2: none pending).
	quoteFor int
	// quoteFrom and quoteTask are the rest of its launcher prefix (logparse.Header).
	quoteFrom logparse.RankFrom
	quoteTask int
	gaps      *gapReader // where the lines come from: says which lines follow a gap
	// unlinked holds the line being read with a poster's markdown links undone; unlinking
	// is set while it is read, so that its parts are not unlinked into the same storage.
	unlinked  []byte
	unlinking bool
	rasBlk    *rasBlock // a text RAS report being read, nil when none
	// record is the torchrun failure record being read: whose failure its next fields
	// (exit code, traceback) are.
	record exitRecord
	// wrap puts back together the lines a terminal broke at its width.
	wrap logparse.Unwrapper
}

// exitRecord is the rank of torchrun's failure record being read ("rank : 2 (local_rank:
// 2)"), valid for recordLines lines after its last field.
type exitRecord struct {
	rank, localRank int
	line            int64 // the line of its last field; 0: none
	// root: torchrun named this failure its root cause (the first it observed).
	root bool
}

// recordLines bounds how far a failure record's rank reaches: its fields, and the
// traceback it may quote.
const recordLines = 400

type fragment struct {
	p    *proc
	head []byte
}

const maxPending = 16

// readFile reads one path completely. It never fails on content: what it cannot use is
// counted.
func readFile(ctx context.Context, path string, opts *Options, mode readMode) *fileResult {
	res := &fileResult{stat: FileStat{Path: path}, procs: map[procKey]*proc{}}
	in, err := openInput(path, opts.Stdin)
	if err != nil {
		res.err = err
		res.stat.ReadErr = err.Error()
		return res
	}
	defer in.Close()
	res.stat.Codec = in.codec
	switch in.kind {
	case contentBinary:
		res.skip = in.why
		return res
	case contentRASJSON:
		readRAS(in, res)
		return res
	case contentFRPickle, contentFRJSON:
		readDump(in, path, res)
		return res
	case contentRASText:
		res.stat.Kind = "ras-text"
	}
	fr := &fileReader{opts: opts, res: res, byPID: map[int][]*proc{}, comms: map[uint64]*proc{}, quoteFor: -2}
	if m := nameRE.FindStringSubmatch(filepath.Base(path)); m != nil {
		pid, _ := strconv.Atoi(m[2])
		p := fr.proc(procKey{host: m[1], pid: pid})
		p.named = true
		fr.cur = p
	}
	fr.gaps = in.gaps
	err = fr.read(ctx, in.r, mode)
	fr.endRAS()
	fr.flush()
	res.stat.Gaps, res.stat.GapBytes = in.gaps.count, in.gaps.skipped
	if err != nil {
		res.err = err
		res.stat.ReadErr = err.Error()
	}
	if res.stat.NCCL == 0 && res.stat.Torch == 0 && len(res.ras) == 0 && err == nil {
		res.skip = "no NCCL or PyTorch lines in it"
		if res.stat.Lines == 0 {
			res.skip = "empty"
		}
	}
	for _, p := range res.procs {
		if !p.named || p.t.Lines > 0 {
			res.stat.Procs++
		}
	}
	renderAll(res.procs, mode.pipeline)
	return res
}

// renderAll renders a file's processes: in parallel when the file has the cores to itself
// (a console of many ranks is the end of its analysis), else one after the other.
func renderAll(procs map[procKey]*proc, parallel bool) {
	if !parallel || len(procs) < 2 {
		for _, p := range procs {
			p.render()
		}
		return
	}
	next := make(chan *proc, len(procs))
	for _, p := range procs {
		next <- p
	}
	close(next)
	var wg sync.WaitGroup
	for range min(len(procs), runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				p.render()
			}
		}()
	}
	wg.Wait()
}

// readRAS reads a JSON RAS report; text reports are read line by line with the log's.
func readRAS(in *input, res *fileResult) {
	b, err := io.ReadAll(io.LimitReader(in.r, maxRAS))
	if err != nil {
		res.err = fmt.Errorf("read: %w", err)
		res.stat.ReadErr = res.err.Error()
		return
	}
	res.stat.Kind = "ras-json"
	rep, err := ras.ParseJSONKeep(b, nil)
	res.stat.Lines = int64(bytes.Count(b, []byte("\n")))
	if rep == nil {
		res.err = err
		res.stat.ReadErr = err.Error()
		return
	}
	if err != nil {
		res.stat.ReadErr = err.Error()
	}
	res.ras = append(res.ras, rep)
}

// gap tells every process of the file that lines are missing here: their communicators
// from before the gap are no longer compared with other ranks'.
func (fr *fileReader) gap() {
	for _, p := range fr.res.procs {
		p.t.Gap()
	}
}

func (fr *fileReader) proc(k procKey) *proc {
	p := fr.res.procs[k]
	if p == nil {
		// A post-mortem needs each process's first errors, which the teardown that follows
		// would push out of a ring of the newest.
		t := logparse.NewTracker(logparse.TrackerOptions{RingSize: fr.opts.RingSize, Times: 8 * fr.opts.RingSize, Location: fr.opts.Location,
			MaxEvents: 64, KeepFirst: 24})
		t.Host, t.PID = k.host, k.pid
		p = &proc{key: k, t: t, files: []string{fr.res.stat.Path}, task: -1}
		fr.res.procs[k] = p
		fr.res.order = append(fr.res.order, k)
		if k.anon == "" {
			fr.byPID[k.pid] = append(fr.byPID[k.pid], p)
		}
	}
	return p
}

// apply routes one line to its process. Processes are told apart by NCCL's prefix, never by
// the file: one console holds many.
func (fr *fileReader) apply(raw []byte) {
	st := &fr.res.stat
	st.Lines++
	if fr.quoteFor > -2 {
		rank := fr.quoteFor
		fr.quoteFor = -2
		if q := bytes.TrimSpace(raw); len(q) > 0 {
			l := &fr.line
			l.LauncherRank, l.LauncherFrom, l.Task = rank, fr.quoteFrom, fr.quoteTask
			logparse.ParseQuoted(q, l)
			st.Torch++
			fr.torchLine(l)
			return
		}
	}
	l := fr.parsed(raw, &fr.line)
	fr.wrap.Learn(l, raw)
	if !fr.unlinking && l.Kind != logparse.KindColl {
		// A log pasted into a GitHub thread and copied back: read its lines unlinked.
		// Per-op lines hold nothing a renderer links.
		if u, ok := logparse.Unlink(fr.unlinked[:0], raw); ok {
			fr.unlinked, fr.unlinking = u, true
			st.Lines--
			fr.apply(u)
			fr.unlinking = false
			return
		}
	}
	switch {
	case l.Quoted:
		st.Torch++
		if len(l.Msg) == 0 {
			fr.quoteFor, fr.quoteFrom, fr.quoteTask = l.LauncherRank, l.LauncherFrom, l.Task
			return
		}
		fr.torchLine(l)
	case l.Host != nil:
		if at, padded, ok := fr.mergedAt(l); ok {
			if padded {
				// A terminal's copy: the first line is whole, read both.
				cut := cap(raw) - cap(l.Msg) + at
				rest := append([]byte(nil), raw[cut:]...)
				st.Lines--
				fr.apply(raw[:cut])
				fr.apply(rest)
				return
			}
			fr.splitMerged(raw, l, at)
			return
		}
		fr.applyProcLine(raw, l)
	case l.Level != logparse.LevelNone:
		// An NCCL line whose host:pid:tid was cut away: the file's only process, or one
		// per launcher rank or device of this file.
		st.NCCL++
		p := fr.cur
		if p == nil || len(fr.res.procs) > 1 || l.LauncherRank >= 0 {
			tag := "dev" + strconv.Itoa(max(l.Dev, -1))
			switch {
			case l.LauncherFrom == logparse.RankFromTask:
				// A task may run several processes (torchrun under srun): one per device.
				tag = "task" + strconv.Itoa(l.LauncherRank) + "/" + tag
			case l.LauncherRank >= 0:
				tag = "rank" + strconv.Itoa(l.LauncherRank)
			}
			k := procKey{anon: fr.res.stat.Path + "#" + tag}
			if fr.cur != nil && len(fr.res.procs) == 1 && fr.cur.key.anon == "" && l.LauncherRank < 0 {
				k = fr.cur.key
			}
			p = fr.proc(k)
		}
		fr.cur = p
		p.noteTask(l)
		fr.count(l)
		p.t.Apply(l, raw, time.Time{})
	case l.Kind.FromTorch():
		st.Torch++
		fr.torchLine(l)
	case l.Kind == logparse.KindVersion:
		st.NCCL++
		if fr.res.version == "" {
			fr.res.version = string(l.Text)
		}
		if fr.cur.owns(l) {
			fr.cur.t.Apply(l, raw, time.Time{})
		}
	case l.Kind == logparse.KindBlank:
	case l.Torch.PID > 0 && l.Torch.Host != nil:
		// nccl-tests' " .. host pid 77: Test failure" names the pid of the failure it
		// reported on the line before.
		fr.testPID(string(l.Torch.Host), l.Torch.PID)
		st.Unknown++
	default:
		if fr.rejoin(raw) {
			return
		}
		if fr.cur.owns(l) {
			fr.cur.t.Apply(l, raw, time.Time{})
			if l.Kind == logparse.KindContinuation {
				st.NCCL++
				return
			}
		}
		st.Unknown++
	}
}

// testPID gives the newest failure nccl-tests reported for host without a pid its pid.
func (fr *fileReader) testPID(host string, pid int) {
	for i := len(fr.res.torch) - 1; i >= 0 && i >= len(fr.res.torch)-4; i-- {
		if te := &fr.res.torch[i]; te.host == host && te.pid == 0 {
			te.pid = pid
			return
		}
	}
}

func (fr *fileReader) count(l *logparse.Line) {
	if l.Kind == logparse.KindColl {
		fr.res.stat.Coll++
	}
}

func (fr *fileReader) applyProcLine(raw []byte, l *logparse.Line) {
	st := &fr.res.stat
	st.NCCL++
	p := fr.cur
	if p == nil || p.key.pid != l.PID || p.key.host != string(l.Host) || p.key.anon != "" {
		p = fr.proc(procKey{host: string(l.Host), pid: l.PID})
		fr.cur = p
	}
	if l.Kind == logparse.KindColl && (l.Coll.Comm != fr.lastComms[0] || p != fr.lastOwners[0]) &&
		(l.Coll.Comm != fr.lastComms[1] || p != fr.lastOwners[1]) {
		// A per-op line naming another process's communicator is two writers' text glued
		// together: its op belongs to neither with certainty.
		owner := fr.comms[l.Coll.Comm]
		if owner != nil && owner != p {
			st.Fragments++
			p.lostColl++
			return
		}
		if owner == nil {
			fr.comms[l.Coll.Comm] = p
		}
		fr.lastComms = [2]uint64{l.Coll.Comm, fr.lastComms[0]}
		fr.lastOwners = [2]*proc{p, fr.lastOwners[0]}
	}
	if l.Kind == logparse.KindInfo && l.Level == logparse.LevelInfo && logparse.CollHead(l.Msg) {
		// The start of a per-op line whose end was written later (or never): keep it.
		fr.keepPending(p, raw)
		return
	}
	p.noteTask(l)
	fr.count(l)
	p.t.Apply(l, raw, time.Time{})
}

// noteTask keeps the launcher's label of the process's first NCCL line that has one.
func (p *proc) noteTask(l *logparse.Line) {
	if p.task < 0 {
		p.task = l.Task
	}
}

// owns reports whether a line with no NCCL prefix that follows the process's lines may be
// its own: unlabelled, or under the label its NCCL lines carry. Under another label it is
// another task's (srun --label interleaves the tasks' Python tracebacks with NCCL's lines):
// given to this process it would tell the rank resolver that the process prints under
// several labels, and none of them is its rank.
func (p *proc) owns(l *logparse.Line) bool {
	return p != nil && (l.Task < 0 || p.task < 0 || l.Task == p.task)
}

// mergedAt finds a second NCCL prefix inside a line's message and returns the index in the
// message where the second line starts. padded says how the two met (logparse.Second): a
// terminal's copy padded the first, whole line with spaces and lost the newline (then the
// host need not be known: the spaces and the full prefix are evidence enough), else two
// writers' lines were glued and the first one is cut (its host glued to the second's, found
// among the known processes with that pid).
func (fr *fileReader) mergedAt(l *logparse.Line) (at int, padded, ok bool) {
	from := 0
	if l.Kind == logparse.KindColl {
		from = l.Coll.End
	}
	for s := range logparse.SecondPrefixesFrom(l.Msg, from) {
		if s.Padded {
			return s.At, true, true
		}
		best := -1
		for _, p := range fr.byPID[s.PID] {
			if h, ok := s.GluedAt(p.key.host); ok && (best < 0 || h < best) {
				best = h
			}
		}
		if best >= 0 {
			return s.At + best, false, true
		}
	}
	return 0, false, false
}

// splitMerged handles a line that holds the start of one process's line and then another
// process's whole line: the start waits for its rest, the other line is read.
func (fr *fileReader) splitMerged(raw []byte, l *logparse.Line, at int) {
	p := fr.cur
	if p == nil || p.key.pid != l.PID || p.key.host != string(l.Host) {
		p = fr.proc(procKey{host: string(l.Host), pid: l.PID})
	}
	// Msg is a subslice of raw: its offset is the difference of their capacities.
	cut := cap(raw) - cap(l.Msg) + at
	head := raw[:cut]
	rest := append([]byte(nil), raw[cut:]...)
	fr.res.stat.Lines--
	fr.keepPending(p, head)
	fr.apply(rest)
}

func (fr *fileReader) keepPending(p *proc, head []byte) {
	if len(fr.pending) == maxPending {
		fr.lose(fr.pending[0])
		fr.pending = fr.pending[1:]
	}
	fr.pending = append(fr.pending, fragment{p: p, head: append([]byte(nil), bytes.TrimRight(head, "\r\n")...)})
}

// rejoin tries an unprefixed line as the rest of a pending head, newest first: accepted when
// the two make a line of a known kind whose communicator (for a per-op line) is the head's
// process's own.
func (fr *fileReader) rejoin(raw []byte) bool {
	rest := bytes.TrimRight(raw, "\r\n")
	for i := len(fr.pending) - 1; i >= 0; i-- {
		f := fr.pending[i]
		fr.scratch = append(append(fr.scratch[:0], f.head...), rest...)
		l := &fr.tail
		logparse.Parse(fr.scratch, l)
		if l.Host == nil || l.Kind == logparse.KindUnknown || l.Kind == logparse.KindInfo {
			continue
		}
		if l.Kind == logparse.KindColl {
			if owner := fr.comms[l.Coll.Comm]; owner != nil && owner != f.p {
				continue
			}
		}
		fr.pending = append(fr.pending[:i], fr.pending[i+1:]...)
		fr.res.stat.Rejoined++
		fr.res.stat.NCCL++
		fr.count(l)
		f.p.t.Apply(l, fr.scratch, time.Time{})
		return true
	}
	return false
}

// lose counts a head that never found its rest.
func (fr *fileReader) lose(f fragment) {
	fr.res.stat.Fragments++
	var l logparse.Line
	logparse.Parse(f.head, &l)
	if logparse.CollHead(l.Msg) {
		f.p.lostColl++
	}
}

func (fr *fileReader) flush() {
	for _, f := range fr.pending {
		fr.lose(f)
	}
	fr.pending = nil
}

// torchLine keeps PyTorch and launcher events for the rank or pid they name.
func (fr *fileReader) torchLine(l *logparse.Line) {
	st := &fr.res.stat
	rec := &fr.record
	if rec.line > 0 && st.Lines-rec.line > recordLines {
		*rec = exitRecord{}
	}
	if l.Kind == logparse.KindExitRecord {
		switch {
		case string(l.Text) == logparse.RootCauseWords:
			*rec = exitRecord{rank: -1, localRank: -1, line: st.Lines, root: true}
		case l.Torch.Rank >= 0:
			*rec = exitRecord{rank: l.Torch.Rank, localRank: l.LocalRk, line: st.Lines, root: rec.root && rec.rank < 0}
		case l.Torch.Host != nil:
			// A record's host comes before its rank: what follows is a new failure's.
			*rec = exitRecord{rank: -1, localRank: -1, line: st.Lines, root: rec.root && rec.rank < 0}
		}
		return
	}
	ev, ok := logparse.EventOf(l, 0)
	if !ok {
		return
	}
	if ev.Kind == snapshot.EventRankExit {
		if strings.HasSuffix(ev.Detail, "ChildFailedError") {
			// torchrun's own exception, which only announces its failure record.
			return
		}
		if rec.line > 0 && rec.rank >= 0 && l.LauncherRank < 0 {
			// A field of torchrun's record, or the traceback it quotes.
			rec.line = st.Lines
			if ev.LocalRank == 0 {
				ev.LocalRank = rec.localRank
			}
			if rec.root && ev.Src == snapshot.ExitLauncher {
				ev.Msg = "torchrun's " + logparse.RootCauseWords
			}
			if fr.amendExit(ev, rec.rank) {
				return
			}
			fr.keepTorch(torchEvent{rank: rec.rank, task: -1, local: -1, ev: ev})
			return
		}
		if ev.Src == snapshot.ExitLauncher && fr.amendExit(ev, -1) {
			return
		}
	}
	// The launcher's "[rankN]:" is the global rank; PyTorch's own "[Rank N]" is the rank
	// in the line's process group, the global one only for the default group.
	if ev.Kind == snapshot.EventSignal && ev.Code == 0 {
		fr.signalFrame(ev.Peer)
		return
	}
	te := torchEvent{rank: -1, task: -1, local: -1, ev: ev, host: string(l.Torch.Host), pid: l.Torch.PID}
	fr.date(&te, l)
	switch {
	case l.LauncherFrom == logparse.RankFromJob:
		te.rank = l.LauncherRank
	case l.Torch.Rank >= 0:
		te.rank = l.Torch.Rank
	case l.LauncherFrom == logparse.RankFromNode:
		te.local = l.LauncherRank
	}
	if te.rank < 0 {
		te.task = l.Task
	}
	fr.keepTorch(te)
}

// date times a PyTorch or launcher event by its line's prefix, when it has one: a glog time
// waits for its year (torchEvent.yearless).
func (fr *fileReader) date(te *torchEvent, l *logparse.Line) {
	switch {
	case !l.HasTime:
	case l.Time.Yearless():
		te.yearless = l.Time
	default:
		te.ev.T = snapshot.Micros(l.Time.UnixMicro(fr.opts.Location, 0))
	}
}

func (fr *fileReader) keepTorch(te torchEvent) {
	te.file = fr.res.stat.Path
	if len(fr.res.torch) < 10000 {
		fr.res.torch = append(fr.res.torch, te)
	}
}

// amendExit folds a launcher's second word on one exit into the first: torchrun prints a
// failed process's exit code ("exitcode : -9 (pid: 1212)") and then what ended it
// ("traceback : Signal 9 (SIGKILL) received by PID 1212"). It reports whether ev was
// folded in.
func (fr *fileReader) amendExit(ev snapshot.Event, rank int) bool {
	if ev.Src != snapshot.ExitLauncher || ev.PID == 0 {
		return false
	}
	for i := len(fr.res.torch) - 1; i >= 0 && i >= len(fr.res.torch)-4; i-- {
		te := &fr.res.torch[i]
		if te.ev.Kind != snapshot.EventRankExit || te.ev.Src != snapshot.ExitLauncher || te.ev.PID != ev.PID {
			continue
		}
		if te.ev.Detail == "" {
			te.ev.Detail = ev.Detail
		}
		if te.ev.Code == 0 {
			te.ev.Code = ev.Code
		}
		if te.rank < 0 {
			te.rank = rank
		}
		return true
	}
	return false
}

// signalFrame gives the newest signal a runtime reported the NCCL function its backtrace
// shows: the signal came inside NCCL. The frames follow their signal within a few lines.
func (fr *fileReader) signalFrame(fn string) {
	for i := len(fr.res.torch) - 1; i >= 0 && i >= len(fr.res.torch)-4; i-- {
		if te := &fr.res.torch[i]; te.ev.Kind == snapshot.EventSignal {
			if te.ev.Peer == "" {
				te.ev.Peer = fn
			}
			return
		}
	}
}
