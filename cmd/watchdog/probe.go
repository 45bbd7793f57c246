package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/gpu"
)

// runNVMLProbe prints raw go-nvml samples: what the sidecar would see on this machine.
func runNVMLProbe(ctx context.Context, args []string) error {
	fs := newFlags("nvml-probe", `usage: watchdog nvml-probe [flags]

Prints --n raw NVML samples of this machine's GPUs, one JSON line each: what the sidecar
would see here, with the processes computing on each GPU ("procs"; their pids are the
host's, named where this /proc shows them).`)
	every := fs.Duration("every", 200*time.Millisecond, "sample period")
	n := fs.Int("n", 10, "samples")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := errors.Join(positiveDuration("every", *every), positiveInt("n", *n)); err != nil {
		return err
	}
	return gpu.Probe(ctx, os.Stdout, *every, *n)
}
