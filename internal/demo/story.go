package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/incident"
)

// storyWriter prints the demo as it happens: job events, and incidents as the console
// notifier receives them from the alert dispatcher.
type storyWriter struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (s *storyWriter) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "[%6.1fs] %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// Name and Notify make the story a notifier: what an on-call engineer would receive.
func (s *storyWriter) Name() string { return "console" }

func (s *storyWriter) Notify(ctx context.Context, batch ...*alert.Notification) (bool, error) {
	for _, n := range batch {
		inc := n.Incident
		switch n.Event {
		case alert.EventOpen:
			s.printf("%-16s INCIDENT %s %s [%s]: %s", strings.TrimPrefix(inc.Job, "demo-"), inc.ID, inc.Kind, inc.Severity, inc.Summary)
		case alert.EventResolve:
			s.printf("%-16s resolved %s %s", strings.TrimPrefix(inc.Job, "demo-"), inc.ID, inc.Kind)
		default:
			s.printf("%-16s update   %s %s: %s", strings.TrimPrefix(inc.Job, "demo-"), inc.ID, inc.Kind, inc.Summary)
		}
	}
	return false, nil
}

func writeSummary(w io.Writer, results []Result) {
	fmt.Fprintln(w, "\nSummary")
	fmt.Fprintf(w, "  %-16s %-16s %-18s %-24s %s\n", "scenario", "expected", "detected", "culprit", "after fault")
	for _, r := range results {
		expect := string(r.Expect)
		if expect == "" {
			expect = "(none)"
		}
		if len(r.Incidents) == 0 {
			fmt.Fprintf(w, "  %-16s %-16s %-18s %-24s %s  %s\n", r.Scenario, expect, "(none)", "-", "-", verdict(r))
			continue
		}
		for i, d := range r.Incidents {
			name := r.Scenario
			v := verdict(r)
			if i > 0 {
				name, expect, v = "", "", ""
			}
			fmt.Fprintf(w, "  %-16s %-16s %-18s %-24s %5.1fs  %s\n", name, expect, d.Kind, culprit(d.Culprits), d.DetectedAfterSeconds, v)
		}
	}
}

// writeMachine says how busy the machine was: how late this process's timers fired.
func writeMachine(w io.Writer, results []Result) {
	var p99, worst, behind float64
	for _, r := range results {
		p99, worst, behind = max(p99, r.TimerLateP99Ms), max(worst, r.TimerLateMaxMs), max(behind, r.SimBehindMs)
	}
	fmt.Fprintf(w, "  this machine: timers fired up to %.0f ms late at the 99th percentile (worst %.0f ms), the simulated jobs fell up to %.0f ms behind\n",
		p99, worst, behind)
	fmt.Fprintln(w, "  (a scenario that goes wrong while either is beyond a fifth of its step is reported NOT JUDGED: the machine's doing, not the job's)")
}

func verdict(r Result) string {
	switch {
	case r.OK:
		return "ok"
	case r.Unjudged != "":
		return "NOT JUDGED (" + r.Note + "): " + r.Unjudged
	}
	return "FAILED: " + r.Note
}

func culprit(cs []incident.Culprit) string {
	if len(cs) == 0 {
		return "-"
	}
	c := cs[0]
	s := c.Host
	if c.Rank >= 0 {
		s = fmt.Sprintf("rank %d %s", c.Rank, c.Host)
	}
	if c.Port != "" {
		s += " " + c.Port
	}
	if len(cs) > 1 {
		s += fmt.Sprintf(" +%d", len(cs)-1)
	}
	return s
}
