// Package deploy holds what ships the watchdog into Kubernetes, Slurm and a monitoring
// stack (Helm chart, systemd units, Slurm scripts, Grafana dashboards, Prometheus rules),
// and the helpers its tests use to check those files against the metrics the binaries
// really export: the metric names a PromQL expression selects, and loaders for dashboards
// and rules.
package deploy

import (
	"fmt"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// promql parses as a Prometheus server does by default: experimental functions are off
// there too, so a dashboard that needs them fails here first.
var promql = parser.NewParser(parser.Options{})

// MetricNames returns the metric names an expression selects, in order of first use, as
// Prometheus's own parser reads it. Grafana's variables are expanded first (Expand), so
// a dashboard query parses as Grafana sends it. A selector {__name__="x"} names x; one
// that matches names by a regular expression names none.
func MetricNames(expr string) ([]string, error) {
	ast, err := promql.ParseExpr(Expand(expr, "1m"))
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	var out []string
	seen := map[string]bool{}
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if name == "" && m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
		return nil
	})
	return out, nil
}
