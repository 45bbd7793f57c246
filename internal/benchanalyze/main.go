// Command benchanalyze measures `watchdog analyze` on a simulated job folder against
// `xargs -P$(nproc) grep -c opCount` over the same files (make bench-analyze): best wall time
// of each over interleaved runs, and the analysis's peak RSS.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/ncclwatch/watchdog/internal/jobsim"
)

func main() {
	dir := flag.String("dir", "bin/bench-analyze", "folder of the simulated job (reused when it holds one of the same shape)")
	nodes := flag.Int("nodes", 38, "nodes of 8 ranks (38: 304 ranks)")
	mb := flag.Int("mb", 300, "approximate size of the logs, MB")
	runs := flag.Int("runs", 3, "runs of each contender; the best counts")
	bin := flag.String("watchdog", "bin/watchdog", "the watchdog binary")
	flag.Parse()
	if err := run(*dir, *nodes, *mb, *runs, *bin); err != nil {
		slog.Error("bench-analyze", "err", err)
		os.Exit(1)
	}
}

func run(dir string, nodes, mb, runs int, bin string) error {
	files, size, err := ensureJob(dir, nodes, mb)
	if err != nil {
		return err
	}
	fmt.Printf("simulated job: %d ranks, %d files, %.0f MB in %s; %d CPUs\n", nodes*8, files, float64(size)/1e6, dir, runtime.NumCPU())
	grep := fmt.Sprintf("find %s -name '*.log' -print0 | xargs -0 -P%d -n 8 grep -c opCount > /dev/null", dir, runtime.NumCPU())
	var bestGrep, bestAnalyze time.Duration
	var peakKB int64
	for i := 0; i < runs; i++ {
		dg, _, err := timed(exec.Command("sh", "-c", grep))
		if err != nil {
			return fmt.Errorf("grep: %w", err)
		}
		if bestGrep == 0 || dg < bestGrep {
			bestGrep = dg
		}
		cmd := exec.Command(bin, "analyze", dir, "--json")
		d, kb, err := timed(cmd)
		// Exit status 1 (findings) and 0 are both a finished analysis.
		if ee, ok := err.(*exec.ExitError); err != nil && !(ok && ee.ExitCode() == 1) {
			return fmt.Errorf("analyze: %w", err)
		}
		if bestAnalyze == 0 || d < bestAnalyze {
			bestAnalyze = d
		}
		peakKB = max(peakKB, kb)
		fmt.Printf("run %d: grep %v, analyze %v (peak RSS %d MiB)\n", i+1, dg.Round(time.Millisecond), d.Round(time.Millisecond), kb>>10)
	}
	fmt.Printf("best of %d: xargs -P%d grep -c opCount %v; watchdog analyze %v; ratio %.2fx (target <= 2x); peak RSS %d MiB (target < 1024)\n",
		runs, runtime.NumCPU(), bestGrep.Round(time.Millisecond), bestAnalyze.Round(time.Millisecond),
		float64(bestAnalyze)/float64(bestGrep), peakKB>>10)
	return nil
}

// timed runs a command and returns its wall time and peak RSS (KiB).
func timed(cmd *exec.Cmd) (time.Duration, int64, error) {
	cmd.Stderr = os.Stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	var kb int64
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			kb = ru.Maxrss
		}
	}
	return d, kb, err
}

// ensureJob writes the simulated job unless dir already holds one of this shape.
func ensureJob(dir string, nodes, mb int) (int, int64, error) {
	stamp := filepath.Join(dir, ".shape")
	want := strconv.Itoa(nodes) + "x8/" + strconv.Itoa(mb)
	if b, err := os.ReadFile(stamp); err == nil && string(b) == want {
		return count(dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return 0, 0, fmt.Errorf("clean %s: %w", dir, err)
	}
	// About 5 KB per rank and step with these settings: size the run to reach mb.
	steps := max(1, mb*1_000_000/(nodes*8*5_000))
	s, err := jobsim.New(jobsim.Config{Nodes: nodes, RanksPerNode: 8, Steps: steps, Timestamps: true, LogsOnly: true,
		Layers: 4, Seed: 1, Location: time.UTC}, dir)
	if err != nil {
		return 0, 0, fmt.Errorf("simulate: %w", err)
	}
	if err := s.Generate(); err != nil {
		return 0, 0, fmt.Errorf("simulate: %w", err)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		return 0, 0, fmt.Errorf("stamp: %w", err)
	}
	return count(dir)
}

func count(dir string) (int, int64, error) {
	n, size := 0, int64(0)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".log" {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		size += info.Size()
		return nil
	})
	return n, size, err
}
