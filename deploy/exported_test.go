package deploy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/detect/live"
	"github.com/ncclwatch/watchdog/heartbeat/gpu"
	"github.com/ncclwatch/watchdog/heartbeat/profile/profiletest"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
)

// recorder is a Registerer that remembers every collector registered through it, so
// that metric vectors with no child yet are known by their descriptions.
type recorder struct {
	prometheus.Registerer
	mu   sync.Mutex
	seen []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	err := r.Registerer.Register(c)
	if err == nil {
		r.mu.Lock()
		r.seen = append(r.seen, c)
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// exported is what the sidecar and the detector export.
type exported struct {
	names map[string]bool
	// histograms holds names whose _bucket, _sum and _count series exist (summaries:
	// _sum and _count).
	histograms, summaries map[string]bool
	// info describes each ncclwatch_* metric.
	info map[string]metricInfo
	// families are the ncclwatch_* series gathered, for promlint.
	families []*dto.MetricFamily
	// scraped is each component's /metrics as it serves it over HTTP.
	scraped map[string][]byte
}

// metricInfo is one metric's row in docs/metrics.md.
type metricInfo struct {
	Components []string // sidecar, detector, or both (ncclwatch_build_info)
	Type       string   // counter, gauge, histogram
	Labels     []string
	Help       string
}

var (
	exportedOnce sync.Once
	exportedSet  exported
	exportedErr  error
)

// exportedMetrics starts the real sidecar (fake NVML with 8 GPUs, IB sysfs fixtures, a
// publisher) and the real detector (with its alert dispatcher) in-process on an embedded
// etcd, registered as cmd/watchdog registers them, and returns every metric name they
// describe or gather.
func exportedMetrics(t *testing.T) exported {
	t.Helper()
	exportedOnce.Do(func() { exportedSet, exportedErr = startComponents(t, t.TempDir()) })
	if exportedErr != nil {
		t.Fatal(exportedErr)
	}
	return exportedSet
}

func startComponents(t *testing.T, dir string) (exported, error) {
	// Two ranks of a real capture, so that the per-rank series exist.
	logs, err := filepath.Glob("../testdata/captures/nccl-2.28.9-2xH200/silent/nccl.*.log")
	if err != nil || len(logs) == 0 {
		return exported{}, fmt.Errorf("capture logs: %v %v", logs, err)
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			return exported{}, err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644); err != nil {
			return exported{}, err
		}
	}
	profDirs := pluginRegions(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	srv, err := etcdembed.Start(ctx, etcdembed.Options{Logger: log})
	if err != nil {
		return exported{}, err
	}
	defer srv.Close()
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
	if err != nil {
		return exported{}, err
	}
	defer cli.Close()

	sidecarReg := &recorder{Registerer: prometheus.NewRegistry()}
	detectorReg := &recorder{Registerer: prometheus.NewRegistry()}
	for _, r := range []*recorder{sidecarReg, detectorReg} {
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	sc, release, err := assemble.Sidecar(ctx, cli, assemble.SidecarConfig{Job: "metrics", Node: "node0",
		LogPatterns: []string{filepath.Join(dir, "*.log")}, PollLogs: true, SampleEvery: 100 * time.Millisecond,
		Publish:    assemble.PublishConfig{Interval: 100 * time.Millisecond},
		GPULibrary: gpu.NewFake(8), Ports: true, IBRoot: "../heartbeat/ibport/testdata/ib-healthy", NetRoot: "../heartbeat/ibport/testdata/net",
		ProfilerDirs: profDirs, Logger: log, Registerer: sidecarReg})
	if err != nil {
		return exported{}, err
	}
	defer release()
	var termRegs []*recorder
	var mu sync.Mutex
	alertCfg := &alert.Config{Notifiers: []alert.NotifierConfig{{Name: "console", Type: "console"}}}
	health, err := alert.NewHealth(alertCfg, alert.BuildOptions{Console: discard{}}, log, detectorReg)
	if err != nil {
		return exported{}, err
	}
	newAlerts := assemble.Alerts(alertCfg, cli,
		assemble.AlertOptions{Build: alert.BuildOptions{Console: discard{}}, Logger: log, Health: health})
	det, err := assemble.Detector(cli, assemble.DetectorConfig{Interval: 100 * time.Millisecond, LeaseTTL: 2 * time.Second,
		Logger: log, Registerer: detectorReg,
		Alerts: func(r prometheus.Registerer) (live.Alerts, error) {
			rec := &recorder{Registerer: r}
			mu.Lock()
			termRegs = append(termRegs, rec)
			mu.Unlock()
			return newAlerts(rec)
		}})
	if err != nil {
		return exported{}, err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = sc.Run(ctx) }()
	go func() { defer wg.Done(); _ = det.Run(ctx) }()
	// Long enough for samples, a publish, a leadership term and a few evaluations.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(termRegs)
		mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)

	out := exported{names: map[string]bool{}, histograms: map[string]bool{}, summaries: map[string]bool{}, info: map[string]metricInfo{},
		scraped: map[string][]byte{}}
	for name, h := range map[string]http.Handler{"sidecar": sc.HTTPHandler(sidecarReg.Registerer.(prometheus.Gatherer)),
		"detector": assemble.DetectorHandler(det, detectorReg.Registerer.(prometheus.Gatherer))} {
		srv := httptest.NewServer(h)
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			srv.Close()
			return exported{}, err
		}
		out.scraped[name], err = io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if err != nil {
			return exported{}, err
		}
	}
	types := map[string]string{}
	type group struct {
		component string
		recs      []*recorder
	}
	for _, g := range []group{{"sidecar", []*recorder{sidecarReg}}, {"detector", append([]*recorder{detectorReg}, termRegs...)}} {
		for _, r := range g.recs {
			r.mu.Lock()
			cs := append([]prometheus.Collector(nil), r.seen...)
			r.mu.Unlock()
			for _, c := range cs {
				kind := ""
				switch c.(type) {
				case *prometheus.HistogramVec:
					kind = "histogram"
				case *prometheus.SummaryVec:
					kind = "summary"
				case *prometheus.CounterVec:
					kind = "counter"
				case *prometheus.GaugeVec:
					kind = "gauge"
				}
				for _, d := range describe(c) {
					out.names[d.name] = true
					if strings.HasPrefix(d.name, "ncclwatch_") {
						info := out.info[d.name]
						if !slices.Contains(info.Components, g.component) {
							info.Components = append(info.Components, g.component)
						}
						info.Labels, info.Help = d.labels, d.help
						out.info[d.name] = info
					}
					if kind != "" {
						types[d.name] = kind
					}
				}
			}
			if gth, ok := r.Registerer.(prometheus.Gatherer); ok {
				mfs, err := gth.Gather()
				if err != nil {
					return exported{}, err
				}
				for _, mf := range mfs {
					if strings.HasPrefix(mf.GetName(), "ncclwatch_") {
						out.families = append(out.families, mf)
					}
					out.names[mf.GetName()] = true
					types[mf.GetName()] = strings.ToLower(mf.GetType().String())
				}
			}
		}
	}
	for n, info := range out.info {
		info.Type = types[n]
		if info.Type == "" { // a const metric of a custom collector that had no sample
			info.Type = "gauge"
			if strings.HasSuffix(n, "_total") {
				info.Type = "counter"
			}
		}
		out.info[n] = info
	}
	for n, ty := range types {
		switch ty {
		case "histogram", "gauge_histogram":
			out.histograms[n] = true
		case "summary":
			out.summaries[n] = true
		}
	}
	cancel()
	wg.Wait()
	return out, nil
}

// pluginRegions starts a simulated rank of the profiler plugin (profiletest: the real plugin,
// where gcc can build it) that completed an all-reduce, so that the sidecar's bandwidth series
// exist and are gathered with their types; none without gcc.
func pluginRegions(t *testing.T) []string {
	if _, err := exec.LookPath("gcc"); err != nil {
		return nil
	}
	dir := t.TempDir()
	r := profiletest.Build(t).Start(t, dir, "RANK=0", "WORLD_SIZE=2")
	r.Do("init 0 c0ffee 2 0", "coll 0 AllReduce 1048576 2", "run 0 1 2")
	return []string{dir}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descHelp   = regexp.MustCompile(`help: "((?:[^"\\]|\\.)*)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

type described struct {
	name, help string
	labels     []string
}

// describe returns what a collector describes: name, help and variable labels of each Desc.
func describe(c prometheus.Collector) []described {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	var out []described
	for d := range ch {
		s := d.String()
		m := descName.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		x := described{name: m[1]}
		if h := descHelp.FindStringSubmatch(s); h != nil {
			if u, err := strconv.Unquote(`"` + h[1] + `"`); err == nil {
				x.help = u
			}
		}
		if l := descLabels.FindStringSubmatch(s); l != nil && l[1] != "" {
			for _, lb := range strings.Split(l[1], ",") {
				x.labels = append(x.labels, strings.TrimSuffix(strings.TrimPrefix(lb, "c("), ")"))
			}
		}
		out = append(out, x)
	}
	return out
}

// known says whether a name in an expression is a series Prometheus will hold: an
// exported metric, a histogram's or summary's derived series, a recording rule, or one
// of Prometheus's own per-target series.
func (e exported) known(name string, recorded map[string]bool) bool {
	if e.names[name] || recorded[name] {
		return true
	}
	switch name {
	case "up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling", "scrape_series_added":
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		if e.histograms[base] || (suf != "_bucket" && e.summaries[base]) {
			return true
		}
	}
	return false
}
