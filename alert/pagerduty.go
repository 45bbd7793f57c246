package alert

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/PagerDuty/go-pagerduty"

	"github.com/ncclwatch/watchdog/incident"
)

// DefaultPagerDutyEventsURL is the Events API v2 host.
const DefaultPagerDutyEventsURL = "https://events.pagerduty.com"

// PagerDuty limits.
const (
	pdSummaryMax  = 1024
	pdMaxEvidence = 50
	pdMaxCulprits = 50
	pdLineMax     = 1000
)

// PagerDuty triggers an Events API v2 alert when an incident opens (dedup_key = incident
// id) and resolves it when the incident clears. Revisions of an open incident are not sent:
// one root cause is one page.
type PagerDuty struct {
	name       string
	client     *pagerduty.Client
	routingKey string
	links      Links
	redact     redactor
}

// PagerDutyOptions configure a PagerDuty notifier.
type PagerDutyOptions struct {
	// Name identifies the notifier in delivery state and metrics; default "pagerduty".
	Name       string
	Links      Links
	HTTPClient *http.Client
}

// NewPagerDuty returns a PagerDuty notifier. eventsURL is the Events API base (default
// https://events.pagerduty.com); a URL ending in /v2/enqueue is accepted too.
func NewPagerDuty(eventsURL, routingKey string, o PagerDutyOptions) (*PagerDuty, error) {
	if routingKey == "" {
		return nil, errors.New("pagerduty: empty routing key")
	}
	if eventsURL == "" {
		eventsURL = DefaultPagerDutyEventsURL
	}
	if err := checkURL(eventsURL); err != nil {
		return nil, fmt.Errorf("pagerduty events URL: %w", err)
	}
	eventsURL = strings.TrimSuffix(strings.TrimSuffix(eventsURL, "/"), "/v2/enqueue")
	if o.Name == "" {
		o.Name = "pagerduty"
	}
	c := pagerduty.NewClient("", pagerduty.WithV2EventsAPIEndpoint(eventsURL))
	c.HTTPClient = httpClient(o.HTTPClient)
	return &PagerDuty{
		name:       o.Name,
		client:     c,
		routingKey: routingKey,
		links:      o.Links,
		redact:     newRedactor(routingKey),
	}, nil
}

// Name implements Notifier.
func (p *PagerDuty) Name() string { return p.name }

// Accepts implements EventFilter: PagerDuty gets opens and resolves only.
func (p *PagerDuty) Accepts(ev Event) bool { return ev != EventUpdate }

// Notify implements Notifier: one event per incident, acknowledged one by one.
func (p *PagerDuty) Notify(ctx context.Context, batch ...*Notification) (bool, error) {
	for _, n := range batch {
		e := pagerDutyEvent(n.Incident, n.Event, p.routingKey, p.links)
		rctx, resp := withResponse(ctx)
		if _, err := p.client.ManageEventWithContext(rctx, &e); err != nil {
			retry, err := p.classify(err, resp)
			return retry, fmt.Errorf("pagerduty %s %s: %w", e.Action, n.Incident.ID, err)
		}
		n.Delivered(nil)
	}
	return false, nil
}

func (p *PagerDuty) classify(err error, resp *response) (bool, error) {
	var ae pagerduty.APIError
	if errors.As(err, &ae) {
		retry := ae.Temporary() || ae.StatusCode == http.StatusRequestTimeout
		if retry && resp.retryAfter > 0 {
			return true, p.redact.Error(&RetryAfterError{After: resp.retryAfter, Err: err})
		}
		return retry, p.redact.Error(err)
	}
	retry, err := classify(err, resp)
	return retry, p.redact.Error(err)
}

// pdSeverity maps our severities onto PagerDuty's critical/error/warning/info.
func pdSeverity(s incident.Severity) string {
	switch s {
	case incident.SeverityCritical:
		return "critical"
	case incident.SeverityWarning:
		return "warning"
	case incident.SeverityInfo:
		return "info"
	default:
		return "error"
	}
}

// pdDetails is the alert's custom_details.
type pdDetails struct {
	Incident   string                 `json:"incident"`
	Kind       incident.Kind          `json:"kind"`
	Job        string                 `json:"job"`
	Comm       string                 `json:"comm,omitempty"`
	Seq        int64                  `json:"seq,omitempty"`
	Culprits   []incident.Culprit     `json:"culprits"`
	Victims    int                    `json:"victims,omitempty"`
	Evidence   []string               `json:"evidence"`
	Ops        map[string]incident.Op `json:"ops,omitempty"`
	OpGroups   []incident.OpGroup     `json:"op_groups,omitempty"`
	Omitted    *incident.Omitted      `json:"omitted,omitempty"`
	LagSeconds float64                `json:"lag_seconds,omitempty"`
	OpenedAt   time.Time              `json:"opened_at"`
	FaultAt    *time.Time             `json:"fault_at,omitempty"`
	Revision   int                    `json:"revision"`
	More       string                 `json:"truncated,omitempty"`
}

// pagerDutyEvent builds the Events API v2 event for a notification.
func pagerDutyEvent(inc incident.Incident, ev Event, routingKey string, links Links) pagerduty.V2Event {
	if ev == EventResolve {
		return pagerduty.V2Event{RoutingKey: routingKey, Action: "resolve", DedupKey: inc.ID}
	}
	summary := "[" + string(inc.Severity) + "] " + kindTitle(inc.Kind) + " in job " + inc.Job
	if c := shortCulprit(inc); c != "" {
		summary += ": " + c
	}
	if inc.Summary != "" {
		summary += " — " + inc.Summary
	}
	source := "ncclwatch"
	if len(inc.Culprits) > 0 && inc.Culprits[0].Host != "" {
		source = inc.Culprits[0].Host
	} else if inc.Job != "" {
		source = "job " + inc.Job
	}
	d := pdDetails{
		Incident: inc.ID, Kind: inc.Kind, Job: inc.Job, Comm: inc.Comm, Seq: inc.Seq,
		Culprits: inc.Culprits, Victims: inc.Victims, Ops: inc.Ops, OpGroups: inc.OpGroups, Omitted: inc.Omitted, LagSeconds: inc.LagSeconds,
		OpenedAt: inc.OpenedAt.UTC(), Revision: inc.Revision, Evidence: []string{},
	}
	if d.Culprits == nil {
		d.Culprits = []incident.Culprit{}
	}
	var cut []string
	if len(d.Culprits) > pdMaxCulprits {
		cut = append(cut, fmt.Sprintf("%d culprits", len(d.Culprits)-pdMaxCulprits))
		d.Culprits = d.Culprits[:pdMaxCulprits]
	}
	for i, l := range inc.Evidence {
		if i == pdMaxEvidence {
			cut = append(cut, fmt.Sprintf("%d evidence lines", len(inc.Evidence)-i))
			break
		}
		d.Evidence = append(d.Evidence, truncate(oneLine(l), pdLineMax))
	}
	if len(cut) > 0 {
		d.More = "omitted " + strings.Join(cut, " and ")
	}
	if !inc.FaultAt.IsZero() {
		t := inc.FaultAt.UTC()
		d.FaultAt = &t
	}
	e := pagerduty.V2Event{
		RoutingKey: routingKey,
		Action:     "trigger",
		DedupKey:   inc.ID,
		Client:     "ncclwatch",
		Payload: &pagerduty.V2Payload{
			Summary:   truncate(oneLine(summary), pdSummaryMax),
			Source:    truncate(oneLine(source), 255),
			Severity:  pdSeverity(inc.Severity),
			Component: component(inc),
			Group:     inc.Job,
			Class:     string(inc.Kind),
			Details:   d,
		},
	}
	if !inc.OpenedAt.IsZero() {
		e.Payload.Timestamp = inc.OpenedAt.UTC().Format(time.RFC3339Nano)
	}
	if u := links.DashboardURL(inc.Job, inc.ID, inc.Kind); u != "" {
		e.ClientURL = u
		e.Links = append(e.Links, map[string]string{"href": u, "text": "Dashboard"})
	}
	if u := links.RunbookURL(inc.Kind); u != "" {
		e.Links = append(e.Links, map[string]string{"href": u, "text": "Runbook"})
	}
	return e
}

// component names the culprit's part: the GPU, the port, or the rank.
func component(inc incident.Incident) string {
	if len(inc.Culprits) == 0 {
		return ""
	}
	c := inc.Culprits[0]
	switch {
	case c.GPU != "":
		return "GPU " + c.GPU
	case c.Port != "":
		return "port " + c.Port
	case c.Rank >= 0:
		return fmt.Sprintf("rank %d", c.Rank)
	}
	return ""
}
