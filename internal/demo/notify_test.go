package demo

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// env is an environment for Notifiers.LookupEnv.
type env map[string]string

func (e env) lookup(name string) (string, bool) {
	v, ok := e[name]
	return v, ok
}

// TestNotifiers: the demo's --slack-webhook, --slack-api-url and --pagerduty-url build
// their notifiers through alert.Config, so the *_FILE secrets work as in the detector; a
// missing secret stops the demo, a bot never falls back to SLACK_WEBHOOK_URL, and without
// a flag nothing but the console gets incidents, whatever the environment says.
func TestNotifiers(t *testing.T) {
	dir := t.TempDir()
	tokenFile, keyFile := filepath.Join(dir, "token"), filepath.Join(dir, "key")
	for f, v := range map[string]string{tokenFile: "xoxb-file\n", keyFile: "0123456789abcdef0123456789abcdef\n"} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	all := Notifiers{SlackWebhook: "https://hooks.example.com/services/T/B/x", SlackAPIURL: "http://127.0.0.1:1/api/",
		PagerDutyURL: "http://127.0.0.1:1/v2/enqueue"}
	files := env{"SLACK_TOKEN_FILE": tokenFile, "PAGERDUTY_ROUTING_KEY_FILE": keyFile}

	n := all
	n.LookupEnv = files.lookup
	c, b, err := n.config()
	if err != nil {
		t.Fatalf("secrets from *_FILE: %v", err)
	}
	targets, err := c.Targets(b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tg := range targets {
		names = append(names, tg.Notifier.Name())
	}
	if got := strings.Join(names, ","); got != "slack-webhook,slack-api-url,pagerduty-url" {
		t.Errorf("notifiers %s", got)
	}

	for _, tc := range []struct {
		name string
		n    Notifiers
		env  env
		want string
	}{
		{"no token", Notifiers{SlackAPIURL: all.SlackAPIURL}, env{"SLACK_WEBHOOK_URL": "https://hooks.example.com/env"}, "SLACK_TOKEN"},
		{"no routing key", Notifiers{PagerDutyURL: all.PagerDutyURL}, nil, "PAGERDUTY_ROUTING_KEY"},
	} {
		tc.n.LookupEnv = tc.env.lookup
		if _, _, err := tc.n.config(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one naming %s", tc.name, err, tc.want)
		}
	}

	none := Notifiers{LookupEnv: env{"SLACK_WEBHOOK_URL": "https://hooks.example.com/env", "PAGERDUTY_ROUTING_KEY": "k"}.lookup}
	c, _, err = none.config()
	if err != nil || c == nil || len(c.Notifiers) != 0 {
		t.Errorf("no flag: config %+v, %v; want no notifier", c, err)
	}
}

// TestFailedDeliveriesReported: a real notifier that refuses every message (here a Slack
// webhook answering 500 over real HTTP) is reported as it fails and in the summary, and the
// run returns an error naming it; the scenario's own result stands.
func TestFailedDeliveriesReported(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a simulated job")
	}
	var calls atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "no_service", http.StatusInternalServerError)
	}))
	defer hook.Close()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results, err := Run(ctx, Options{Scenarios: []string{"mismatch"}, Nodes: 2, RanksPerNode: 2, Out: &out,
		Notify: Notifiers{SlackWebhook: hook.URL, LookupEnv: env{}.lookup}})
	if len(results) != 1 || !results[0].OK {
		t.Fatalf("results %+v", results)
	}
	if err == nil || !strings.Contains(err.Error(), "slack-webhook") {
		t.Errorf("error %v, want one naming slack-webhook", err)
	}
	if calls.Load() == 0 {
		t.Error("the webhook was never called")
	}
	for _, want := range []string{"! delivery to slack-webhook failed", "Deliveries", "slack-webhook    0 delivered"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
