package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ncclwatch/watchdog/internal/demo"
)

// exitNotJudged: no scenario failed, but some ran on a machine too slow to judge them.
const exitNotJudged = 3

func runDemo(ctx context.Context, args []string) error {
	fs := newFlags("demo", `usage: watchdog demo [flags]

Everything on one machine: an embedded etcd, simulated training jobs with scripted faults
(one sidecar per simulated node), the detector and a console notifier that tells the story;
then a summary of what was detected, how fast, and which real notifiers failed to deliver.
While it runs, the detector's API, /metrics and /healthz are served on --http (watchdog
status can watch it); --stay keeps them up after the summary.`)
	fs.exits = `Exit status:
  0  every scenario went as it must
  1  a scenario failed (the summary says which and why), or a real notifier failed to deliver
  2  usage error
  3  no scenario failed, but some could not be judged: this machine was too slow for them
     (timers ran later than the scenario stands; the summary says how late)
`
	scenario := fs.String("scenario", "all", "healthy|silent|crash|mismatch|straggler|degraded-link|stuck-in-flight|pause|all (comma-separated list too)")
	asJSON := fs.Bool("json", false, "print the results as JSON only")
	nodes := fs.Int("nodes", 4, "simulated nodes per job")
	ranks := fs.Int("ranks-per-node", 8, "ranks (GPUs) per node")
	slackWebhook := fs.String("slack-webhook", "", "also post incidents to this Slack incoming-webhook URL")
	slackAPI := fs.String("slack-api-url", "", "also post to this Slack API base URL with a bot token (SLACK_TOKEN or SLACK_TOKEN_FILE, SLACK_CHANNEL)")
	pagerduty := fs.String("pagerduty-url", "", "also send PagerDuty Events v2 to this URL (PAGERDUTY_ROUTING_KEY or PAGERDUTY_ROUTING_KEY_FILE)")
	httpAddr := fs.String("http", "127.0.0.1:9300", "serve the detector's API, /metrics and /healthz here while the demo runs (empty: off; in use: a free port)")
	stay := fs.Bool("stay", false, "keep the detector and --http up after the summary, until interrupted")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := errors.Join(positiveInt("nodes", *nodes), positiveInt("ranks-per-node", *ranks)); err != nil {
		return err
	}
	var names []string
	for _, s := range splitList(*scenario) {
		if s == "all" {
			names = append(names, demo.AllScenarios...)
		} else {
			names = append(names, s)
		}
	}
	var out io.Writer = os.Stdout
	if *asJSON {
		out = io.Discard
	}
	results, err := demo.Run(ctx, demo.Options{Scenarios: names, Nodes: *nodes, RanksPerNode: *ranks, Out: out,
		Notify: demo.Notifiers{SlackWebhook: *slackWebhook, SlackAPIURL: *slackAPI, PagerDutyURL: *pagerduty},
		HTTP:   *httpAddr, Stay: *stay, Program: os.Args[0]})
	if results == nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		var v any = results
		if len(results) == 1 && !strings.Contains(*scenario, "all") && !strings.Contains(*scenario, ",") {
			v = results[0]
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	var notJudged []string
	for _, r := range results {
		switch {
		case r.OK:
		case r.Unjudged != "":
			notJudged = append(notJudged, r.Scenario)
		default:
			err = errors.Join(err, fmt.Errorf("scenario %s: %s", r.Scenario, r.Note))
		}
	}
	if err == nil && len(notJudged) > 0 {
		return exitCodeError{code: exitNotJudged, err: fmt.Errorf("scenario(s) %s not judged: this machine was too slow for them (the summary says how late its timers ran)",
			strings.Join(notJudged, ", "))}
	}
	return err // failed scenarios, and real notifiers that failed to deliver
}
