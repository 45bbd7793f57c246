package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ncclwatch/watchdog/analyze"
	"github.com/ncclwatch/watchdog/detect"
)

func runAnalyze(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("analyze", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	tz := fs.String("log-tz", "Local", "time zone NCCL printed its timestamps in (e.g. UTC, Europe/Paris)")
	ring := fs.Int("ops", 4096, "recent ops per communicator compared across ranks")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: watchdog analyze [--json] PATH...\n\nPATHs are NCCL_DEBUG_FILE logs, torchrun/stdout logs, or folders searched for *.log.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("no paths")
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		return fmt.Errorf("--log-tz: %w", err)
	}
	rep, err := analyze.Analyze(ctx, fs.Args(), analyze.Options{Location: loc, RingSize: *ring, Rules: detect.DefaultConfig()})
	if rep == nil {
		return err
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "watchdog analyze: some files could not be read fully: %v\n", err)
	}
	if *asJSON {
		return rep.WriteJSON(os.Stdout)
	}
	return rep.WriteText(os.Stdout)
}
