package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Query is one PromQL expression shipped in a dashboard or a rule file.
type Query struct {
	// Source names where it is: "ncclwatch-job.json: panel \"Open incidents\" A",
	// "ncclwatch-rules.yaml: alert NcclwatchSidecarDown".
	Source string
	Expr   string
	// Variable is true for a dashboard variable's label_values(...) selector.
	Variable bool
}

// dashboard is the part of a Grafana dashboard JSON that holds queries.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// DashboardQueries reads every *.json dashboard in dir and returns its panel queries and
// its query variables' selectors, dashboard by dashboard in file-name order.
func DashboardQueries(dir string) ([]Query, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Query
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		base := filepath.Base(f)
		var walk func(ps []panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				for _, t := range p.Targets {
					if strings.TrimSpace(t.Expr) == "" {
						continue
					}
					out = append(out, Query{Source: fmt.Sprintf("%s: panel %q %s", base, p.Title, t.RefID), Expr: t.Expr})
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			q, err := variableQuery(v.Query)
			if err != nil {
				return nil, fmt.Errorf("%s: variable %s: %w", f, v.Name, err)
			}
			if sel := labelValuesSelector(q); sel != "" {
				out = append(out, Query{Source: fmt.Sprintf("%s: variable %s", base, v.Name), Expr: sel, Variable: true})
			}
		}
	}
	return out, nil
}

// variableQuery accepts both forms Grafana writes: a string, or {"query": "..."}.
func variableQuery(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", err
	}
	return o.Query, nil
}

// labelValuesSelector returns the selector of label_values(selector, label) ("" for
// label_values(label) or other variable queries).
func labelValuesSelector(q string) string {
	q = strings.TrimSpace(q)
	const fn = "label_values("
	if !strings.HasPrefix(q, fn) || !strings.HasSuffix(q, ")") {
		return ""
	}
	args := q[len(fn) : len(q)-1]
	// the label is after the last comma outside braces and quotes
	depth, quote, cut := 0, byte(0), -1
	for i := 0; i < len(args); i++ {
		c := args[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '{' || c == '(' || c == '[':
			depth++
		case c == '}' || c == ')' || c == ']':
			depth--
		case c == ',' && depth == 0:
			cut = i
		}
	}
	if cut < 0 {
		return ""
	}
	return strings.TrimSpace(args[:cut])
}

// ruleFile is a Prometheus rule file.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// RuleQueries returns the expressions of a Prometheus rule file and the names its
// recording rules define.
func RuleQueries(path string) (queries []Query, recorded []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	base := filepath.Base(path)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			what := "record " + r.Record
			if r.Alert != "" {
				what = "alert " + r.Alert
			} else {
				recorded = append(recorded, r.Record)
			}
			queries = append(queries, Query{Source: fmt.Sprintf("%s: %s", base, what), Expr: r.Expr})
		}
	}
	return queries, recorded, nil
}

var grafanaVar = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)

// Expand replaces Grafana's variables so that Prometheus can evaluate an expression:
// interval variables by rateInterval, every dashboard variable by ".*" (dashboards use
// them only in =~ matchers, where ".*" means All).
func Expand(expr, rateInterval string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}")
		if i := strings.IndexByte(name, ':'); i >= 0 {
			name = name[:i]
		}
		switch name {
		case "__rate_interval", "__interval", "__range", "__range_s":
			if name == "__range_s" {
				return "300"
			}
			return rateInterval
		}
		return ".*"
	})
}
