// Package doctor checks a watchdog deployment before it matters (`watchdog doctor`): the
// alert configuration and its secrets, etcd with the given TLS and auth, the roles of the
// credentials, a training job's NCCL environment (debug level, subsystems, file pattern,
// timestamps, or the profiler plugin and whether it loads), NVML and the IB ports. Each
// check says what it found; each problem comes with its fix.
package doctor

import (
	"fmt"
	"io"
	"strings"
)

// Level grades a result.
type Level int

const (
	OK   Level = iota
	Skip       // not checked (nothing to check it with); says why
	Warn       // works, but worse than it could (the watchdog is blinder, or less safe)
	Fail       // the watchdog will not work as deployed
)

func (l Level) String() string {
	return [...]string{"ok", "skip", "warn", "FAIL"}[l]
}

// Result is one finding of one check.
type Result struct {
	Check string // "alerts", "etcd", "roles", "nccl", "nvml", "ib"
	Level Level
	Say   string // what was found
	Fix   string // what to do (problems only)
}

// Report is every result of a run.
type Report []Result

// Worst is the highest level in r (OK for an empty report).
func (r Report) Worst() Level {
	w := OK
	for _, x := range r {
		if x.Level > w && x.Level != Skip {
			w = x.Level
		}
	}
	return w
}

// Write prints one line per result, its fix indented under it.
func (r Report) Write(w io.Writer) error {
	for _, x := range r {
		if _, err := fmt.Fprintf(w, "%-4s  %-6s %s\n", x.Level, x.Check, oneLine(x.Say)); err != nil {
			return err
		}
		if x.Fix != "" && x.Level >= Warn {
			if _, err := fmt.Fprintf(w, "              fix: %s\n", oneLine(x.Fix)); err != nil {
				return err
			}
		}
	}
	return nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func ok(check, format string, a ...any) Result {
	return Result{Check: check, Level: OK, Say: fmt.Sprintf(format, a...)}
}

func problem(check string, l Level, say, fix string) Result {
	return Result{Check: check, Level: l, Say: say, Fix: fix}
}
