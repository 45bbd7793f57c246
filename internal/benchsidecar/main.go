// Command benchsidecar measures the sidecar under load: `make bench-sidecar`. A simulated
// node of 8 ranks writes NCCL logs in real time (each rank about 2,000 collective lines/s),
// a real `watchdog sidecar` process follows them and publishes to an embedded etcd, and
// this program reads the sidecar's CPU time and peak RSS from /proc and its etcd writes
// from its /metrics.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"github.com/ncclwatch/watchdog/internal/procstat"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/jobsim"
)

func main() {
	bin := flag.String("watchdog", "bin/watchdog", "the watchdog binary")
	dur := flag.Duration("duration", 60*time.Second, "how long the load runs")
	rate := flag.Int("lines-per-rank", 2000, "collective lines per second per rank")
	flag.Parse()
	if err := run(*bin, *dur, *rate); err != nil {
		fmt.Fprintln(os.Stderr, "benchsidecar:", err)
		os.Exit(1)
	}
}

func run(bin string, dur time.Duration, rate int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-sidecar-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer etcd.Close()

	// One step issues opsPerStep collectives per rank; the step time gives the line rate.
	cfg := jobsim.Config{Nodes: 1, RanksPerNode: 8, Layers: 2, Timestamps: true, LogsOnly: true, Seed: 1}
	probe, err := jobsim.New(cfg, filepath.Join(dir, "probe"))
	if err != nil {
		return err
	}
	opsPerStep := len(probe.StepOps(0))
	cfg.StepTime = time.Duration(float64(time.Second) * float64(opsPerStep) / float64(rate))
	cfg.Steps = int(dur / cfg.StepTime)
	sim, err := jobsim.New(cfg, filepath.Join(dir, "job"))
	if err != nil {
		return err
	}
	logs := sim.Nodes()[0].LogDir

	httpAddr, err := procstat.FreeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "sidecar", "--etcd-endpoints", etcd.Endpoints()[0], "--job", "bench", "--node", "node0",
		"--logs", filepath.Join(logs, "*.log"), "--http", httpAddr, "--nvml=false", "--check-pids=false", "--ras-addr", "",
		"--state-dir", filepath.Join(dir, "state"), "--log-level", "warn", "--pprof")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start sidecar: %w", err)
	}
	defer cmd.Process.Kill()
	time.Sleep(time.Second)

	start := time.Now()
	cpu0, err := procstat.CPUSeconds(cmd.Process.Pid)
	if err != nil {
		return err
	}
	w0, _ := writes("http://" + httpAddr)
	sctx, cancel := context.WithTimeout(ctx, dur+30*time.Second)
	defer cancel()
	if err := sim.Run(sctx); err != nil && sctx.Err() == nil {
		return fmt.Errorf("simulator: %w", err)
	}
	time.Sleep(2 * time.Second) // let the sidecar catch up and publish
	elapsed := time.Since(start).Seconds()
	cpu1, err := procstat.CPUSeconds(cmd.Process.Pid)
	if err != nil {
		return err
	}
	w1, err := writes("http://" + httpAddr)
	if err != nil {
		return err
	}
	rss, err := procstat.PeakRSSKiB(cmd.Process.Pid)
	if err != nil {
		return err
	}
	lines := sim.Stats().Lines
	fmt.Printf("load                 8 ranks, %d collective lines/s each (%.0f lines/s written in all, %s steps of %d ops)\n",
		rate, float64(lines)/elapsed, cfg.StepTime.Round(time.Microsecond), opsPerStep)
	fmt.Printf("sidecar CPU          %.4f s/s (%.2f%% of one core; target < 5%%)\n", (cpu1-cpu0)/elapsed, 100*(cpu1-cpu0)/elapsed)
	fmt.Printf("sidecar peak RSS     %.1f MiB (target < 64 MiB)\n", float64(rss)/1024)
	fmt.Printf("etcd writes          %.2f /s (target <= 1)\n", (w1-w0)/elapsed)
	return nil
}

// writes reads ncclwatch_publish_total{result="ok"} from the sidecar.
func writes(base string) (float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `ncclwatch_publish_total{result="ok"} `); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, nil
}
