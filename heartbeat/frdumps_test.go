package heartbeat

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// copyDumps puts a case's dumps (logparse/frdump/testdata, written by its gen.py) into dir,
// written at mod.
func copyDumps(t *testing.T, name, dir string, mod time.Time) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "logparse", "frdump", "testdata", name, "nccl_trace_rank_*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("case %s: %v", name, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDumpDirScan(t *testing.T) {
	dir := t.TempDir()
	start := time.Now().Add(-time.Hour).Truncate(time.Second)
	d := newDumpDir(dir, start, 10*time.Minute, slog.New(slog.DiscardHandler))
	if d.scan(start) {
		t.Fatal("an empty folder read something")
	}
	// A dump of an earlier run, a file that is no dump, and this run's dumps.
	copyDumps(t, "healthy", dir, start.Add(-time.Minute))
	for _, f := range []string{"nccl_trace_rank_0", "nccl_trace_rank_1", "nccl_trace_rank_2"} {
		os.Remove(filepath.Join(dir, f))
	}
	os.Rename(filepath.Join(dir, "nccl_trace_rank_3"), filepath.Join(dir, "old_trace_7"))
	os.WriteFile(filepath.Join(dir, "notes_1"), []byte("not a dump\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "README"), []byte("no rank in the name\n"), 0o644)
	at := start.Add(5 * time.Minute)
	copyDumps(t, "skipped_subgroup", dir, at)
	// Still settling: not read yet.
	if d.scan(at.Add(dumpSettle / 2)) {
		t.Fatal("read a dump that may still be written")
	}
	if !d.scan(at.Add(2 * dumpSettle)) {
		t.Fatal("the dumps were not read")
	}
	if d.scan(at.Add(3 * dumpSettle)) {
		t.Error("unchanged dumps read again")
	}
	logged := []snapshot.Process{{Host: "node0", PID: 41, Rank: 1, Comms: []snapshot.Comm{{ID: "0xfeed", Count: 9}}}}
	procs := d.join(logged, "node0", at.Add(time.Minute))
	if len(procs) != 4 {
		t.Fatalf("processes %+v", procs)
	}
	if procs[0].PID != 41 || len(procs[0].Comms) != 3 || procs[0].Comms[0].ID != "0xfeed" ||
		!strings.HasPrefix(procs[0].Comms[1].ID, snapshot.FRCommPrefix) {
		t.Errorf("rank 1's dump did not join its process: %+v", procs[0])
	}
	if len(logged[0].Comms) != 1 {
		t.Error("join changed the caller's communicators")
	}
	for _, p := range procs[1:] {
		if p.Host != "node0" || p.Source != snapshot.SourceFR || p.Rank == 1 {
			t.Errorf("dump process %+v", p)
		}
	}
	// A dump stays in snapshots for keep after it was written.
	if n := len(d.join(nil, "node0", at.Add(11*time.Minute))); n != 0 {
		t.Errorf("%d old dumps still joined", n)
	}
	// A newer dump of a rank replaces the older; a removed file is forgotten.
	os.Remove(filepath.Join(dir, "nccl_trace_rank_2"))
	later := at.Add(time.Minute)
	copyDumps(t, "left_group", dir, later)
	d.scan(later.Add(2 * dumpSettle))
	procs = d.join(nil, "node0", later.Add(time.Minute))
	if len(procs) != 4 || len(procs[0].Comms) != 1 {
		t.Errorf("after the second dump: %+v", procs)
	}
}

func TestDumpDirBoundsSnapshot(t *testing.T) {
	dir := t.TempDir()
	at := time.Now().Add(-time.Hour)
	copyDumps(t, "order_inversion", dir, at)
	d := newDumpDir(dir, at.Add(-time.Minute), time.Hour, slog.New(slog.DiscardHandler))
	d.scan(at.Add(time.Minute))
	procs := d.join(nil, "node0", at.Add(time.Minute))
	n := &snapshot.Node{Job: "j", Node: "node0", Processes: procs}
	for i := 0; i < 2; i++ {
		n.Processes = append(n.Processes, n.Processes...)
	}
	b, err := snapshot.Encode(n)
	if err != nil {
		t.Fatal(err)
	}
	back, err := snapshot.Decode(b)
	if err != nil || len(back.Processes) != 16 || back.Shed != "" {
		t.Fatalf("decode: %v, %d processes, shed %q", err, len(back.Processes), back.Shed)
	}
	c := back.Processes[0].Comms[1]
	if c.FR == nil || c.FR.Name == "" || len(c.FR.Ops) == 0 || c.Done == nil || c.Done.InFlight == nil {
		t.Errorf("a dump's group lost its evidence on the wire: %+v", c)
	}
	t.Logf("16 dump processes of 3 groups: %d bytes", len(b))
}

func TestTrimDump(t *testing.T) {
	c := snapshot.Comm{FR: &snapshot.FRGroup{}}
	for i := 1; i <= 100; i++ {
		c.Recent = append(c.Recent, snapshot.Op{Seq: int64(i), Op: "AllReduce"})
		c.FR.Ops = append(c.FR.Ops, snapshot.FROp{Op: snapshot.Op{Seq: int64(i)}, State: snapshot.OpScheduled})
	}
	c.FR.Ops = append(c.FR.Ops, snapshot.FROp{Op: snapshot.Op{Seq: 0}, State: snapshot.OpCompleted})
	p := snapshot.Process{Comms: []snapshot.Comm{c}}
	trimDump(&p)
	got := p.Comms[0]
	if len(got.Recent) != dumpRecentOps || got.Recent[0].Seq != 69 || len(got.FR.Ops) != dumpPendingOps+1 ||
		got.FR.Ops[0].Seq != 1 || got.FR.Ops[dumpPendingOps].State != snapshot.OpCompleted {
		t.Errorf("trimmed: recent %d from %d, ops %s", len(got.Recent), got.Recent[0].Seq, fmt.Sprint(len(got.FR.Ops)))
	}
}

// The sidecar picks dumps up as they appear and publishes them in its node snapshot.
func TestSidecarReadsDumpDir(t *testing.T) {
	logs, dumps := t.TempDir(), t.TempDir()
	s, err := New(Options{Job: "j", Node: "node0", LogPatterns: []string{filepath.Join(logs, "*.log")}, FRDumpDir: dumps,
		PollLogs: true, SampleEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	copyDumps(t, "p2p_pipeline", dumps, time.Now().Add(-5*time.Second))
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := s.Snapshot()
		if len(n.Processes) == 4 {
			for _, p := range n.Processes {
				if p.Source != snapshot.SourceFR || p.Host != "node0" || len(p.Comms) != 1 || p.Comms[0].FR == nil {
					t.Errorf("process %+v", p)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dumps not in the snapshot: %+v", n.Processes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
