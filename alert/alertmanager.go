package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// amEvidenceMax caps the evidence annotation.
const amEvidenceMax = 4000

// Alertmanager pushes incidents to Prometheus Alertmanager's v2 API (POST /api/v2/alerts),
// so existing Alertmanager routes and silences apply to them.
type Alertmanager struct {
	name     string
	endpoint string
	ttl      time.Duration
	links    Links
	http     *http.Client
	clock    func() time.Time
	redact   redactor
}

// AlertmanagerOptions configure an Alertmanager notifier.
type AlertmanagerOptions struct {
	// Name identifies the notifier in delivery state and metrics; default "alertmanager".
	Name string
	// TTL is how long an open incident stays firing without a new push (endsAt = now+TTL);
	// default 24h. Alertmanager resolves alerts whose endsAt passed, so a dead watchdog's
	// alerts expire instead of firing forever.
	TTL        time.Duration
	Links      Links
	HTTPClient *http.Client
	// Now is the clock for endsAt; default time.Now.
	Now func() time.Time
}

// NewAlertmanager returns a notifier for the Alertmanager at baseURL (e.g.
// http://alertmanager:9093).
func NewAlertmanager(baseURL string, o AlertmanagerOptions) (*Alertmanager, error) {
	if err := checkURL(baseURL); err != nil {
		return nil, fmt.Errorf("alertmanager URL: %w", err)
	}
	if o.Name == "" {
		o.Name = "alertmanager"
	}
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Alertmanager{
		name:     o.Name,
		endpoint: strings.TrimSuffix(baseURL, "/") + "/api/v2/alerts",
		ttl:      o.TTL,
		links:    o.Links,
		http:     httpClient(o.HTTPClient),
		clock:    o.Now,
		redact:   newRedactor(baseURL),
	}, nil
}

// Name implements Notifier.
func (a *Alertmanager) Name() string { return a.name }

// amAlert is an alert of Alertmanager's v2 API (postableAlert).
type amAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// Notify implements Notifier: the whole batch is one POST.
func (a *Alertmanager) Notify(ctx context.Context, batch ...*Notification) (bool, error) {
	alerts := make([]amAlert, 0, len(batch))
	for _, n := range batch {
		alerts = append(alerts, a.alert(n.Incident, n.Event))
	}
	body, err := json.Marshal(alerts)
	if err != nil {
		return false, fmt.Errorf("alertmanager: encode alerts: %w", err)
	}
	ctx, resp := withResponse(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.endpoint, bytes.NewReader(body))
	if err != nil {
		return false, a.redact.Error(err)
	}
	req.Header.Set("Content-Type", "application/json")
	r, err := a.http.Do(req)
	if err != nil {
		retry, err := classify(err, resp)
		return retry, fmt.Errorf("alertmanager: %w", a.redact.Error(err))
	}
	defer r.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(r.Body, 512))
	if r.StatusCode/100 != 2 {
		retry, err := classify(fmt.Errorf("HTTP %s: %s", r.Status, strings.TrimSpace(string(msg))), resp)
		return retry, fmt.Errorf("alertmanager: %w", a.redact.Error(err))
	}
	return false, nil
}

func (a *Alertmanager) alert(inc incident.Incident, ev Event) amAlert {
	labels := map[string]string{
		"alertname": "NCCLWatchdogIncident",
		"kind":      string(inc.Kind),
		"severity":  string(inc.Severity),
		"job":       inc.Job,
		"incident":  inc.ID,
	}
	if len(inc.Culprits) > 0 {
		c := inc.Culprits[0]
		if c.Host != "" {
			labels["host"] = c.Host
		}
		if c.Rank >= 0 {
			labels["rank"] = strconv.Itoa(c.Rank)
		}
	}
	summary := kindTitle(inc.Kind)
	if c := shortCulprit(inc); c != "" {
		summary += ": " + c
	}
	if inc.Summary != "" {
		summary += " — " + inc.Summary
	}
	ann := map[string]string{
		"summary":  truncate(oneLine(summary), 1024),
		"evidence": truncate(strings.Join(inc.Evidence, "\n"), amEvidenceMax),
	}
	if u := a.links.DashboardURL(inc.Job, inc.ID, inc.Kind); u != "" {
		ann["dashboard"] = u
	}
	if u := a.links.RunbookURL(inc.Kind); u != "" {
		ann["runbook_url"] = u
	}
	out := amAlert{Labels: labels, Annotations: ann, StartsAt: inc.OpenedAt.UTC(), GeneratorURL: a.links.DashboardURL(inc.Job, inc.ID, inc.Kind)}
	if ev == EventResolve {
		out.EndsAt = a.clock().UTC()
		if inc.ResolvedAt != nil {
			out.EndsAt = inc.ResolvedAt.UTC()
		}
	} else {
		out.EndsAt = a.clock().Add(a.ttl).UTC()
	}
	return out
}
