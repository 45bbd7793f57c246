package alert

import (
	"fmt"
	"path"
	"slices"

	"github.com/ncclwatch/watchdog/incident"
)

// Route sends matching incidents to notifiers. Every route whose matchers all match
// applies (empty matchers match everything) until one with Stop matches.
type Route struct {
	Severities []incident.Severity
	Kinds      []incident.Kind
	// Jobs are path.Match patterns, e.g. "llama-*".
	Jobs      []string
	Notifiers []string
	Stop      bool
}

// Matches says whether inc satisfies every matcher of r.
func (r Route) Matches(inc incident.Incident) bool {
	if len(r.Severities) > 0 && !slices.Contains(r.Severities, inc.Severity) {
		return false
	}
	if len(r.Kinds) > 0 && !slices.Contains(r.Kinds, inc.Kind) {
		return false
	}
	if len(r.Jobs) == 0 {
		return true
	}
	for _, p := range r.Jobs {
		if ok, _ := path.Match(p, inc.Job); ok {
			return true
		}
	}
	return false
}

func (r Route) validate(known map[string]bool) error {
	for _, p := range r.Jobs {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("job pattern %q: %w", p, err)
		}
	}
	if len(r.Notifiers) == 0 {
		return fmt.Errorf("route names no notifier")
	}
	for _, n := range r.Notifiers {
		if !known[n] {
			return fmt.Errorf("route names unknown notifier %q", n)
		}
	}
	return nil
}

// routeTargets returns the notifiers an incident goes to; nil routes send everything
// everywhere.
func routeTargets(routes []Route, inc incident.Incident) map[string]bool {
	out := map[string]bool{}
	for _, r := range routes {
		if !r.Matches(inc) {
			continue
		}
		for _, n := range r.Notifiers {
			out[n] = true
		}
		if r.Stop {
			break
		}
	}
	return out
}
