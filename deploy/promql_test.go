package deploy

import (
	"slices"
	"testing"
)

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`ncclwatch_port_up{kind="ib", device=~"mlx.*"} == 0`, []string{"ncclwatch_port_up"}},
		{`sum by (severity) (ncclwatch_detector_open_incidents * on (instance, job) group_left () ncclwatch_detector_leader)`,
			[]string{"ncclwatch_detector_open_incidents", "ncclwatch_detector_leader"}},
		{`sum without(instance)(rate(ncclwatch_lines_total{kind!="unknown"}[$__rate_interval]))`, []string{"ncclwatch_lines_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(ncclwatch_publish_latency_seconds_bucket[5m])))`,
			[]string{"ncclwatch_publish_latency_seconds_bucket"}},
		{`max by (ncclwatch_job) (a) - on (ncclwatch_job) group_right b`, []string{"a", "b"}},
		{`a * on(instance) group_left b`, []string{"a", "b"}},
		{`a * on(instance) group_left(node, gpu) b`, []string{"a", "b"}},
		{`rate(a[5m] offset 1h) > bool 0 and b unless c or d`, []string{"a", "b", "c", "d"}},
		{`a offset -5m + b @ start()`, []string{"a", "b"}},
		{`label_replace(a, "dst", "$1", "src", "(.*)")`, []string{"a"}},
		{`count_values("version", build_info)`, []string{"build_info"}},
		{`topk(5, a{rank=~"$rank"}) / ignoring(pid) b`, []string{"a", "b"}},
		{`floor(ncclwatch_gpu_clock_event_reasons / 8) % 2 == 1`, []string{"ncclwatch_gpu_clock_event_reasons"}},
		{`time() - ncclwatch_publish_last_success_timestamp_seconds`, []string{"ncclwatch_publish_last_success_timestamp_seconds"}},
		{`ncclwatch:rank_collectives_behind > 1e3`, []string{"ncclwatch:rank_collectives_behind"}},
		{`{__name__="ncclwatch_port_up", kind="ib"}`, []string{"ncclwatch_port_up"}},
		{`sum(a) by (le)`, []string{"a"}},
		{`sum (a)`, []string{"a"}},
		{`max_over_time(a[1h:5m])`, []string{"a"}},
		{`a{l="}{)("} # a comment naming b
		 + c`, []string{"a", "c"}},
		{`absent(a) or vector(0)`, []string{"a"}},
		{`0x1F + .5 + 1e-6 + Inf + NaN`, nil},
		{`a{job=~"${job:regex}"}`, []string{"a"}},
	}
	for _, tc := range tests {
		got, err := MetricNames(tc.expr)
		if err != nil {
			t.Errorf("MetricNames(%q): %v", tc.expr, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("MetricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestMetricNamesErrors(t *testing.T) {
	for _, expr := range []string{`a{b="c"`, `rate(a[5m]`, `a)`, `a{b="c}`, `a]`, `a{b=${x}`} {
		if got, err := MetricNames(expr); err == nil {
			t.Errorf("MetricNames(%q) = %q, want an error", expr, got)
		}
	}
}

func TestExpand(t *testing.T) {
	got := Expand(`rate(a{ncclwatch_job=~"$job", instance=~"${instance}"}[$__rate_interval]) offset $__interval`, "1m")
	want := `rate(a{ncclwatch_job=~".*", instance=~".*"}[1m]) offset 1m`
	if got != want {
		t.Errorf("Expand = %q, want %q", got, want)
	}
}

func TestLabelValuesSelector(t *testing.T) {
	for q, want := range map[string]string{
		`label_values(ncclwatch_rank_collectives_total{a=~"$b,c"}, instance)`: `ncclwatch_rank_collectives_total{a=~"$b,c"}`,
		`label_values(instance)`: ``,
		`query_result(up)`:       ``,
	} {
		if got := labelValuesSelector(q); got != want {
			t.Errorf("labelValuesSelector(%q) = %q, want %q", q, got, want)
		}
	}
}

func FuzzMetricNames(f *testing.F) {
	for _, s := range []string{`up`, `sum by (a) (rate(b{c="d"}[5m]))`, `a * on(x) group_left b`, `{__name__="x"}`, `a offset 5m`, `"\"`, `${x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		names, err := MetricNames(expr)
		if err != nil {
			return
		}
		for _, n := range names {
			if n == "" {
				t.Fatalf("empty name from %q", expr)
			}
		}
	})
}
