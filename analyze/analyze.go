// Package analyze diagnoses a job post-mortem from its log files: NCCL debug logs (one per
// rank process, or many processes interleaved in one console), launcher and PyTorch output,
// and NCCL RAS reports saved as text or JSON. It reads files in parallel, tells processes
// apart by NCCL's prefix, joins communicators across ranks (by commId, or inferred where
// NCCL printed none), splits a folder holding several jobs, runs the detect rules on each
// job's final state and reports, starting with what it could and could not read.
package analyze

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Options configure an analysis.
type Options struct {
	// Location is the zone NCCL printed its timestamps in (default time.Local).
	Location *time.Location
	// RingSize is how many recent ops per communicator are compared (default 4096, 1024
	// above 64 files so that a 300-rank job stays well under 1 GiB).
	RingSize int
	Rules    detect.Config
	// Workers bounds how many files are read at once (default GOMAXPROCS).
	Workers int
	// Stdin is read for the path "-" (default os.Stdin).
	Stdin io.Reader
	// FRBesideLogs judges the process groups of PyTorch Flight Recorder dumps even when
	// every dump's rank has an NCCL log with per-op lines (by default they are then only
	// read and noted: the rules would see each collective twice).
	FRBesideLogs bool
}

// job is one training run's processes and what came with them.
type job struct {
	procs []*detect.Proc
	lost  map[*detect.Proc]int64
	files map[string]bool
	torch []torchEvent
	ras   []*snapshot.RAS
	joins map[string]Join
	// claims are what each process's own lines said of its rank (resolveRanks).
	claims map[*detect.Proc]procClaims
}

// Analyze reads the files under paths and reports. An error wrapping ErrInput means there
// was nothing to read (the command exits 2); any other error is a cancelled context.
func Analyze(ctx context.Context, paths []string, opts Options) (*Report, error) {
	files, skipped, err := Collect(paths)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		msg := fmt.Sprintf("no log files under %s", strings.Join(paths, " "))
		if len(skipped) > 0 {
			msg += fmt.Sprintf(" (%d files skipped: %s)", len(skipped), skipped[0].Reason)
		}
		return nil, fmt.Errorf("%w: %s", ErrInput, msg)
	}
	if opts.Location == nil {
		opts.Location = time.Local
	}
	if opts.RingSize == 0 {
		// The rules need the recent ops of every rank at once; the marks (every 16, 256
		// and 4096 positions) place an older divergence, so a large job keeps fewer.
		opts.RingSize = 4096
		if len(files) > 64 {
			opts.RingSize = 256
		}
	}
	results := readAll(ctx, files, &opts)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cov := coverageOf(results, skipped)
	if cov.FilesRead == 0 && cov.ReadErrors == len(files) {
		return nil, fmt.Errorf("%w: %s", ErrInput, results[0].err)
	}
	procs, lost, claims := mergeProcs(results)
	procs, frNotes := frProcs(results, procs, opts.FRBesideLogs)
	if missing := unseenRanks(procs); len(missing) > 0 {
		cov.Unseen = missing
		cov.Limits = append(cov.Limits, fmt.Sprintf("rank(s) %s belong to the process groups of the Flight Recorder dumps, but no file here shows them (no dump, no log): nothing can be called clean without them", rankText(missing)))
	}
	joins := inferComms(procs)
	jobs := splitJobs(procs, lost, results, joins)
	rep := &Report{Coverage: cov, Files: []FileStat{}, Notes: frNotes}
	for _, r := range results {
		if r.skip == "" {
			rep.Files = append(rep.Files, r.stat)
		}
	}
	for i, jb := range jobs {
		jobIdx := 0
		if len(jobs) > 1 {
			jobIdx = i + 1
		}
		jb.claims = claims
		dj, res, notes := evaluate(jb, &opts)
		for _, n := range notes {
			if jobIdx > 0 {
				n = fmt.Sprintf("job %d: %s", jobIdx, n)
			}
			rep.Coverage.Limits = append(rep.Coverage.Limits, n)
		}
		rep.add(jobIdx, jb, dj, res)
	}
	rep.finish(len(jobs))
	return rep, nil
}

// readAll reads every file on a pool of workers; results keep the files' order. The largest
// files are read first, so that the last to finish are small ones; a worker that takes a
// large file when no other file is left for the other workers splits its reading over two
// goroutines (a single console, the end of a folder), so that no core waits.
func readAll(ctx context.Context, files []string, opts *Options) []*fileResult {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(files))
	sizes := make([]int64, len(files))
	order := make([]int, len(files))
	for i, f := range files {
		order[i] = i
		sizes[i] = pipelineMin // standard input: as large as it may be
		if f != Stdin {
			if st, err := os.Stat(f); err == nil {
				sizes[i] = st.Size()
			}
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return sizes[order[a]] > sizes[order[b]] })
	spare := runtime.GOMAXPROCS(0) > 1
	results := make([]*fileResult, len(files))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= len(order) {
					return
				}
				i := order[n]
				// The files not yet taken would not keep the other workers busy.
				pipeline := spare && sizes[i] >= pipelineMin && len(order)-n <= workers
				results[i] = readFile(ctx, files[i], opts, readMode{pipeline: pipeline})
			}
		}()
	}
	wg.Wait()
	return results
}

// pipelineMin is the size from which a file's reading is worth two goroutines.
const pipelineMin = 4 << 20

// mergeProcs renders every process once. A process seen in several files (its NCCL file and
// a console that repeats a few of its lines) keeps the file with the most lines; the
// others' lines count in coverage only.
func mergeProcs(results []*fileResult) ([]*detect.Proc, map[*detect.Proc]int64, map[*detect.Proc]procClaims) {
	best := map[procKey]*proc{}
	files := map[procKey][]string{}
	var order []procKey
	version := ""
	for _, r := range results {
		if version == "" {
			version = r.version
		}
		for _, k := range r.order {
			p := r.procs[k]
			files[k] = append(files[k], r.stat.Path)
			if b, ok := best[k]; !ok {
				best[k] = p
				order = append(order, k)
			} else if p.lines > b.lines {
				best[k] = p
			}
		}
	}
	var out []*detect.Proc
	lost := map[*detect.Proc]int64{}
	claims := map[*detect.Proc]procClaims{}
	for _, k := range order {
		p := best[k]
		sp := p.snap
		if sp.NCCL == "" {
			sp.NCCL = versionOf(results, files[k], version)
		}
		if k.anon != "" {
			sp.Host = "?"
		}
		dp := &detect.Proc{Process: sp, Node: sp.Host}
		dp.File = strings.Join(files[k], ",")
		out = append(out, dp)
		if p.lostColl > 0 {
			lost[dp] = p.lostColl
		}
		claims[dp] = procClaims{RankClaims: p.claims, file: p.files[0]}
	}
	return out, lost, claims
}

// versionOf is the bare version line of the process's files, else the job's.
func versionOf(results []*fileResult, files []string, fallback string) string {
	for _, r := range results {
		for _, f := range files {
			if r.stat.Path == f && r.version != "" {
				return logparse.VersionNumber(r.version)
			}
		}
	}
	return strings.SplitN(fallback, "+", 2)[0]
}

// splitJobs groups processes into training runs: processes that share a communicator are
// one run; a process that shares none joins the run of its file, else the only run.
// Evidence of one run is never mixed into another.
func splitJobs(procs []*detect.Proc, lost map[*detect.Proc]int64, results []*fileResult, joins map[string]Join) []*job {
	parent := make([]int, len(procs))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, b int) { parent[find(a)] = find(b) }
	byComm := map[string]int{}
	byFile := map[string]int{}
	for i, p := range procs {
		for _, c := range p.Comms {
			if c.ID == "" || strings.HasPrefix(c.ID, unjoinedPrefix) {
				continue
			}
			if j, ok := byComm[c.ID]; ok {
				union(i, j)
			} else {
				byComm[c.ID] = i
			}
		}
	}
	// Processes without a joined communicator follow their file.
	joined := func(p *detect.Proc) bool {
		for _, c := range p.Comms {
			if c.ID != "" && !strings.HasPrefix(c.ID, unjoinedPrefix) {
				return true
			}
		}
		return false
	}
	for i, p := range procs {
		if !joined(p) {
			continue
		}
		for _, f := range strings.Split(p.File, ",") {
			if _, ok := byFile[f]; !ok {
				byFile[f] = i
			}
		}
	}
	for i, p := range procs {
		if joined(p) {
			continue
		}
		for _, f := range strings.Split(p.File, ",") {
			if j, ok := byFile[f]; ok {
				union(i, j)
				break
			}
		}
	}
	roots := map[int]*job{}
	var jobs []*job
	var loose []*detect.Proc
	for i, p := range procs {
		if !joined(p) && find(i) == i && !sharesFile(p, byFile) {
			loose = append(loose, p)
			continue
		}
		r := find(i)
		jb := roots[r]
		if jb == nil {
			jb = &job{lost: map[*detect.Proc]int64{}, files: map[string]bool{}, joins: map[string]Join{}}
			roots[r] = jb
			jobs = append(jobs, jb)
		}
		jb.procs = append(jb.procs, p)
	}
	if len(jobs) == 0 {
		jobs = append(jobs, &job{lost: map[*detect.Proc]int64{}, files: map[string]bool{}, joins: map[string]Join{}})
	}
	if len(loose) > 0 {
		// Processes that share nothing with any run: with one run they belong to it;
		// with several, to a run of their own.
		if len(jobs) == 1 {
			jobs[0].procs = append(jobs[0].procs, loose...)
		} else {
			jobs = append(jobs, &job{procs: loose, lost: map[*detect.Proc]int64{}, files: map[string]bool{}, joins: map[string]Join{}})
		}
	}
	for _, jb := range jobs {
		for _, p := range jb.procs {
			for _, f := range strings.Split(p.File, ",") {
				jb.files[f] = true
			}
			if n := lost[p]; n > 0 {
				jb.lost[p] = n
			}
			for _, c := range p.Comms {
				if j, ok := joins[c.ID]; ok {
					jb.joins[c.ID] = j
				}
			}
		}
	}
	// Torch lines and RAS reports go to the run of their file, else to the run with the
	// most processes in the same folder.
	for _, r := range results {
		if len(r.torch) == 0 && len(r.ras) == 0 {
			continue
		}
		jb := jobOfFile(jobs, r)
		jb.torch = append(jb.torch, r.torch...)
		jb.ras = append(jb.ras, r.ras...)
		jb.files[r.stat.Path] = true
	}
	sort.SliceStable(jobs, func(a, b int) bool { return len(jobs[a].procs) > len(jobs[b].procs) })
	return jobs
}

func sharesFile(p *detect.Proc, byFile map[string]int) bool {
	for _, f := range strings.Split(p.File, ",") {
		if _, ok := byFile[f]; ok {
			return true
		}
	}
	return false
}

// jobOfFile is the run a file of launcher, PyTorch or RAS lines belongs to: the run of its
// own processes; else the run whose processes its lines name by pid (torchrun's records,
// nccl-tests' failures: a console beside the logs of two runs is one run's); else the run
// with the communicators its RAS report names; else the run with most files in its folder.
func jobOfFile(jobs []*job, r *fileResult) *job {
	path, reports := r.stat.Path, r.ras
	for _, jb := range jobs {
		if jb.files[path] {
			return jb
		}
	}
	if jb := jobNamedBy(jobs, r.torch); jb != nil {
		return jb
	}
	// A RAS report names communicator hashes: the run that has them.
	for _, rep := range reports {
		for _, jb := range jobs {
			for _, p := range jb.procs {
				for _, c := range p.Comms {
					for _, rc := range rep.Comms {
						if strings.EqualFold(rc.Hash, c.ID) {
							return jb
						}
					}
				}
			}
		}
	}
	dir := filepath.Dir(path)
	best, most := jobs[0], -1
	for _, jb := range jobs {
		n := 0
		for f := range jb.files {
			if filepath.Dir(f) == dir {
				n++
			}
		}
		if n > most {
			best, most = jb, n
		}
	}
	return best
}

// evaluate ties the processes to their ranks, attaches PyTorch and RAS evidence to a run
// and runs the rules on it. notes say where the ranks' sources disagreed.
func evaluate(jb *job, opts *Options) (*detect.Job, detect.Result, []string) {
	// torchrun's failure records say which rank a failed pid was.
	pidRank := map[int]int{}
	for _, te := range jb.torch {
		if te.ev.Kind == snapshot.EventRankExit && te.ev.PID > 0 && te.rank >= 0 {
			pidRank[te.ev.PID] = te.rank
		}
	}
	rr := newRankResolver(jb.procs, jb.claims)
	notes := rr.resolve(jb.procs, pidRank)
	byRank := map[int]*detect.Proc{}
	byPID := map[int]*detect.Proc{}
	var newest int64
	for _, p := range jb.procs {
		if p.Rank >= 0 {
			byRank[p.Rank] = p
		}
		byPID[p.PID] = p
		newest = max(newest, int64(p.LastLine))
	}
	// rankProc is the process of a rank PyTorch names; one known by its rank alone where
	// the rank's NCCL lines were not captured, to keep its evidence on.
	rankProc := func(rank int) *detect.Proc {
		p := byRank[rank]
		if p == nil {
			p = &detect.Proc{Process: snapshot.Process{Host: "?", Rank: rank, LocalRank: -1, CudaDev: -1}, Node: "?"}
			byRank[rank] = p
			jb.procs = append(jb.procs, p)
		}
		return p
	}
	var anon *detect.Proc
	for _, te := range jb.torch {
		if te.ev.T == 0 && te.yearless.Month != 0 {
			// A glog time (month and day) is in the year of the job's own lines.
			te.ev.T = snapshot.Micros(te.yearless.UnixMicro(opts.Location, newest))
		}
		var p *detect.Proc
		byRecord := false
		if r, ok := pidRank[te.ev.PID]; ok && te.ev.Kind == snapshot.EventLauncherExit && byPID[te.ev.PID] == nil {
			te.rank, byRecord = r, true
		}
		switch {
		case te.ev.Kind == snapshot.EventLauncherExit && !byRecord:
			if p = byPID[te.ev.PID]; p != nil && p.LocalRank < 0 {
				p.LocalRank = te.ev.LocalRank
			}
		case te.ev.Kind == snapshot.EventRankExit && te.ev.PID > 0 && byPID[te.ev.PID] != nil:
			// torchrun's record names the pid of a process a log shows, and its rank.
			p = byPID[te.ev.PID]
			if p.Rank < 0 && te.rank >= 0 && byRank[te.rank] == nil {
				p.Rank = te.rank
				byRank[te.rank] = p
			}
		case te.host != "" && te.rank < 0:
			p = hostProc(jb, te.host, te.pid, te.ev)
		case te.rank < 0 && (te.task >= 0 || te.local >= 0):
			// Under a label that is one process's, the line is that process's; under a
			// task of several, or a rank on one of several nodes, no one's. In a file
			// whose labels are ranks, a label no NCCL line came under is a rank whose
			// NCCL lines were not captured.
			if p = rr.eventProc(te, jb.procs); p == nil && te.task >= 0 && rr.labelIsRank(te.file) {
				p = rankProc(te.task)
			}
		case te.rank >= 0:
			p = rankProc(te.rank)
		}
		if p == nil {
			// A launcher's line for a pid no log has, PyTorch's error without a rank (a
			// traceback pasted alone): the job's evidence all the same, on a process
			// known by nothing else.
			if anon == nil {
				anon = &detect.Proc{Process: snapshot.Process{Host: "?", Rank: -1, LocalRank: -1, CudaDev: -1}, Node: "?"}
				jb.procs = append(jb.procs, anon)
			}
			p = anon
		}
		if te.host != "" && te.pid == 0 && slices.ContainsFunc(p.Events, func(e snapshot.Event) bool { return sameEvent(e, te.ev) }) {
			continue // the process's own log already has what the line quotes
		}
		if len(p.Events) < 64 {
			p.Events = append(p.Events, te.ev)
		}
	}
	var nodes map[string]*snapshot.Node
	for i, r := range jb.ras {
		if nodes == nil {
			nodes = map[string]*snapshot.Node{}
		}
		name := fmt.Sprintf("ras-report-%d", i+1)
		nodes[name] = &snapshot.Node{Node: name, RAS: r}
	}
	now := time.Now()
	if newest > 0 {
		now = time.UnixMicro(newest)
	}
	dj := detect.NewJob("offline", now, jb.procs, nodes)
	dj.Offline = true
	return dj, detect.Evaluate(dj, opts.Rules, detect.JobTiming(dj)), notes
}

// jobNamedBy is the one run whose processes a file's events name by pid (and host, where
// they give one), nil when they name none or more than one.
func jobNamedBy(jobs []*job, events []torchEvent) *job {
	var named *job
	for _, te := range events {
		pid, host := te.ev.PID, te.host
		if pid == 0 {
			pid = te.pid
		}
		if pid <= 0 {
			continue
		}
		for _, jb := range jobs {
			for _, p := range jb.procs {
				if p.PID != pid || (host != "" && p.Host != host) {
					continue
				}
				if named != nil && named != jb {
					return nil
				}
				named = jb
			}
		}
	}
	return named
}

// hostProc is the process nccl-tests names in its failure lines: the one with that host and
// pid, else the host's only process, else, for a line without a pid, the one process of the
// host whose own log shows the event the line quotes (an IB async event, a CUDA error),
// else one known by these alone.
func hostProc(jb *job, host string, pid int, ev snapshot.Event) *detect.Proc {
	var only, shows *detect.Proc
	n, m := 0, 0
	for _, p := range jb.procs {
		if p.Host != host {
			continue
		}
		if pid > 0 && p.PID == pid {
			return p
		}
		only, n = p, n+1
		if pid == 0 && slices.ContainsFunc(p.Events, func(e snapshot.Event) bool { return sameEvent(e, ev) }) {
			shows, m = p, m+1
		}
	}
	if n == 1 && (pid == 0 || only.PID == 0) {
		return only
	}
	if m == 1 {
		return shows
	}
	p := &detect.Proc{Process: snapshot.Process{Host: host, PID: pid, Rank: -1, LocalRank: -1, CudaDev: -1}, Node: host}
	jb.procs = append(jb.procs, p)
	return p
}

// sameEvent reports whether a quoted event is one a process logged itself: the same kind,
// and the same device or the one message inside the other.
func sameEvent(own, quoted snapshot.Event) bool {
	if own.Kind != quoted.Kind {
		return false
	}
	if own.Dev != "" && own.Dev == quoted.Dev && own.Port == quoted.Port {
		return true
	}
	return own.Msg != "" && quoted.Msg != "" && (strings.Contains(own.Msg, quoted.Msg) || strings.Contains(quoted.Msg, own.Msg))
}
