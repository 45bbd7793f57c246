package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/internal/demo"
)

func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	scenario := fs.String("scenario", "all", "healthy|silent|crash|mismatch|straggler|degraded-link|stuck-in-flight|pause|all (comma-separated list too)")
	asJSON := fs.Bool("json", false, "print the results as JSON only")
	nodes := fs.Int("nodes", 4, "simulated nodes per job")
	ranks := fs.Int("ranks-per-node", 8, "ranks (GPUs) per node")
	slackWebhook := fs.String("slack-webhook", "", "also post incidents to this Slack incoming-webhook URL")
	slackAPI := fs.String("slack-api-url", "", "also post to this Slack API base URL with a bot token (SLACK_TOKEN, SLACK_CHANNEL)")
	pagerduty := fs.String("pagerduty-url", "", "also send PagerDuty Events v2 to this URL (PAGERDUTY_ROUTING_KEY)")
	if err := fs.Parse(args); err != nil {
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
	var targets []alert.Target
	if *slackWebhook != "" {
		n, err := alert.NewSlackWebhook(*slackWebhook, alert.SlackOptions{})
		if err != nil {
			return err
		}
		targets = append(targets, alert.Target{Notifier: n, Settings: alert.DefaultSettings()})
	}
	if *slackAPI != "" {
		token, channel := os.Getenv("SLACK_TOKEN"), os.Getenv("SLACK_CHANNEL")
		if token == "" {
			return fmt.Errorf("--slack-api-url needs SLACK_TOKEN in the environment")
		}
		if channel == "" {
			channel = "#ncclwatch-demo"
		}
		n, err := alert.NewSlackBot(*slackAPI, token, channel, alert.SlackOptions{})
		if err != nil {
			return err
		}
		targets = append(targets, alert.Target{Notifier: n, Settings: alert.DefaultSettings()})
	}
	if *pagerduty != "" {
		key := os.Getenv("PAGERDUTY_ROUTING_KEY")
		if key == "" {
			return fmt.Errorf("--pagerduty-url needs PAGERDUTY_ROUTING_KEY in the environment")
		}
		n, err := alert.NewPagerDuty(*pagerduty, key, alert.PagerDutyOptions{})
		if err != nil {
			return err
		}
		targets = append(targets, alert.Target{Notifier: n, Settings: alert.DefaultSettings()})
	}
	var out io.Writer = os.Stdout
	if *asJSON {
		out = io.Discard
	}
	results, err := demo.Run(ctx, demo.Options{Scenarios: names, Nodes: *nodes, RanksPerNode: *ranks, Out: out, Targets: targets})
	if err != nil {
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
			return fmt.Errorf("scenario %s: %s", r.Scenario, r.Note)
		}
	}
	return nil
}
