package doctor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/incident/seal"
)

// Alerts checks an alert configuration: valid, with notifiers, each of which can be built
// with the secrets this environment (b) gives. Nothing is sent.
func Alerts(cfg *alert.Config, source string, b alert.BuildOptions) []Result {
	if err := cfg.Validate(); err != nil {
		return []Result{problem("alerts", Fail, fmt.Sprintf("%s is invalid: %v", source, err),
			"fix the configuration (docs/configuration.md#alerts)")}
	}
	if len(cfg.Notifiers) == 0 {
		return []Result{problem("alerts", Warn, source+" has no notifier: incidents open in etcd and the API, but nobody is paged",
			"set SLACK_WEBHOOK_URL, or SLACK_TOKEN and SLACK_CHANNEL, or PAGERDUTY_ROUTING_KEY (or their *_FILE twins), or give --alerts FILE")}
	}
	h, err := alert.NewHealth(cfg, b, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return []Result{problem("alerts", Fail, err.Error(), "")}
	}
	unbuilt := map[string]string{}
	if err := h.Ready(); err != nil {
		for _, l := range strings.Split(err.Error(), "\n") {
			for _, n := range cfg.Notifiers {
				if strings.Contains(l, fmt.Sprintf("%q", n.Name)) {
					unbuilt[n.Name] = l
				}
			}
		}
	}
	var out []Result
	for _, n := range cfg.Notifiers {
		if why, bad := unbuilt[n.Name]; bad {
			out = append(out, problem("alerts", Fail, why+" (the detector would not be ready, and nothing reaches it)",
				"give the notifier its secret: the variable or file the message names (Kubernetes: the Secret of detector.secretEnv)"))
			continue
		}
		out = append(out, ok("alerts", "notifier %q (%s) builds from %s", n.Name, n.Type, source))
	}
	return out
}

// IncidentKeys checks the file of keys that seal the stored incidents (incident_key_file):
// readable, with a valid first key.
func IncidentKeys(ctx context.Context, path string) []Result {
	if _, err := seal.FileKeys(path)(ctx); err != nil {
		return []Result{problem("keys", Fail, fmt.Sprintf("incident_key_file: %v", err),
			"create it as docs/security.md says (one key a line, the first signs), readable by the detector's user only")}
	}
	return []Result{ok("keys", "incident_key_file %s holds a sealing key", path)}
}
