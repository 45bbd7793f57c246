package analyze

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/internal/jobsim"
)

// BenchmarkAnalyzeOneLog analyzes one console holding a node's 8 ranks (make bench's first
// shape, smaller); NCCLWATCH_BENCH_LOG names another file or folder, make bench's inputs for
// a profile: NCCLWATCH_BENCH_LOG=$PWD/bin/bench-analyze go test -run '^$' -bench
// AnalyzeOneLog -cpuprofile cpu.out ./analyze/ (Analyze runs in a loop: the page faults of
// a fresh process's first run, a sixth of its CPU, are undercounted).
func BenchmarkAnalyzeOneLog(b *testing.B) {
	path := os.Getenv("NCCLWATCH_BENCH_LOG")
	if path == "" {
		path = benchConsole(b, 1, 40)
	}
	benchAnalyze(b, path)
}

// BenchmarkAnalyzeFolder analyzes a folder of per-rank logs (make bench's second shape,
// smaller).
func BenchmarkAnalyzeFolder(b *testing.B) {
	benchAnalyze(b, benchJob(b, 4, 40))
}

func benchAnalyze(b *testing.B, path string) {
	var size int64
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				size += info.Size()
			}
		}
		return nil
	})
	b.SetBytes(size)
	// As the command runs it: no collection until the heap nears its limit.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(768 << 20))
	b.ResetTimer()
	for b.Loop() {
		if _, err := Analyze(context.Background(), []string{path}, Options{Location: time.UTC, Rules: detect.DefaultConfig()}); err != nil {
			b.Fatal(err)
		}
	}
}

// benchJob writes a simulated job of nodes x 8 ranks, about mb MB of logs with µs times.
func benchJob(b *testing.B, nodes, mb int) string {
	b.Helper()
	dir := b.TempDir()
	steps := max(1, mb*1_000_000/(nodes*8*5_000))
	s, err := jobsim.New(jobsim.Config{Nodes: nodes, RanksPerNode: 8, Steps: steps, Timestamps: true, LogsOnly: true,
		Layers: 4, Seed: 1, Location: time.UTC}, dir)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Generate(); err != nil {
		b.Fatal(err)
	}
	return dir
}

// benchConsole joins a simulated job's logs into one file, as a console keeps them.
func benchConsole(b *testing.B, nodes, mb int) string {
	b.Helper()
	dir := benchJob(b, nodes, mb)
	path := filepath.Join(b.TempDir(), "console.log")
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".log" {
			return err
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return path
}
