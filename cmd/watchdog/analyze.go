package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/analyze"
	"github.com/ncclwatch/watchdog/detect"
)

const analyzeIntro = `usage: watchdog analyze [flags] PATH... (flags may also follow the paths)

PATHs are NCCL_DEBUG_FILE logs, consoles of torchrun/mpirun/srun/kubectl (many processes
interleaved in one file are told apart by NCCL's prefix), NCCL RAS reports saved as text or
JSON, folders (searched for *.log *.txt *.out *.err *.json and files without extension),
any of them gzip- or zstd-compressed, and - for standard input.

The report starts with what could be read (coverage), then the findings.`

const analyzeExits = `Exit status:
  0  the logs were read and allow a judgement, and nothing was found
  1  findings (see the report)
  2  usage or input error: bad flag, no such path, nothing to read
  3  too little could be read to judge: no NCCL or collective lines, unreadable files,
     no two ranks to compare; the report says what to set (this is not an all-clear)
`

func runAnalyze(ctx context.Context, args []string) error {
	if code := analyzeMain(ctx, args, os.Stdin, os.Stdout, os.Stderr); code != 0 {
		return exitCodeError{code: code} // analyzeMain said why
	}
	return nil
}

// analyzeMain is the analyze command with its streams; it returns the exit status.
func analyzeMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("analyze", analyzeIntro)
	fs.exits = analyzeExits
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("verbose", false, "list every rank, communicator and piece of evidence instead of summarising large jobs")
	tz := fs.String("log-tz", "Local", "time zone NCCL printed its timestamps in (e.g. UTC, Europe/Paris)")
	ring := fs.Int("ops", 0, "recent ops per communicator compared across ranks (0: 4096, 1024 above 64 files)")
	workers := fs.Int("workers", 0, "files read at once (0: one per CPU)")
	runs := fs.Bool("runs", false, "each PATH is a run (a job's folder) of its own: report each, then the hosts, GPUs, NICs and links that were roots in more than one")
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "watchdog analyze: %v\nRun 'watchdog analyze --help' for the flags.\n", err)
		return analyze.ExitInput
	}
	paths, err := parseInterleaved(fs.FlagSet, args)
	if errors.Is(err, flag.ErrHelp) {
		fs.writeHelp(stdout)
		return 0
	}
	if err == nil {
		err = applyEnv(fs.FlagSet)
	}
	if err == nil && len(paths) == 0 {
		err = errors.New("no paths given")
	}
	if err == nil {
		err = errors.Join(notNegative("ops", float64(*ring)), notNegative("workers", float64(*workers)))
	}
	if err != nil {
		return usageErr(err)
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		fmt.Fprintf(stderr, "watchdog analyze: --log-tz: %v\n", err)
		return analyze.ExitInput
	}
	// The analysis holds every rank's recent ops at once and then exits: it collects only
	// when the heap nears the limit, bounded well under 1 GiB.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(768 << 20))
	opts := analyze.Options{Location: loc, RingSize: *ring, Workers: *workers, Stdin: stdin, Rules: detect.DefaultConfig()}
	if *runs {
		return analyzeRuns(ctx, paths, opts, *asJSON, *verbose, stdout, stderr)
	}
	rep, err := analyze.Analyze(ctx, paths, opts)
	if err != nil {
		fmt.Fprintf(stderr, "watchdog analyze: %v\n", strings.TrimPrefix(err.Error(), analyze.ErrInput.Error()+": "))
		if errors.Is(err, analyze.ErrInput) {
			return analyze.ExitInput
		}
		return analyze.ExitCannotJudge
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.Write(stdout, *verbose)
	}
	if err != nil {
		fmt.Fprintf(stderr, "watchdog analyze: %v\n", err)
		return analyze.ExitInput
	}
	return rep.ExitCode
}

// parseInterleaved parses flags wherever they stand among the paths ("analyze DIR --json");
// "--" ends the flags, and "-" is a path (standard input).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var paths []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return paths, nil
		}
		// flag stops at the first non-flag; after "--" everything is a path.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(paths, rest...), nil
		}
		paths = append(paths, rest[0])
		args = rest[1:]
	}
}
