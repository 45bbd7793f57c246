package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/ncclwatch/watchdog/detect/fleet"
	"github.com/ncclwatch/watchdog/incident"
)

// renderNodes writes the fleet view: open node incidents with their actions, then the
// nodes ranked by lost job time, at most top of them.
func renderNodes(ctx context.Context, c *http.Client, base string, top, cols int, w io.Writer) error {
	var v fleet.View
	if err := getJSON(ctx, c, fmt.Sprintf("%s/api/v1/nodes?limit=%d", base, top), &v); err != nil {
		return err
	}
	fmt.Fprintf(w, "ncclwatch fleet  %s  detector %s\n", time.Now().UTC().Format("15:04:05Z"), base)
	writeWrapped(w, fmt.Sprintf("last %s: %.0f job-hours in %d jobs, %d roots on node parts, %s of job time lost",
		shortDuration(v.Window), v.ExposureHours, v.Jobs, v.Roots, v.Lost.Round(time.Second)), "", cols)
	open := 0
	for _, ni := range v.Incidents {
		if ni.Incident.State != incident.StateOpen {
			continue
		}
		if open == 0 {
			fmt.Fprintln(w, "\nNODE INCIDENTS")
		}
		open++
		writeWrapped(w, printable(fmt.Sprintf("[%s] %s (%s, opened %s)", ni.Incident.Severity, ni.Incident.Summary, ni.Incident.ID,
			ni.Incident.OpenedAt.UTC().Format("2006-01-02 15:04Z"))), "  ", cols)
		for _, a := range ni.Actions {
			if len(a.Command) > 0 {
				writeWrapped(w, printable(a.System+" "+a.What+": "+strings.Join(a.Command, " ")), "    ", cols)
			}
		}
	}
	if len(v.Nodes) == 0 {
		fmt.Fprintln(w, "\nno roots and no exposure booked yet")
		return nil
	}
	fmt.Fprintf(w, "\n%-24s %10s %6s %5s %10s %11s  %s\n", "NODE", "LOST", "ROOTS", "JOBS", "JOB-HOURS", "ROOTS/100h", "WORST PART")
	for _, n := range v.Nodes {
		worst := "-"
		if len(n.Parts) > 0 {
			p := n.Parts[0]
			worst = fmt.Sprintf("%s (%d roots in %d jobs)", p.Part.String(), p.Roots, len(p.Jobs))
		}
		line := fmt.Sprintf("%-24s %10s %6d %5d %10.1f %11.2f  %s", shorten(n.Node, 24), n.Lost.Round(time.Second), n.Roots, n.Jobs,
			n.ExposureHours, n.RootsPer100JobHours, worst)
		fmt.Fprintln(w, shorten(printable(line), max(cols, 60)))
	}
	return nil
}

func shortDuration(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// printable keeps what a terminal shows as text: node names and summaries come from the
// jobs' logs, and an escape sequence in them must not drive the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) || r == ' ' {
			return r
		}
		return '?'
	}, s)
}
