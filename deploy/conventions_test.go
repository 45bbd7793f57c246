package deploy_test

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// nonBaseUnits are name parts that say a value is not in a base unit: Prometheus wants
// seconds, bytes, ratios (0 to 1), hertz, celsius; and moments as Unix timestamps, not ages.
var nonBaseUnits = []string{"mhz", "ghz", "khz", "gbps", "mbps", "kbps", "gbits", "mbits", "percent", "pct",
	"ms", "milliseconds", "us", "microseconds", "ns", "minutes", "hours", "days", "kb", "mb", "gb", "kib", "mib", "gib",
	"kilobytes", "megabytes", "gigabytes", "age"}

// monotonic are name parts of counts that only grow (hardware error counters, events):
// such a metric is a counter, its rate left to PromQL.
var monotonic = []string{"errors", "replays", "xid", "discards", "dropped", "retries"}

// TestMetricConventions: every ncclwatch_* metric the sidecar and the detector export
// follows Prometheus's naming: counters and only counters end in _total; counts that only
// grow are counters; values are in base units (link rates too: bytes per second, which
// dashboards multiply by 8 to show as links are sold); promlint (what `promtool check
// metrics` runs) finds nothing; and both components say which build they run.
func TestMetricConventions(t *testing.T) {
	e := exportedMetrics(t)
	for name, info := range e.info {
		parts := strings.Split(strings.TrimPrefix(name, "ncclwatch_"), "_")
		if counter := info.Type == "counter"; counter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s is a %s: counters, and only counters, end in _total", name, info.Type)
		}
		for _, p := range parts {
			if slices.Contains(nonBaseUnits, p) {
				t.Errorf("%s: %q is not a base unit (seconds, bytes, ratio, hertz; timestamps, not ages)", name, p)
			}
			if slices.Contains(monotonic, p) && info.Type != "counter" {
				t.Errorf("%s counts something that only grows: it must be a counter, not a %s", name, info.Type)
			}
		}
	}
	problems, err := promlint.NewWithMetricFamilies(e.families).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	build, ok := e.info["ncclwatch_build_info"]
	if !ok || !slices.Equal(build.Labels, []string{"version", "revision", "goversion"}) ||
		!slices.Contains(build.Components, "sidecar") || !slices.Contains(build.Components, "detector") {
		t.Errorf("ncclwatch_build_info{version,revision,goversion} on the sidecar and the detector: got %+v (exported: %t)", build, ok)
	}
}

// TestPromtoolCheckMetrics: `promtool check metrics` (Prometheus's linter, as a site runs
// it) finds nothing in what the live sidecar and detector serve at /metrics over HTTP.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("no promtool (make promtool installs Debian's prometheus package)")
	}
	e := exportedMetrics(t)
	for _, comp := range []string{"sidecar", "detector"} {
		body := e.scraped[comp]
		if !bytes.Contains(body, []byte("ncclwatch_build_info")) {
			t.Fatalf("%s /metrics: no ncclwatch_build_info in %d bytes", comp, len(body))
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on the %s's /metrics: %v\n%s", comp, err, out)
		}
	}
}
