// Command benchlogbound measures the sidecar's log bound: `make bench-logbound`. A rank
// writes its NCCL log as NCCL does (one descriptor without O_APPEND, never rotated): the
// header of a real capture (version, Init, channels), then per-op lines of ~170 bytes at
// --rate for --duration, while a real `watchdog sidecar --log-keep-mib N` follows it. Every
// 250 ms the file's disk usage (st_blocks, what du counts) is sampled; at the end the
// sidecar's snapshot must count every collective written. It prints the figures and fails
// when the file ever held more than header + N MiB + one bounding interval of writes.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/procstat"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The capture whose header the rank writes, and a per-op line on its communicator.
const (
	capture = "testdata/captures/nccl-2.28.9-2xH200/healthy/nccl.vm.635.log"
	opLine  = "vm:635:635 [0] NCCL INFO AllReduce: opCount %x sendbuff 0x7f3e5ba00000 recvbuff 0x7f3e5ba00000 count 16777216 datatype 7 op 0 root 0 comm 0x1f026430 [nranks=2] stream 0x55d0c8c0a9a0\n"
	// interval is the sidecar's bounding period (its state-saving period, 2 s). A round can
	// come later: the state file's fsync before it waits for the disk (with 2 MB/s of dirty
	// pages, ext4 on this VM took up to 1.6 s), so the bound is checked against the rounds as
	// they came, seen as steps of the freed-bytes counter, sampled every sample.
	interval = 2 * time.Second
	sample   = 250 * time.Millisecond
)

func main() {
	bin := flag.String("watchdog", "bin/watchdog", "the watchdog binary")
	dur := flag.Duration("duration", 5*time.Minute, "how long the rank writes")
	rate := flag.Float64("rate", 2e6, "bytes per second the rank writes")
	keep := flag.Int("keep-mib", 128, "the sidecar's --log-keep-mib")
	dir := flag.String("dir", "", "folder for the log (default: a temporary one); its filesystem must punch holes")
	flag.Parse()
	if *dur <= 0 || *rate <= 0 || *keep <= 0 {
		fmt.Fprintln(os.Stderr, "benchlogbound: --duration, --rate and --keep-mib must be positive")
		os.Exit(2)
	}
	ok, err := run(*bin, *dir, *dur, *rate, int64(*keep)<<20)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchlogbound:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(bin, dir string, dur time.Duration, rate float64, keep int64) (bool, error) {
	ctx := context.Background()
	if dir == "" {
		d, err := os.MkdirTemp("", "bench-logbound-*")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return false, err
	}
	header, err := captureHeader()
	if err != nil {
		return false, err
	}
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return false, err
	}
	defer etcd.Close()
	httpAddr, err := procstat.FreeAddr()
	if err != nil {
		return false, err
	}
	path := filepath.Join(logs, "nccl.vm.635.log")
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return false, err
	}
	defer w.Close()
	if _, err := w.Write(header); err != nil {
		return false, err
	}
	cmd := exec.Command(bin, "sidecar", "--etcd-endpoints", etcd.Endpoints()[0], "--job", "bench", "--node", "vm",
		"--logs", filepath.Join(logs, "*.log"), "--http", httpAddr, "--nvml=false", "--check-pids=false", "--ras-addr", "",
		"--state-dir", filepath.Join(dir, "state"), "--log-keep-mib", strconv.FormatInt(keep>>20, 10), "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("start sidecar: %w", err)
	}
	defer cmd.Process.Kill()
	base := "http://" + httpAddr

	// Write at the rate, in 10 ms slices, sampling the disk usage every 250 ms.
	var line []byte
	var ops, written int64
	var buf bytes.Buffer
	start := time.Now()
	maxDisk, nextSample := int64(0), start
	var rounds []time.Duration // between two steps of the freed counter
	lastFreed, lastStep := 0.0, time.Time{}
	for time.Since(start) < dur {
		for due := int64(rate * time.Since(start).Seconds()); written < due; written += int64(len(line)) {
			ops++
			line = fmt.Appendf(line[:0], opLine, ops)
			buf.Write(line)
		}
		if buf.Len() > 0 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return false, err
			}
			buf.Reset()
		}
		if now := time.Now(); now.After(nextSample) {
			maxDisk = max(maxDisk, onDisk(path))
			nextSample = nextSample.Add(sample)
			if f := metric(base, "ncclwatch_log_freed_bytes_total"); f > lastFreed {
				if !lastStep.IsZero() {
					rounds = append(rounds, now.Sub(lastStep))
				}
				lastFreed, lastStep = f, now
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	// Every collective counted: the sidecar's snapshot reaches the number written.
	var counted int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		counted, err = collectives(base)
		if err == nil && counted == ops || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	size := fileSize(w)
	maxDisk = max(maxDisk, onDisk(path))
	freed := metric(base, "ncclwatch_log_freed_bytes_total")
	if len(rounds) == 0 {
		return false, errors.New("the sidecar freed nothing: is --duration long enough to write --keep-mib?")
	}
	slices.Sort(rounds)
	median, longest := rounds[len(rounds)/2], rounds[len(rounds)-1]
	// One round of writes, as long as the longest round was (its step seen up to one sample
	// late); partial blocks at the hole's two ends stay allocated (zeroed), and the
	// header's last.
	round := longest + sample
	bound := int64(len(header)) + keep + int64(rate*round.Seconds()) + 3*4096
	fmt.Printf("rank log         %d collectives, %.1f MiB written in %s (%.2f MB/s), header %d B (%s)\n",
		ops, float64(size)/(1<<20), elapsed.Round(time.Second), float64(size-int64(len(header)))/elapsed.Seconds()/1e6, len(header), capture)
	fmt.Printf("sidecar          --log-keep-mib %d, bounding every %s: %d rounds seen, median %.2f s apart, longest %.2f s\n",
		keep>>20, interval, len(rounds)+1, median.Seconds(), longest.Seconds())
	fmt.Printf("on disk (du)     at most %.2f MiB = header + %d MiB + %.2f s of writes; bound: one round of writes (%.2f s), %.2f MiB\n",
		float64(maxDisk)/(1<<20), keep>>20, float64(maxDisk-int64(len(header))-keep)/rate, round.Seconds(), float64(bound)/(1<<20))
	fmt.Printf("freed            %.1f MiB (ncclwatch_log_freed_bytes_total)\n", freed/(1<<20))
	fmt.Printf("counted          %d of %d collectives in the sidecar's snapshot\n", counted, ops)
	ok := true
	if maxDisk > bound {
		fmt.Printf("FAIL: the log held %.1f MiB, over the bound\n", float64(maxDisk)/(1<<20))
		ok = false
	}
	if counted != ops {
		fmt.Printf("FAIL: %d collectives counted, %d written\n", counted, ops)
		ok = false
	}
	return ok, nil
}

// captureHeader is the capture's lines up to its first per-op line.
func captureHeader() ([]byte, error) {
	b, err := os.ReadFile(capture)
	if err != nil {
		return nil, fmt.Errorf("%w (run from the repository root)", err)
	}
	i := bytes.Index(b, []byte(": opCount "))
	if i < 0 {
		return nil, fmt.Errorf("%s has no per-op line", capture)
	}
	return b[:bytes.LastIndexByte(b[:i], '\n')+1], nil
}

func fileSize(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}

// onDisk is what du counts for the file: its allocated blocks.
func onDisk(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// collectives sums the communicator counts of the sidecar's snapshot.
func collectives(base string) (int64, error) {
	resp, err := http.Get(base + "/api/v1/snapshot")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var n snapshot.Node
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return 0, err
	}
	var total int64
	for _, p := range n.Processes {
		for _, c := range p.Comms {
			total += c.Count
		}
	}
	return total, nil
}

// metric reads an unlabelled counter from the sidecar's /metrics (-1 when absent).
func metric(base, name string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}
