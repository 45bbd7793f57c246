// Command watchdog finds hangs and stragglers in distributed GPU training: `watchdog
// analyze` diagnoses a job from its logs; `sidecar`, `detector`, `demo` and `status` run it
// live.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"analyze", "diagnose a job from its NCCL and PyTorch log files", runAnalyze},
		{"sidecar", "follow this node's NCCL logs, sample GPUs/ports/RAS, publish to etcd", runSidecar},
		{"detector", "judge every job live from etcd, open incidents, alert (HA by election)", runDetector},
		{"demo", "everything on one machine: embedded etcd, simulated faulty jobs, sidecars, detector", runDemo},
		{"loadgen", "measure the watchdog at scale: simulated sidecars, real etcd, a real detector", runLoadgen},
		{"simulate", "write a simulated training job's NCCL logs, GPU and IB state, with scripted faults", runSimulate},
		{"status", "live terminal view of communicators x ranks and incidents", runStatus},
		{"nvml-probe", "print raw NVML samples of this machine's GPUs (JSON lines)", runNVMLProbe},
		{"install-plugin", "copy the NCCL profiler plugin shipped with this binary to a directory (init containers)", runInstallPlugin},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	for _, c := range commands() {
		if c.name == os.Args[1] {
			if err := c.run(ctx, os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "watchdog %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	usage()
	os.Exit(2)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: watchdog <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", c.name, c.summary)
	}
}
