package alert

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
)

// Links are the URLs a notification points to, from configuration.
type Links struct {
	// Dashboard is a URL template; {job}, {incident} and {kind} are replaced by the
	// query-escaped values, e.g. "https://grafana/d/nccl?var-job={job}&var-incident={incident}".
	Dashboard string
	// Runbooks maps a kind to its runbook URL.
	Runbooks map[incident.Kind]string
	// DefaultRunbook is used for kinds without their own runbook.
	DefaultRunbook string
}

// Validate checks that every link is an absolute http(s) URL that cannot break out of a
// Slack link (<url|text>).
func (l Links) Validate() error {
	check := func(what, u string) error {
		if u == "" {
			return nil
		}
		if strings.ContainsAny(u, "<>| \t\r\n\"") {
			return fmt.Errorf("%s link %q: must not contain <, >, |, quotes or spaces", what, u)
		}
		p, err := url.Parse(strings.NewReplacer("{job}", "x", "{incident}", "x", "{kind}", "x").Replace(u))
		if err != nil {
			return fmt.Errorf("%s link %q: %w", what, u, err)
		}
		if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("%s link %q: want an absolute http(s) URL", what, u)
		}
		return nil
	}
	if err := check("dashboard", l.Dashboard); err != nil {
		return err
	}
	if err := check("default runbook", l.DefaultRunbook); err != nil {
		return err
	}
	for k, u := range l.Runbooks {
		if err := check("runbook "+string(k), u); err != nil {
			return err
		}
	}
	return nil
}

// DashboardURL fills the dashboard template for an incident ("" without a template).
func (l Links) DashboardURL(job, incidentID string, kind incident.Kind) string {
	if l.Dashboard == "" {
		return ""
	}
	return strings.NewReplacer(
		"{job}", url.QueryEscape(job),
		"{incident}", url.QueryEscape(incidentID),
		"{kind}", url.QueryEscape(string(kind)),
	).Replace(l.Dashboard)
}

// RunbookURL returns the runbook of a kind ("" when none is configured).
func (l Links) RunbookURL(kind incident.Kind) string {
	if u, ok := l.Runbooks[kind]; ok {
		return u
	}
	return l.DefaultRunbook
}
