package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ncclwatch/watchdog/deploy"
)

const (
	dashboardDir = "grafana/dashboards"
	rulesFile    = "prometheus/ncclwatch-rules.yaml"
)

// allQueries returns every dashboard and rule expression, and the recording rules' names.
func allQueries(t *testing.T) ([]deploy.Query, map[string]bool) {
	t.Helper()
	dq, err := deploy.DashboardQueries(dashboardDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(dq) < 40 {
		t.Fatalf("only %d dashboard queries found in %s", len(dq), dashboardDir)
	}
	rq, rec, err := deploy.RuleQueries(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, r := range rec {
		recorded[r] = true
	}
	return append(dq, rq...), recorded
}

// TestQueriesUseExportedMetrics: every metric a dashboard or rule queries is one the real
// sidecar or detector exports (or a recording rule, or Prometheus's own `up`), and every
// exported ncclwatch_* metric is shown or used somewhere.
func TestQueriesUseExportedMetrics(t *testing.T) {
	exp := exportedMetrics(t)
	if !exp.names["ncclwatch_gpu_utilization_ratio"] || !exp.names["ncclwatch_detector_open_incidents"] ||
		!exp.names["ncclwatch_alert_notifications_sent_total"] || !exp.names["ncclwatch_port_errors_total"] {
		t.Fatalf("the components exported too little; got %d names", len(exp.names))
	}
	queries, recorded := allQueries(t)
	used := map[string]bool{}
	for _, q := range queries {
		names, err := deploy.MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Source, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", q.Source, q.Expr)
		}
		for _, n := range names {
			used[n] = true
			if !exp.known(n, recorded) {
				t.Errorf("%s: metric %q is not exported by the sidecar or detector (expr %q)", q.Source, n, q.Expr)
			}
		}
	}
	var unused []string
	for n := range exp.names {
		if !strings.HasPrefix(n, "ncclwatch_") {
			continue
		}
		if used[n] || used[n+"_bucket"] || used[n+"_sum"] || used[n+"_count"] {
			continue
		}
		unused = append(unused, n)
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("exported but on no dashboard and in no rule: %s", strings.Join(unused, ", "))
	}
}

// TestDashboards checks what Grafana needs: unique uids, the datasource variable on every
// panel and target, unique panel ids, grid positions inside 24 columns.
func TestDashboards(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	if err != nil || len(files) < 4 {
		t.Fatalf("dashboards: %v %v", files, err)
	}
	uids := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID           string           `json:"uid"`
			Title         string           `json:"title"`
			SchemaVersion int              `json:"schemaVersion"`
			Panels        []map[string]any `json:"panels"`
			Templating    struct {
				List []map[string]any `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
			t.Errorf("%s: uid %q, title %q, schemaVersion %d", f, d.UID, d.Title, d.SchemaVersion)
		}
		if other, dup := uids[d.UID]; dup {
			t.Errorf("%s and %s share uid %q", f, other, d.UID)
		}
		uids[d.UID] = f
		if filepath.Base(f) != d.UID+".json" {
			t.Errorf("%s: name it %s.json after its uid", f, d.UID)
		}
		hasDS := false
		for _, v := range d.Templating.List {
			if v["name"] == "datasource" && v["type"] == "datasource" {
				hasDS = true
			}
		}
		if !hasDS {
			t.Errorf("%s: no datasource variable", f)
		}
		ids := map[float64]bool{}
		for _, p := range d.Panels {
			title, _ := p["title"].(string)
			id, _ := p["id"].(float64)
			if ids[id] {
				t.Errorf("%s: panel id %v twice", f, id)
			}
			ids[id] = true
			gp, _ := p["gridPos"].(map[string]any)
			x, _ := gp["x"].(float64)
			w, _ := gp["w"].(float64)
			if gp == nil || w <= 0 || x+w > 24 {
				t.Errorf("%s: panel %q: grid position %v", f, title, gp)
			}
			if p["type"] == "row" {
				continue
			}
			if ds, _ := p["datasource"].(map[string]any); ds["uid"] != "${datasource}" {
				t.Errorf("%s: panel %q: datasource %v, want ${datasource}", f, title, p["datasource"])
			}
			targets, _ := p["targets"].([]any)
			if len(targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, title)
			}
		}
	}
}

// TestQueriesParse hands every expression, its Grafana variables expanded, to promtool as
// a recording rule: promtool parses it with Prometheus's own parser.
func TestQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (make tools installs Debian's prometheus package)")
	}
	queries, _ := allQueries(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, q := range queries {
		rules = append(rules, rule{Record: fmt.Sprintf("ncclwatch_check:q%d", i), Expr: deploy.Expand(q.Expr, "1m")})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "check", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		// promtool names the rule; map it back to its source.
		msg := string(out)
		for i := len(queries) - 1; i >= 0; i-- {
			msg = strings.ReplaceAll(msg, fmt.Sprintf("ncclwatch_check:q%d", i), queries[i].Source)
		}
		t.Fatalf("promtool check rules: %v\n%s", err, msg)
	}
}

// TestRunbookAnchors: every runbook link in the rules and every incident kind has a
// section in docs/runbooks.md.
func TestRunbookAnchors(t *testing.T) {
	b, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[githubAnchor(h)] = true
		}
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`runbooks\.md#([a-z0-9_-]+)`).FindAllStringSubmatch(string(rules), -1) {
		if !anchors[m[1]] {
			t.Errorf("%s links runbooks.md#%s, which has no such section", rulesFile, m[1])
		}
	}
	for _, kind := range incidentKinds(t) {
		if !anchors[kind] {
			t.Errorf("docs/runbooks.md has no section \"## %s\"", kind)
		}
	}
}

func githubAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var sb strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			sb.WriteRune(r)
		case r == ' ':
			sb.WriteByte('-')
		}
	}
	return sb.String()
}

// incidentKinds reads the Kind constants from incident/incident.go.
func incidentKinds(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../incident/incident.go")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range regexp.MustCompile(`Kind[A-Za-z0-9]+\s+Kind = "([a-z_0-9]+)"`).FindAllStringSubmatch(string(b), -1) {
		kinds = append(kinds, m[1])
	}
	if len(kinds) < 10 {
		t.Fatalf("found only %d incident kinds in incident/incident.go", len(kinds))
	}
	return kinds
}

// TestRuleTemplatesHumanizeValue: every $value in a rule's annotations or labels goes
// through a humanize* function or printf. Printed raw, it differs between Prometheus 2.x
// and 3.x (3.x's left-open range selectors change rate()'s last bits), so the promtool
// tests could pass on one and fail on the other.
func TestRuleTemplatesHumanizeValue(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	action := regexp.MustCompile(`\{\{-?(.*?)-?\}\}`)
	formatted := regexp.MustCompile(`\bhumanize[A-Za-z0-9]*\b|\bprintf\b`)
	checked := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			for what, m := range map[string]map[string]string{"annotation": r.Annotations, "label": r.Labels} {
				for k, v := range m {
					for _, a := range action.FindAllStringSubmatch(v, -1) {
						if !strings.Contains(a[1], "$value") {
							continue
						}
						checked++
						if !formatted.MatchString(a[1]) {
							t.Errorf("%s %s %s: %s prints $value raw; use {{ $value | humanize }}", rulesFile, r.Alert, what+" "+k, a[0])
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatalf("%s: no template prints $value; is the file read right?", rulesFile)
	}
}
