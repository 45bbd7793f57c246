package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/logparse/frdump"
	"github.com/ncclwatch/watchdog/snapshot"
)

// PyTorch writes a Flight Recorder dump per rank, <TORCH_FR_DUMP_TEMP_FILE><rank>, when a
// collective times out (TORCH_NCCL_DUMP_ON_TIMEOUT=1) or when asked. The sidecar watches the
// folder they go to (Options.FRDumpDir): each new dump becomes evidence of its rank in the
// node snapshot, its process groups added to the rank's process (or to a process of its
// own when the node follows no log of that rank), as `watchdog analyze` reads them.

// Bounds of the dump folder.
const (
	// maxDumpFiles bounds the files of the folder looked at per scan and remembered.
	maxDumpFiles = 1024
	// dumpSettle is how long a dump must stay unchanged before it is read: torch writes it
	// in one go, but on a shared filesystem it may appear in pieces.
	dumpSettle = time.Second
	// dumpRecentOps and dumpPendingOps bound what one dump's group carries in a published
	// snapshot: the newest collectives, and the oldest works that had not completed (the
	// ones a hang is about). A node of 8 ranks stays well inside snapshot.MaxNodeBytes.
	dumpRecentOps  = 32
	dumpPendingOps = 8
)

// dumpDir is the dump folder's state.
type dumpDir struct {
	dir    string
	since  time.Time     // dumps written before are from earlier runs
	keep   time.Duration // how long a dump stays in snapshots after it was written
	logger *slog.Logger

	mu    sync.Mutex
	files map[string]*dumpFile // by path
}

// dumpFile is one file of the folder as last seen.
type dumpFile struct {
	size   int64
	mod    time.Time
	read   bool // this size and mtime were read (or found unreadable)
	rank   int
	proc   *snapshot.Process // nil: not a readable dump
	reason string            // why not
}

func newDumpDir(dir string, since time.Time, keep time.Duration, logger *slog.Logger) *dumpDir {
	return &dumpDir{dir: dir, since: since, keep: keep, logger: logger, files: map[string]*dumpFile{}}
}

// run scans the folder every interval until ctx ends, calling changed when a dump was read.
func (d *dumpDir) run(ctx context.Context, every time.Duration, now func() time.Time, changed func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if d.scan(now()) {
			changed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scan looks at the folder once and reads the dumps that are new or changed and settled.
// It reports whether a dump was read.
func (d *dumpDir) scan(now time.Time) bool {
	f, err := os.Open(d.dir)
	if err != nil {
		d.logger.Debug("flight recorder dump folder", "dir", d.dir, "err", err)
		return false
	}
	names, err := f.Readdirnames(maxDumpFiles)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		d.logger.Debug("flight recorder dump folder", "dir", d.dir, "err", err)
	}
	sort.Strings(names)
	seen := make(map[string]bool, len(names))
	read := false
	for _, name := range names {
		if strings.HasPrefix(name, ".") {
			continue
		}
		_, rank, ok := frdump.RankOfName(name)
		if !ok {
			continue
		}
		path := filepath.Join(d.dir, name)
		st, err := os.Stat(path)
		if err != nil || !st.Mode().IsRegular() || st.ModTime().Before(d.since) {
			continue
		}
		seen[path] = true
		d.mu.Lock()
		cur := d.files[path]
		if cur == nil || cur.size != st.Size() || !cur.mod.Equal(st.ModTime()) {
			cur = &dumpFile{size: st.Size(), mod: st.ModTime(), rank: rank}
			d.files[path] = cur
		}
		due := !cur.read && now.Sub(st.ModTime()) >= dumpSettle
		d.mu.Unlock()
		if !due {
			continue
		}
		p, reason := readDumpFile(path, rank, st.Size())
		d.mu.Lock()
		cur.read, cur.reason = true, reason
		if p != nil {
			cur.proc = p
			read = true
		}
		d.mu.Unlock()
		switch {
		case p != nil && reason != "":
			d.logger.Warn("flight recorder dump read in part", "file", path, "rank", p.Rank, "problem", reason)
		case p != nil:
			d.logger.Info("flight recorder dump read", "file", path, "rank", p.Rank, "groups", len(p.Comms))
		default:
			d.logger.Warn("flight recorder dump not read", "file", path, "reason", reason)
		}
	}
	d.mu.Lock()
	for path := range d.files {
		if !seen[path] {
			delete(d.files, path)
		}
	}
	d.mu.Unlock()
	return read
}

// readDumpFile reads one dump; reason says why it could not be read, or what was wrong with
// it when it was read in part.
func readDumpFile(path string, rank int, size int64) (*snapshot.Process, string) {
	if size > frdump.MaxDumpBytes {
		return nil, fmt.Sprintf("larger than %d MiB", frdump.MaxDumpBytes>>20)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err.Error()
	}
	dump, err := frdump.Read(b, frdump.Limits{})
	if err != nil {
		return nil, err.Error()
	}
	if own := dump.OwnRank(); own >= 0 {
		rank = own
	}
	p := dump.Process(rank, path)
	trimDump(&p)
	return &p, strings.Join(dump.Problems, "; ")
}

// trimDump bounds what a dump's groups carry in a published snapshot.
func trimDump(p *snapshot.Process) {
	for i := range p.Comms {
		c := &p.Comms[i]
		if n := len(c.Recent); n > dumpRecentOps {
			c.Recent = append(snapshot.Ops(nil), c.Recent[n-dumpRecentOps:]...)
		}
		if c.FR == nil || len(c.FR.Ops) <= dumpPendingOps+1 {
			continue
		}
		ops := append([]snapshot.FROp(nil), c.FR.Ops[:dumpPendingOps]...)
		if last := c.FR.Ops[len(c.FR.Ops)-1]; last.State == snapshot.OpCompleted {
			ops = append(ops, last)
		}
		c.FR.Ops = ops
	}
}

// join adds the dumps to the node's processes: each dump's groups go to the process of its
// rank, else the dump is a process of its own. Of several dumps of one rank the newest
// counts; dumps older than keep are left out.
func (d *dumpDir) join(procs []snapshot.Process, node string, now time.Time) []snapshot.Process {
	if d == nil {
		return procs
	}
	d.mu.Lock()
	newest := map[int]*dumpFile{}
	for _, f := range d.files {
		if f.proc == nil || now.Sub(f.mod) > d.keep {
			continue
		}
		if cur := newest[f.proc.Rank]; cur == nil || f.mod.After(cur.mod) {
			newest[f.proc.Rank] = f
		}
	}
	var dumps []snapshot.Process
	for _, f := range newest {
		dumps = append(dumps, *f.proc)
	}
	d.mu.Unlock()
	sort.Slice(dumps, func(a, b int) bool { return dumps[a].Rank < dumps[b].Rank })
	for _, dp := range dumps {
		at := -1
		for i := range procs {
			if dp.Rank >= 0 && procs[i].Rank == dp.Rank {
				if at >= 0 {
					at = -2 // two processes of that rank: neither is surely the dump's
					break
				}
				at = i
			}
		}
		if at >= 0 {
			p := &procs[at]
			p.Comms = append(append([]snapshot.Comm(nil), p.Comms...), dp.Comms...)
			if p.WorldSize == 0 {
				p.WorldSize = dp.WorldSize
			}
			continue
		}
		dp.Host = node
		procs = append(procs, dp)
	}
	return procs
}
