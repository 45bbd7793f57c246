// Command benchanalyze measures `watchdog analyze` against grep on the same bytes (make bench,
// make bench-analyze), the two shapes of issue 31: one large log against `grep -c opCount`,
// and a simulated job's folder of per-rank logs against `xargs -P2 grep -c opCount` (two
// processes, the dev box's cores). Each contender runs interleaved; the best wall time of each
// counts, and the ratio printed is grep's time over analyze's (1x: as fast as grep; the
// target is >= 0.5x), beside the analysis's peak RSS (target < 256 MiB).
package main

import (
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/ncclwatch/watchdog/internal/jobsim"
)

func main() {
	dir := flag.String("dir", "bin/bench-analyze", "folder of the simulated job (reused when it holds one of the same shape)")
	nodes := flag.Int("nodes", 38, "nodes of 8 ranks (38: 304 ranks)")
	mb := flag.Int("mb", 300, "approximate size of the folder's logs, MB")
	oneMB := flag.Int("one-mb", 210, "approximate size of the single log, MB (0: skip it)")
	one := flag.String("one", "bin/bench-analyze-one/job.log", "the single log (reused when it is of the same shape)")
	procs := flag.Int("grep-procs", 2, "grep processes over the folder (xargs -P)")
	runs := flag.Int("runs", 3, "runs of each contender; the best counts")
	bin := flag.String("watchdog", "bin/watchdog", "the watchdog binary")
	flag.Parse()
	if err := run(*dir, *one, *nodes, *mb, *oneMB, *procs, *runs, *bin); err != nil {
		slog.Error("bench-analyze", "err", err)
		os.Exit(1)
	}
}

// sink takes grep's counts through a pipe: GNU grep whose output is /dev/null stops at the
// first match (as -q does), which would time nothing of the file.
const sink = " | cat > /dev/null"

// result is one shape's best times.
type result struct {
	name             string
	grep, analyze    time.Duration
	peakKB           int64
	grepCmd, subject string
}

func run(dir, one string, nodes, mb, oneMB, procs, runs int, bin string) error {
	var results []result
	if oneMB > 0 {
		size, err := ensureOne(one, oneMB)
		if err != nil {
			return err
		}
		fmt.Printf("one log: %.0f MB in %s\n", float64(size)/1e6, one)
		r, err := measure("one log", "grep -c opCount "+one+sink, one, runs, bin)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	files, size, err := ensureJob(dir, nodes, mb)
	if err != nil {
		return err
	}
	fmt.Printf("simulated job: %d ranks, %d files, %.0f MB in %s; %d CPUs\n", nodes*8, files, float64(size)/1e6, dir, runtime.NumCPU())
	grep := fmt.Sprintf("find %s -name '*.log' -print0 | xargs -0 -P%d -n 8 grep -c opCount", dir, procs) + sink
	r, err := measure(fmt.Sprintf("folder of %d files", files), grep, dir, runs, bin)
	if err != nil {
		return err
	}
	results = append(results, r)
	for _, r := range results {
		fmt.Printf("%s: best of %d: %s %v; watchdog analyze %v; ratio %.2fx grep's speed (target >= 0.5x); peak RSS %d MiB (target < 256)\n",
			r.name, runs, r.grepCmd, r.grep.Round(time.Millisecond), r.analyze.Round(time.Millisecond),
			float64(r.grep)/float64(r.analyze), r.peakKB>>10)
	}
	return nil
}

// measure runs grep and the analysis of subject in turn, runs times each.
func measure(name, grep, subject string, runs int, bin string) (result, error) {
	r := result{name: name, grepCmd: grep, subject: subject}
	for i := 0; i < runs; i++ {
		dg, _, err := timed(exec.Command("sh", "-c", grep))
		if err != nil {
			return r, fmt.Errorf("grep: %w", err)
		}
		if r.grep == 0 || dg < r.grep {
			r.grep = dg
		}
		cmd := exec.Command(bin, "analyze", subject, "--json")
		d, kb, err := timed(cmd)
		// Exit status 1 (findings) and 0 are both a finished analysis.
		if ee, ok := err.(*exec.ExitError); err != nil && !(ok && slices.Contains([]int{0, 1}, ee.ExitCode())) {
			return r, fmt.Errorf("analyze: %w", err)
		}
		if r.analyze == 0 || d < r.analyze {
			r.analyze = d
		}
		r.peakKB = max(r.peakKB, kb)
		fmt.Printf("%s, run %d: grep %v, analyze %v (peak RSS %d MiB)\n", name, i+1, dg.Round(time.Millisecond), d.Round(time.Millisecond), kb>>10)
	}
	return r, nil
}

// ensureOne writes the single log unless it exists at this size: one node's simulated job
// (8 ranks) whose per-rank logs are joined into one file, as a console or a collector keeps
// them.
func ensureOne(path string, mb int) (int64, error) {
	stamp := path + ".shape"
	want := "1x8/" + strconv.Itoa(mb)
	if b, err := os.ReadFile(stamp); err == nil && string(b) == want {
		info, err := os.Stat(path)
		if err == nil {
			return info.Size(), nil
		}
	}
	tmp := path + ".parts"
	if _, _, err := ensureJob(tmp, 1, mb); err != nil {
		return 0, err
	}
	out, err := os.Create(path)
	if err != nil {
		return 0, fmt.Errorf("single log: %w", err)
	}
	defer out.Close()
	err = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
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
		return 0, fmt.Errorf("single log: %w", err)
	}
	if err := out.Close(); err != nil {
		return 0, fmt.Errorf("single log: %w", err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return 0, fmt.Errorf("single log: %w", err)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		return 0, fmt.Errorf("stamp: %w", err)
	}
	info, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("single log: %w", err)
	}
	return info.Size(), nil
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
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return 0, 0, fmt.Errorf("make %s: %w", filepath.Dir(dir), err)
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
