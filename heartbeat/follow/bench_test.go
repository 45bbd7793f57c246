//go:build linux

package follow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The benchmarks write from a child process (this test binary, running
// TestBenchWriter), so that getrusage on this process measures the follower
// alone. Each line is one write(2), as NCCL 2.27+ line-buffered output does,
// and starts with the wall-clock nanoseconds of its write.

const writerEnv = "FOLLOW_BENCH_WRITER" // dir|prefix|files|lines/s|seconds|line bytes

func TestBenchWriter(t *testing.T) {
	spec := os.Getenv(writerEnv)
	if spec == "" {
		t.Skip("helper process for the benchmarks")
	}
	parts := strings.Split(spec, "|")
	dir, prefix := parts[0], parts[1]
	files, _ := strconv.Atoi(parts[2])
	rate, _ := strconv.ParseFloat(parts[3], 64)
	secs, _ := strconv.ParseFloat(parts[4], 64)
	lineLen, _ := strconv.Atoi(parts[5])

	ws := make([]*os.File, files)
	for i := range ws {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("nccl.%s.%d.log", prefix, i+1)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ws[i] = f
	}
	total := int(rate * secs)
	written := make([]int, files)
	line := []byte(strings.Repeat("x", lineLen-1) + "\n")
	begin := time.Now()
	for {
		due := min(total, int(time.Since(begin).Seconds()*rate)+1)
		for i, f := range ws {
			for ; written[i] < due; written[i]++ {
				copy(line, fmt.Appendf(nil, "ts=%019d seq=%09d ", time.Now().UnixNano(), written[i]))
				if _, err := f.Write(line); err != nil {
					t.Fatal(err)
				}
			}
		}
		if due == total {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// runWriter runs the writer process to completion.
func runWriter(b *testing.B, dir, prefix string, files int, rate, secs float64, lineLen int) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d|%g|%g|%d", writerEnv, dir, prefix, files, rate, secs, lineLen))
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("writer: %v\n%s", err, out)
	}
}

// latencyHandler measures write-to-delivery time from the ts= prefix.
type latencyHandler struct {
	lines atomic.Int64
	mu    sync.Mutex
	lat   []int64
}

func (h *latencyHandler) Line(_ *File, line []byte, _ time.Time, _ LineFlags) {
	now := time.Now().UnixNano()
	if len(line) >= 22 && string(line[:3]) == "ts=" {
		var ts int64
		for _, c := range line[3:22] {
			ts = ts*10 + int64(c-'0')
		}
		h.mu.Lock()
		h.lat = append(h.lat, now-ts)
		h.mu.Unlock()
	}
	h.lines.Add(1)
}

func (h *latencyHandler) Event(*File, EventKind) {}

func startBench(b *testing.B, opts Options, h Handler) (*Follower, func()) {
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	fw, err := New(opts, h)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- fw.Run(ctx) }()
	return fw, func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}

func waitLines(b *testing.B, h *latencyHandler, n int64) {
	deadline := time.Now().Add(30 * time.Second)
	for h.lines.Load() < n {
		if time.Now().After(deadline) {
			b.Fatalf("delivered %d of %d lines", h.lines.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLatency reports write-to-delivery latency percentiles; one op is
// one writer run (lines/s per file for the given seconds).
func BenchmarkLatency(b *testing.B) {
	for _, tc := range []struct {
		name       string
		files      int
		rate, secs float64
		opts       Options
	}{
		{"1file-500lps", 1, 500, 0.5, Options{}},
		{"8files-2000lps", 8, 2000, 1, Options{}},
		{"8files-2000lps-nobatch", 8, 2000, 1, Options{BatchInterval: -1}},
		{"8files-2000lps-batch5ms", 8, 2000, 1, Options{BatchInterval: 5 * time.Millisecond}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			h := &latencyHandler{}
			opts := tc.opts
			opts.Patterns = []string{filepath.Join(dir, "*.log")}
			_, stop := startBench(b, opts, h)
			defer stop()
			want := int64(0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				runWriter(b, dir, fmt.Sprintf("op%d", i), tc.files, tc.rate, tc.secs, 200)
				want += int64(float64(tc.files) * tc.rate * tc.secs)
				waitLines(b, h, want)
			}
			b.StopTimer()
			h.mu.Lock()
			lat := slices.Clone(h.lat)
			h.mu.Unlock()
			slices.Sort(lat)
			pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e3 }
			b.ReportMetric(pct(0.50), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
			b.ReportMetric(pct(0.999), "p99.9-µs")
			b.ReportMetric(float64(lat[len(lat)-1])/1e3, "max-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkThroughput reports the follower's CPU use for 8 files at 2,000
// lines/s of 200 bytes (the sidecar's budget is 5% of a core), and its
// catch-up speed over files already written.
func BenchmarkThroughput(b *testing.B) {
	const files, lineLen = 8, 200
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"8files-2000lps", Options{}},
		{"8files-2000lps-nobatch", Options{BatchInterval: -1}},
		{"8files-2000lps-batch1ms", Options{BatchInterval: time.Millisecond}},
		{"8files-2000lps-batch5ms", Options{BatchInterval: 5 * time.Millisecond}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const rate, secs = 2000, 1.0
			dir := b.TempDir()
			h := &latencyHandler{}
			opts := tc.opts
			opts.Patterns = []string{filepath.Join(dir, "*.log")}
			fw, stop := startBench(b, opts, h)
			defer stop()
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			cpu0, wall0 := cpuTime(), time.Now()
			want := int64(0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				runWriter(b, dir, fmt.Sprintf("op%d", i), files, rate, secs, lineLen)
				want += files * rate * secs
				waitLines(b, h, want)
			}
			b.StopTimer()
			cpu, wall := cpuTime()-cpu0, time.Since(wall0)
			runtime.ReadMemStats(&m1)
			lines := float64(h.lines.Load())
			bytes := float64(fw.Stats().Bytes)
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu-%")
			b.ReportMetric(bytes/wall.Seconds()/1e6, "MB/s")
			b.ReportMetric(lines/wall.Seconds(), "lines/s")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/lines, "allocs/line")
			b.ReportMetric(float64(cpu.Nanoseconds())/lines, "cpu-ns/line")
			b.ReportMetric(0, "ns/op")
		})
	}
	b.Run("catchup-8files", func(b *testing.B) {
		const perFile = 50000 // 10 MB per file
		dir := b.TempDir()
		h := &latencyHandler{}
		line := strings.Repeat("y", lineLen-1) + "\n"
		for op := 0; op < b.N; op++ {
			for i := 0; i < files; i++ {
				content := strings.Repeat(line, perFile)
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("nccl.op%d.%d.log", op, i+1)), []byte(content), 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		cpu0, wall0 := cpuTime(), time.Now()
		b.ResetTimer()
		fw, stop := startBench(b, Options{Patterns: []string{filepath.Join(dir, "*.log")}}, h)
		waitLines(b, h, int64(b.N*files*perFile))
		b.StopTimer()
		cpu, wall := cpuTime()-cpu0, time.Since(wall0)
		runtime.ReadMemStats(&m1)
		stop()
		lines, bytes := float64(h.lines.Load()), float64(fw.Stats().Bytes)
		b.ReportMetric(bytes/wall.Seconds()/1e6, "MB/s")
		b.ReportMetric(bytes/cpu.Seconds()/1e6, "MB/cpu-s")
		b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/lines, "allocs/line")
		b.ReportMetric(float64(cpu.Nanoseconds())/lines, "cpu-ns/line")
	})
}
