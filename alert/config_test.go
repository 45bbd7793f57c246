package alert

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadExampleConfig(t *testing.T) {
	c, err := LoadConfig(filepath.Join("testdata", "alert.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "pd-key")
	if err := os.WriteFile(keyFile, []byte(testRoutingKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var console bytes.Buffer
	targets, err := c.Targets(BuildOptions{
		LookupEnv: envOf(map[string]string{
			"SLACK_TOKEN":                "xoxb-from-env",
			"PAGERDUTY_ROUTING_KEY_FILE": keyFile,
			"NCCLWATCH_WEBHOOK_SECRET":   "s",
		}),
		Console: &console,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Target{}
	for _, tg := range targets {
		got[tg.Notifier.Name()] = tg
	}
	if s, ok := got["slack-oncall"].Notifier.(*Slack); !ok || s.api == nil || s.channel != "#gpu-oncall" {
		t.Errorf("slack-oncall: want bot mode on #gpu-oncall, got %+v", got["slack-oncall"].Notifier)
	}
	if p, ok := got["pagerduty"].Notifier.(*PagerDuty); !ok || p.routingKey != testRoutingKey {
		t.Errorf("pagerduty: routing key not read from PAGERDUTY_ROUTING_KEY_FILE")
	}
	if s := got["slack-oncall"].Settings; s.GroupWait != 3*time.Second || s.RateEvery != time.Second || s.RateBurst != 3 {
		t.Errorf("slack settings %+v", s)
	}
	if s := got["pagerduty"].Settings; s.GroupWait != 500*time.Millisecond || s.RateEvery != 0 {
		t.Errorf("pagerduty settings %+v", s)
	}
	if s := got["console"].Settings; s.GroupWait != 0 {
		t.Errorf("console should not group: %+v", s)
	}
	routes := c.routes()
	crit := sampleMismatch()
	warn := crit
	warn.Severity = incident.SeverityWarning
	if r := routeTargets(routes, crit); !r["pagerduty"] || !r["slack-oncall"] || !r["console"] {
		t.Errorf("critical mismatch routes to %v", r)
	}
	if r := routeTargets(routes, warn); r["pagerduty"] || !r["slack-oncall"] {
		t.Errorf("warning routes to %v", r)
	}
	other := crit
	other.Job = "bert-finetune"
	if r := routeTargets(routes, other); r["pagerduty"] {
		t.Errorf("job pattern ignored: %v", r)
	}
	if _, err := New(c, BuildOptions{LookupEnv: envOf(map[string]string{"SLACK_TOKEN": "x", "PAGERDUTY_ROUTING_KEY": "k", "NCCLWATCH_WEBHOOK_SECRET": "s"})}, Options{Store: NewEtcdStore(testEtcd(t), EtcdStoreOptions{})}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigRejects(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"secret value in yaml": {`
notifiers:
  - name: slack
    type: slack
    webhook_url: https://hooks.slack.com/services/T/B/secret
`, "field webhook_url not found"},
		"routing key in yaml": {`
notifiers:
  - {name: pd, type: pagerduty, routing_key: abc}
`, "field routing_key not found"},
		"unknown type":     {"notifiers: [{name: x, type: email}]", `unknown type "email"`},
		"duplicate":        {"notifiers: [{name: x, type: console}, {name: x, type: console}]", "defined twice"},
		"bad name":         {"notifiers: [{name: a/b, type: console}]", "name wants"},
		"route to nothing": {"notifiers: [{name: x, type: console}]\nroutes: [{notifiers: [y]}]", `unknown notifier "y"`},
		"bad glob":         {"notifiers: [{name: x, type: console}]\nroutes: [{match: {job: ['[']}, notifiers: [x]}]", "job pattern"},
		"link injection":   {"links: {dashboard: 'https://g/d?job={job}|<!channel>'}", "must not contain"},
		"relative link":    {"links: {runbooks: {hang: '/wiki/hang'}}", "absolute"},
		"bad duration":     {"defaults: {group_wait: soon}", "time.Duration"},
	} {
		_, err := ParseConfig([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
	}
}

func TestMissingSecretsNamed(t *testing.T) {
	c, err := ParseConfig([]byte("notifiers: [{name: pd, type: pagerduty}, {name: slack, type: slack}]"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Targets(BuildOptions{LookupEnv: envOf(nil)})
	if err == nil || !strings.Contains(err.Error(), "PAGERDUTY_ROUTING_KEY") {
		t.Errorf("err %v should name the variable", err)
	}
	_, err = c.Targets(BuildOptions{LookupEnv: envOf(map[string]string{"PAGERDUTY_ROUTING_KEY": "k"})})
	if err == nil || !strings.Contains(err.Error(), "SLACK_WEBHOOK_URL") {
		t.Errorf("err %v should name the variable", err)
	}
	_, err = c.Targets(BuildOptions{LookupEnv: envOf(map[string]string{"PAGERDUTY_ROUTING_KEY_FILE": "/nonexistent/key", "SLACK_WEBHOOK_URL": "http://x/y"})})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/key") {
		t.Errorf("err %v should name the file", err)
	}
	_, err = c.Targets(BuildOptions{LookupEnv: envOf(map[string]string{"PAGERDUTY_ROUTING_KEY": "k", "SLACK_WEBHOOK_URL": "hooks.slack.com/services/SECRET"})})
	if err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("err %v must not quote the bad webhook URL", err)
	}
}

func TestFromEnv(t *testing.T) {
	if c := fromEnv(envOf(nil)); len(c.Notifiers) != 0 {
		t.Errorf("no env, notifiers %+v", c.Notifiers)
	}
	c := fromEnv(envOf(map[string]string{
		"SLACK_TOKEN_FILE": "/run/secrets/slack", "SLACK_CHANNEL": "#gpu",
		"PAGERDUTY_ROUTING_KEY": "k", "NCCLWATCH_DASHBOARD_URL": "https://g/d?job={job}",
	}))
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Notifiers) != 2 || c.Notifiers[0].Channel != "#gpu" || c.Notifiers[1].Type != "pagerduty" || c.Links.Dashboard == "" {
		t.Errorf("config %+v", c)
	}
	warn := sampleMismatch()
	warn.Severity = incident.SeverityWarning
	if r := routeTargets(c.routes(), warn); !r["slack"] || r["pagerduty"] {
		t.Errorf("warnings page nobody but reach Slack: %v", r)
	}
	if c := fromEnv(envOf(map[string]string{"SLACK_WEBHOOK_URL": "https://h/x"})); len(c.Notifiers) != 1 || c.Notifiers[0].Channel != "" {
		t.Errorf("webhook from env: %+v", c.Notifiers)
	}
}

// TestWebhookURLFromProgram: a webhook URL a program was given comes before the
// environment, and YAML cannot set it.
func TestWebhookURLFromProgram(t *testing.T) {
	c := &Config{Notifiers: []NotifierConfig{{Name: "slack", Type: "slack", WebhookURL: "https://hooks.example.com/given"}}}
	targets, err := c.Targets(BuildOptions{LookupEnv: envOf(map[string]string{"SLACK_WEBHOOK_URL": "https://hooks.example.com/env"})})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := targets[0].Notifier.(*Slack); !ok || s.webhookURL != "https://hooks.example.com/given" {
		t.Errorf("webhook notifier %+v, want the given URL", targets[0].Notifier)
	}
	if _, err := ParseConfig([]byte("notifiers: [{name: s, type: slack, webhookurl: https://hooks.example.com/x}]")); err == nil {
		t.Error("YAML set the program-given webhook URL")
	}
}

// TestNewWithExtraTargets: New adds the caller's own targets beside the configuration's,
// under the same rule of unique names.
func TestNewWithExtraTargets(t *testing.T) {
	store := NewEtcdStore(testEtcd(t), EtcdStoreOptions{})
	c := &Config{Notifiers: []NotifierConfig{{Name: "console", Type: "console"}}}
	b := BuildOptions{Console: &bytes.Buffer{}}
	story := NewConsole(&bytes.Buffer{})
	story.name = "story"
	d, err := New(c, b, Options{Store: store, Logger: quietLogger()}, Target{Notifier: story, Settings: DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range d.workers {
		names = append(names, w.name)
	}
	if strings.Join(names, ",") != "story,console" {
		t.Errorf("notifiers %v, want the extra story and the configured console", names)
	}
	if _, err := New(c, b, Options{Store: store, Logger: quietLogger()}, Target{Notifier: NewConsole(&bytes.Buffer{})}); err == nil {
		t.Error("an extra target named like a configured notifier was accepted")
	}
}
