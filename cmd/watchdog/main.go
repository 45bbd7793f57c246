// Command watchdog finds hangs and stragglers in distributed GPU training: `watchdog
// analyze` diagnoses a job from its logs; `sidecar`, `detector`, `demo` and `status` run it
// live.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
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
		{"doctor", "check a deployment: alerts, etcd TLS/auth/roles, a job's NCCL environment, NVML, IB", runDoctor},
		{"etcd-roles", "print or apply the least-privilege etcd roles and users (docs/security.md)", runEtcdRoles},
		{"version", "print the version and exit", func(context.Context, []string) error { writeVersion(os.Stdout); return nil }},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "-version", "--version":
		writeVersion(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return finish(c.name, c.run(ctx, args[1:]), stderr)
		}
	}
	what := "unknown command"
	if strings.HasPrefix(args[0], "-") {
		what = "unknown flag before the command"
	}
	fmt.Fprintf(stderr, "watchdog: %s %q\nRun 'watchdog --help' for the commands.\n", what, args[0])
	return exitUsage
}

// finish reports a command's error once, prefixed with the command's name, and returns its
// exit status.
func finish(name string, err error, stderr io.Writer) int {
	var ue usageError
	var ce exitCodeError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &ce):
		if ce.err != nil {
			fmt.Fprintf(stderr, "watchdog %s: %s\n", name, message(name, ce.err))
		}
		return ce.code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "watchdog %s: %s\nRun 'watchdog %s --help' for the flags.\n", name, message(name, err), name)
		return exitUsage
	}
	fmt.Fprintf(stderr, "watchdog %s: %s\n", name, message(name, err))
	return exitError
}

// message is an error's text without a leading "<command>: " that the prefix already says
// (packages name themselves in their errors: "sidecar: no job name").
func message(name string, err error) string {
	return strings.TrimPrefix(err.Error(), name+": ")
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: watchdog <command> [flags]
       watchdog <command> --help
       watchdog --version

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Every flag can also be set by its environment variable, NCCLWATCH_ and the flag's name in
upper case with - as _ (--etcd-endpoints: NCCLWATCH_ETCD_ENDPOINTS); the command line wins.

`+exitHelp+`  analyze and status have more (see their --help).
`)
}
