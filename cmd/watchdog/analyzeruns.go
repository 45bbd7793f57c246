package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ncclwatch/watchdog/analyze"
)

// analyzeRuns analyzes each path as a run of its own, writes each run's report, then the
// node parts that were roots in more than one run. The exit status is the worst run's
// (findings 1 over all-clear 0; input errors and too little to judge are said per run).
func analyzeRuns(ctx context.Context, paths []string, opts analyze.Options, asJSON, verbose bool, stdout, stderr io.Writer) int {
	var runs []analyze.Run
	code := 0
	for _, p := range paths {
		rep, err := analyze.Analyze(ctx, []string{p}, opts)
		if err != nil {
			fmt.Fprintf(stderr, "watchdog analyze: %s: %v\n", p, strings.TrimPrefix(err.Error(), analyze.ErrInput.Error()+": "))
			if ctx.Err() != nil {
				return analyze.ExitCannotJudge
			}
			code = max(code, analyze.ExitInput)
			continue
		}
		runs = append(runs, analyze.Run{Name: p, Report: rep})
		if rep.ExitCode == 1 || code == 0 {
			code = max(code, rep.ExitCode)
		}
	}
	if len(runs) == 0 {
		return analyze.ExitInput
	}
	recurring := analyze.Recurring(runs)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Runs      []analyze.Run           `json:"runs"`
			Recurring []analyze.RecurringPart `json:"recurring"`
		}{runs, recurring}); err != nil {
			fmt.Fprintf(stderr, "watchdog analyze: %v\n", err)
			return analyze.ExitInput
		}
		return code
	}
	for _, r := range runs {
		fmt.Fprintf(stdout, "=== run %s\n", r.Name)
		if err := r.Report.Write(stdout, verbose); err != nil {
			fmt.Fprintf(stderr, "watchdog analyze: %v\n", err)
			return analyze.ExitInput
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "Parts that were roots in more than one run (%d)\n", len(recurring))
	for i, rp := range recurring {
		causes := make([]string, len(rp.Causes))
		for k, c := range rp.Causes {
			causes[k] = string(c)
		}
		fmt.Fprintf(stdout, "  %d. %s: %d finding(s) in %d runs (%s)%s\n", i+1, printable(rp.Name), rp.Findings, len(rp.Runs),
			strings.Join(rp.Runs, ", "), map[bool]string{true: "; " + strings.Join(causes, ", "), false: ""}[len(causes) > 0])
	}
	if len(recurring) > 0 {
		fmt.Fprintln(stdout, "  (a bad part hurts every job placed on it: see docs/runbooks.md#node)")
	}
	return code
}
