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

func runDemo(ctx context.Context, args []string) error {
	fs := newFlags("demo", `usage: watchdog demo [flags]

Everything on one machine: an embedded etcd, simulated training jobs with scripted faults
(one sidecar per simulated node), the detector and a console notifier that tells the story;
then a summary of what was detected, how fast, and which real notifiers failed to deliver.`)
	scenario := fs.String("scenario", "all", "healthy|silent|crash|mismatch|straggler|degraded-link|stuck-in-flight|pause|all (comma-separated list too)")
	asJSON := fs.Bool("json", false, "print the results as JSON only")
	nodes := fs.Int("nodes", 4, "simulated nodes per job")
	ranks := fs.Int("ranks-per-node", 8, "ranks (GPUs) per node")
	slackWebhook := fs.String("slack-webhook", "", "also post incidents to this Slack incoming-webhook URL")
	slackAPI := fs.String("slack-api-url", "", "also post to this Slack API base URL with a bot token (SLACK_TOKEN or SLACK_TOKEN_FILE, SLACK_CHANNEL)")
	pagerduty := fs.String("pagerduty-url", "", "also send PagerDuty Events v2 to this URL (PAGERDUTY_ROUTING_KEY or PAGERDUTY_ROUTING_KEY_FILE)")
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
		Notify: demo.Notifiers{SlackWebhook: *slackWebhook, SlackAPIURL: *slackAPI, PagerDutyURL: *pagerduty}})
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
	for _, r := range results {
		if !r.OK {
			err = errors.Join(err, fmt.Errorf("scenario %s: %s", r.Scenario, r.Note))
		}
	}
	return err // failed scenarios, and real notifiers that failed to deliver
}
