// Package analyze diagnoses a job post-mortem from its log files: NCCL debug logs (one per
// rank process) and launcher/PyTorch output. It groups files into processes and
// communicators, runs the detect rules on the final state and reports.
package analyze

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Options configure an analysis.
type Options struct {
	// Location is the zone NCCL printed its timestamps in (default time.Local).
	Location *time.Location
	// RingSize is how many recent ops per communicator are compared (default 4096).
	RingSize int
	Rules    detect.Config
}

// maxLine caps one line; longer lines are cut (NCCL itself caps most at 1 KiB).
const maxLine = 1 << 20

// nameRE matches NCCL_DEBUG_FILE=nccl.%h.%p.log names.
var nameRE = regexp.MustCompile(`(?:^|[./])nccl\.([^/]+)\.(\d+)\.log$`)

// Job is the state rebuilt from files.
type Job struct {
	opts     Options
	trackers map[procKey]*logparse.Tracker
	order    []procKey
	torch    []torchEvent // PyTorch/launcher lines that name a rank or pid, not a host
	Files    []FileStat
}

type procKey struct {
	host string
	pid  int
}

type torchEvent struct {
	rank int // global rank, -1 when unknown
	ev   snapshot.Event
}

// FileStat says what a file held.
type FileStat struct {
	Path    string `json:"path"`
	Lines   int64  `json:"lines"`
	Unknown int64  `json:"unknown"`
	Coll    int64  `json:"collectives"`
	TooLong int64  `json:"too_long,omitempty"`
	Procs   int    `json:"processes"`
	ReadErr string `json:"error,omitempty"`
}

// NewJob starts an empty job.
func NewJob(opts Options) *Job {
	if opts.RingSize == 0 {
		opts.RingSize = 4096
	}
	if opts.Location == nil {
		opts.Location = time.Local
	}
	return &Job{opts: opts, trackers: map[procKey]*logparse.Tracker{}}
}

// Collect expands paths: files as given, folders recursively for *.log and *.txt.
func Collect(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("analyze: %w", err)
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (filepath.Ext(path) == ".log") {
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("analyze: walk %s: %w", p, err)
		}
	}
	sort.Strings(out)
	return out, nil
}

// AddFile reads one file. A read error keeps what was read and is reported in Files.
func (j *Job) AddFile(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		j.Files = append(j.Files, FileStat{Path: path, ReadErr: err.Error()})
		return fmt.Errorf("analyze: %w", err)
	}
	defer f.Close()
	var named *procKey
	if m := nameRE.FindStringSubmatch(path); m != nil {
		pid, _ := strconv.Atoi(m[2])
		named = &procKey{host: m[1], pid: pid}
		j.tracker(*named) // a process whose log is empty still exists
	}
	st, err := j.read(ctx, f, named)
	st.Path = path
	if err != nil {
		st.ReadErr = err.Error()
	}
	j.Files = append(j.Files, st)
	return err
}

// read routes each line to its process's tracker. Unprefixed lines (continuations, the bare
// version line) go to the file's current process.
func (j *Job) read(ctx context.Context, r io.Reader, named *procKey) (FileStat, error) {
	var st FileStat
	br := bufio.NewReaderSize(r, 1<<20)
	var l logparse.Line
	var cur *logparse.Tracker
	if named != nil {
		cur = j.trackers[*named]
	}
	seen := map[procKey]bool{}
	skipping := false
	for {
		raw, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if !skipping {
				st.TooLong++
				j.apply(&l, raw, &cur, seen, &st)
			}
			skipping = true
			continue
		}
		if len(raw) > 0 && !skipping {
			j.apply(&l, raw, &cur, seen, &st)
		}
		skipping = false
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, err
		}
		if st.Lines&0xffff == 0 && ctx.Err() != nil {
			return st, ctx.Err()
		}
	}
	st.Procs = len(seen)
	return st, nil
}

func (j *Job) apply(l *logparse.Line, raw []byte, cur **logparse.Tracker, seen map[procKey]bool, st *FileStat) {
	st.Lines++
	logparse.Parse(raw, l)
	switch {
	case l.Host != nil:
		t := *cur
		if t == nil || t.PID != l.PID || t.Host != string(l.Host) {
			k := procKey{host: string(l.Host), pid: l.PID}
			t = j.tracker(k)
			seen[k] = true
			*cur = t
		}
		if l.Kind == logparse.KindColl {
			st.Coll++
		}
		t.Apply(l, raw, time.Time{})
	case l.Kind.FromTorch():
		j.torchLine(l)
	case *cur != nil:
		(*cur).Apply(l, raw, time.Time{})
		if l.Kind == logparse.KindUnknown {
			st.Unknown++
		}
	default:
		if l.Kind == logparse.KindUnknown {
			st.Unknown++
		}
	}
}

func (j *Job) tracker(k procKey) *logparse.Tracker {
	t := j.trackers[k]
	if t == nil {
		t = logparse.NewTracker(logparse.TrackerOptions{RingSize: j.opts.RingSize, Location: j.opts.Location})
		t.Host, t.PID = k.host, k.pid
		j.trackers[k] = t
		j.order = append(j.order, k)
	}
	return t
}

// torchLine keeps PyTorch and launcher events for the rank or pid they name.
func (j *Job) torchLine(l *logparse.Line) {
	ev, ok := logparse.EventOf(l, 0)
	if !ok {
		return
	}
	rank := l.Torch.Rank
	if l.LauncherRank >= 0 {
		rank = l.LauncherRank
	}
	if len(j.torch) < 10000 {
		j.torch = append(j.torch, torchEvent{rank: rank, ev: ev})
	}
}

// Detect builds the detect view of the final state and evaluates it.
func (j *Job) Detect() (*detect.Job, detect.Result) {
	var procs []*detect.Proc
	byRank := map[int]*detect.Proc{}
	byPID := map[int]*detect.Proc{}
	var newest int64
	for _, k := range j.order {
		t := j.trackers[k]
		p := &detect.Proc{Process: t.Snapshot(logparse.SnapshotOptions{Recent: -1}), Node: k.host}
		procs = append(procs, p)
		if p.Rank >= 0 {
			byRank[p.Rank] = p
		}
		byPID[p.PID] = p
		newest = max(newest, t.LastTime)
	}
	for _, te := range j.torch {
		var p *detect.Proc
		if te.ev.Kind == snapshot.EventLauncherExit {
			if p = byPID[te.ev.PID]; p != nil && p.LocalRank < 0 {
				p.LocalRank = te.ev.LocalRank
			}
		} else if te.rank >= 0 {
			p = byRank[te.rank]
		}
		if p != nil {
			p.Events = append(p.Events, te.ev)
		}
	}
	now := time.Now()
	if newest > 0 {
		now = time.UnixMicro(newest)
	}
	dj := detect.NewJob("offline", now, procs, nil)
	dj.Offline = true
	return dj, detect.Evaluate(dj, j.opts.Rules, detect.JobTiming(dj))
}

// Analyze reads the files under paths and reports.
func Analyze(ctx context.Context, paths []string, opts Options) (*Report, error) {
	files, err := Collect(paths)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("analyze: no log files under %v", paths)
	}
	j := NewJob(opts)
	var readErrs []error
	for _, f := range files {
		if err := j.AddFile(ctx, f); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			readErrs = append(readErrs, err)
		}
	}
	dj, res := j.Detect()
	rep := NewReport(dj, res, j.Files)
	return rep, errors.Join(readErrs...)
}
