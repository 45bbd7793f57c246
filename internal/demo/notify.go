package demo

import (
	"errors"
	"os"

	"github.com/ncclwatch/watchdog/alert"
)

// Notifiers are real notifiers that get the demo's incidents too (`watchdog demo
// --slack-webhook, --slack-api-url, --pagerduty-url`). They are built from an alert.Config,
// as the detector's are: the bot token comes from SLACK_TOKEN or the file SLACK_TOKEN_FILE
// names, the routing key from PAGERDUTY_ROUTING_KEY or PAGERDUTY_ROUTING_KEY_FILE. Each is
// named after its flag.
type Notifiers struct {
	// SlackWebhook is a Slack incoming-webhook URL.
	SlackWebhook string
	// SlackAPIURL is a Slack API base URL for a bot token, posting to SLACK_CHANNEL
	// (default #ncclwatch-demo).
	SlackAPIURL string
	// PagerDutyURL is a PagerDuty Events API v2 URL.
	PagerDutyURL string
	// LookupEnv and ReadFile default to os.LookupEnv and os.ReadFile.
	LookupEnv func(string) (string, bool)
	ReadFile  func(string) ([]byte, error)
}

// config returns the alert configuration of n and where its secrets come from. It builds
// the notifiers once, so that a missing secret stops the demo before it starts.
func (n Notifiers) config() (*alert.Config, alert.BuildOptions, error) {
	lookup := n.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	b := alert.BuildOptions{ReadFile: n.ReadFile, LookupEnv: func(name string) (string, bool) {
		// The demo posts to no webhook but the one it is given: SLACK_WEBHOOK_URL is the
		// detector's, and a bot without a token must not fall back to it.
		if name == "SLACK_WEBHOOK_URL" || name == "SLACK_WEBHOOK_URL_FILE" {
			return "", false
		}
		return lookup(name)
	}}
	// Not nil, even with no notifier: a nil configuration is alert.FromEnv's, whose
	// notifiers page people.
	c := &alert.Config{}
	if n.SlackWebhook != "" {
		c.Notifiers = append(c.Notifiers, alert.NotifierConfig{Name: "slack-webhook", Type: "slack", WebhookURL: n.SlackWebhook})
	}
	if n.SlackAPIURL != "" {
		token, _ := lookup("SLACK_TOKEN")
		file, _ := lookup("SLACK_TOKEN_FILE")
		if token == "" && file == "" {
			// Said here: the builder would also name SLACK_WEBHOOK_URL, which the demo ignores.
			return nil, b, errors.New("--slack-api-url needs SLACK_TOKEN or SLACK_TOKEN_FILE in the environment")
		}
		channel, _ := lookup("SLACK_CHANNEL")
		if channel == "" {
			channel = "#ncclwatch-demo"
		}
		c.Notifiers = append(c.Notifiers, alert.NotifierConfig{Name: "slack-api-url", Type: "slack", APIURL: n.SlackAPIURL, Channel: channel})
	}
	if n.PagerDutyURL != "" {
		c.Notifiers = append(c.Notifiers, alert.NotifierConfig{Name: "pagerduty-url", Type: "pagerduty", EventsURL: n.PagerDutyURL})
	}
	if err := c.Validate(); err != nil {
		return nil, b, err
	}
	if _, err := c.Targets(b); err != nil {
		return nil, b, err
	}
	return c, b, nil
}
