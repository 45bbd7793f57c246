// Command benchparse measures the log parser against grep on a large log built from real
// capture lines: `make bench-parse`. It prints MB/s, lines/s and allocations per line for
// the parser alone and with the per-process tracker (one core, reading the file), and for
// `grep -c opCount` on the same file.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/logparse"
)

func main() {
	src := flag.String("capture", "testdata/captures/nccl-2.28.9-2xH200/multicomm/nccl.vm.607.log", "real log whose per-step lines are repeated")
	out := flag.String("out", "bin/bench-parse.log", "where to build the large log")
	size := flag.Int64("mb", 128, "size of the large log in MB")
	runs := flag.Int("runs", 15, "timed runs of each contender, interleaved; the best is reported")
	loop := flag.String("loop", "", "instead of timing: run one line kind (none, parse, observe, channel) -n times, for callgrind (make bench-parse-instr)")
	loopN := flag.Int("n", 100000, "iterations of -loop")
	flag.Parse()
	if *loop != "" {
		if err := repeat(*loop, *loopN); err != nil {
			fail(err)
		}
		return
	}
	runtime.GOMAXPROCS(1)
	if err := build(*src, *out, *size<<20); err != nil {
		fail(err)
	}
	st, err := os.Stat(*out)
	if err != nil {
		fail(err)
	}
	mb := float64(st.Size()) / (1 << 20)

	// The contenders take turns, so that a noisy neighbour slows each of them alike.
	var parseOnly, tracked, grep result
	var grepCount string
	for i := 0; i < *runs; i++ {
		if err := parseOnly.add(parse(*out, false)); err != nil {
			fail(err)
		}
		if err := tracked.add(parse(*out, true)); err != nil {
			fail(err)
		}
		t0 := time.Now()
		cmd := exec.Command("grep", "-c", "opCount", *out)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		o, err := cmd.Output()
		if err != nil {
			fail(fmt.Errorf("grep: %w", err))
		}
		grep.add(time.Since(t0), 0, 0, nil)
		grepCount = strings.TrimSpace(string(o))
	}
	grepMBs := mb / grep.best.Seconds()
	fmt.Printf("file                 %s (%.0f MB, %d lines, %s collective lines)\n", *out, mb, tracked.lines, grepCount)
	for _, c := range []struct {
		name string
		r    result
	}{{"parser", parseOnly}, {"parser + tracker", tracked}} {
		fmt.Printf("%-20s %8.0f MB/s  %10.0f lines/s  %.3f allocs/line  (best of %d: %s)\n", c.name, mb/c.r.best.Seconds(),
			float64(c.r.lines)/c.r.best.Seconds(), c.r.allocs, *runs, c.r.best.Round(time.Millisecond))
	}
	fmt.Printf("grep -c opCount      %8.0f MB/s  (best of %d: %s)\n", grepMBs, *runs, grep.best.Round(time.Millisecond))
	fmt.Printf("ratio parser/grep    %8.2fx  (target >= 0.5x, 0 allocs/line)\n", grep.best.Seconds()/parseOnly.best.Seconds())
	fmt.Printf("ratio + tracker/grep %8.2fx\n", grep.best.Seconds()/tracked.best.Seconds())
}

// Lines of the benchmark log, for counting instructions per line.
const (
	collLine    = "[2026-11-21 23:00:35.402707] vm:607:607 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7faa1f440000 recvbuff 0x7faa1f440000 count 16384 datatype 7 op 0 root 0 comm 0x10d842d0 [nranks=2] stream (nil)\n"
	channelLine = "[2026-11-21 23:00:35.086241] vm:607:607 [0] NCCL INFO Channel 17/1 : 0[0] -> 1[1] via P2P/CUMEM\n"
)

// repeat runs one line kind n times: under valgrind --tool=callgrind, the instruction count
// minus that of "none", divided by n, is the cost of one line, the same on every run.
func repeat(kind string, n int) error {
	var l logparse.Line
	tr := logparse.NewTracker(logparse.TrackerOptions{})
	now := time.Now()
	coll, channel := []byte(collLine), []byte(channelLine)
	switch kind {
	case "none":
	case "parse":
		for i := 0; i < n; i++ {
			logparse.Parse(coll, &l)
		}
	case "observe":
		for i := 0; i < n; i++ {
			tr.Observe(coll, now)
		}
	case "channel":
		for i := 0; i < n; i++ {
			tr.Observe(channel, now)
		}
	default:
		return fmt.Errorf("-loop %q: want none, parse, observe or channel", kind)
	}
	return nil
}

// result keeps the best of a contender's runs.
type result struct {
	best   time.Duration
	lines  int64
	allocs float64
}

func (r *result) add(d time.Duration, lines int64, allocs float64, err error) error {
	if err != nil {
		return err
	}
	if r.best == 0 || d < r.best {
		r.best = d
	}
	r.lines, r.allocs = lines, allocs
	return nil
}

// build writes the capture's header once, then its collective section repeatedly.
func build(src, out string, size int64) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read capture: %w", err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	first, last := -1, -1
	for i, l := range lines {
		if bytes.Contains(l, []byte(" opCount ")) {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return fmt.Errorf("%s has no collective lines", src)
	}
	if st, err := os.Stat(out); err == nil && st.Size() >= size {
		return nil // reuse a previous build
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var n int64
	for _, l := range lines[:first] {
		k, _ := w.Write(l)
		n += int64(k)
	}
	for n < size {
		for _, l := range lines[first : last+1] {
			k, _ := w.Write(l)
			n += int64(k)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// parse times one pass over the file: Parse on each line, and with track the per-process
// tracker too (what the sidecar and analyze run).
func parse(path string, track bool) (time.Duration, int64, float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	// Warm the page cache so both contenders read from memory.
	if _, err := io.Copy(io.Discard, f); err != nil {
		return 0, 0, 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, 0, 0, err
	}
	tr := logparse.NewTracker(logparse.TrackerOptions{})
	var l logparse.Line
	// 64 KiB reads split at newlines, as the sidecar's follower does (and grep reads about as
	// much at a time): the kernel copies each block into cache the parser then reads.
	buf := make([]byte, 64<<10)
	now := time.Now()
	var lines int64
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	t0 := time.Now()
	for filled := 0; ; {
		n, err := f.Read(buf[filled:])
		filled += n
		start := 0
		for {
			i := bytes.IndexByte(buf[start:filled], '\n')
			if i < 0 {
				break
			}
			if track {
				tr.Observe(buf[start:start+i+1], now)
			} else {
				logparse.Parse(buf[start:start+i+1], &l)
			}
			lines++
			start += i + 1
		}
		// A line longer than the buffer is parsed in pieces, like an over-long line in the
		// sidecar; the benchmark's lines are far shorter.
		if start == 0 && filled == len(buf) || err == io.EOF && filled > start {
			if track {
				tr.Observe(buf[start:filled], now)
			} else {
				logparse.Parse(buf[start:filled], &l)
			}
			lines++
			start = filled
		}
		filled = copy(buf, buf[start:filled])
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, 0, err
		}
	}
	d := time.Since(t0)
	runtime.ReadMemStats(&ms1)
	return d, lines, float64(ms1.Mallocs-ms0.Mallocs) / float64(lines), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchparse:", err)
	os.Exit(1)
}
