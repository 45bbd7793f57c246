package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/gpu"
)

// runNVMLProbe prints raw go-nvml samples: what the sidecar would see on this machine.
func runNVMLProbe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nvml-probe", flag.ContinueOnError)
	every := fs.Duration("every", 200*time.Millisecond, "sample period")
	n := fs.Int("n", 10, "samples")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return gpu.Probe(ctx, os.Stdout, *every, *n)
}
