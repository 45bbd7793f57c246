package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ncclwatch/watchdog/deploy"
	"github.com/ncclwatch/watchdog/heartbeat/gpu"
	"github.com/ncclwatch/watchdog/internal/assemble"
)

// quickstartBlocks returns the ```bash quickstart blocks of a doc, joined, and its
// ```bash quickstart-stop block.
func quickstartBlocks(t *testing.T, path string) (start, stop string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cur *strings.Builder
	var starts, stops strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```bash quickstart":
			cur = &starts
		case cur == nil && trimmed == "```bash quickstart-stop":
			cur = &stops
		case cur != nil && trimmed == "```":
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	if starts.Len() == 0 || stops.Len() == 0 {
		t.Fatalf("%s: no ```bash quickstart or quickstart-stop blocks", path)
	}
	return starts.String(), stops.String()
}

// freePortPair returns a free port p with p+1 free too (two sidecars).
func freePortPair(t *testing.T) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		ln.Close()
		if err == nil {
			ln2.Close()
			return p
		}
	}
	t.Fatal("no free port pair")
	return 0
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// promQuery evaluates an instant query and returns the number of series it returned.
func promQuery(ctx context.Context, base, expr string) (int, error) {
	u := base + "/api/v1/query?" + url.Values{"query": {expr}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("prometheus: %s", r.Error)
	}
	return len(r.Data.Result), nil
}

// emptyAllowed names metrics that legitimately have no series in the quick start: alert
// failures that did not happen, XIDs no GPU reported (a code's series appears with its
// first XID), and process liveness, which the simulated job (whose ranks are no processes of
// this machine) turns off.
var emptyAllowed = map[string]string{
	"ncclwatch_alert_notifications_failed_total": "no delivery failed",
	"ncclwatch_alert_retries_total":              "no delivery failed",
	"ncclwatch_alert_dropped_total":              "no delivery failed",
	"ncclwatch_alert_store_errors_total":         "no delivery-state error",
	"ncclwatch_gpu_xid_errors_total":             "no GPU reported an XID",
	"ncclwatch_rank_process_up":                  "simulated ranks are not processes here (--check-pids=false)",
	// The quick start's simulated job writes logs, not profiler regions: no op timings.
	"ncclwatch_comm_op_bus_bytes_total":                    "no profiler plugin in the quick start",
	"ncclwatch_comm_op_bytes_total":                        "no profiler plugin in the quick start",
	"ncclwatch_comm_op_duration_seconds_sum":               "no profiler plugin in the quick start",
	"ncclwatch_comm_op_duration_seconds_count":             "no profiler plugin in the quick start",
	"ncclwatch_comm_bus_bandwidth_bytes_per_second":        "no profiler plugin in the quick start",
	"ncclwatch_comm_algorithm_bandwidth_bytes_per_second":  "no profiler plugin in the quick start",
	"ncclwatch:comm_bus_bandwidth_bytes_per_second:rate5m": "no profiler plugin in the quick start",
}

// TestPrometheusEndToEnd runs the one-machine Slurm quick start of docs/quickstart-slurm.md
// as written (detector, prolog-started sidecars, a simulated job with a silent rank and a
// degraded port, Debian's prometheus on loopback), waits for the incident, then evaluates
// every dashboard query through Prometheus's HTTP API and reports which return data. A
// fake-NVML sidecar in the test process stands in for GPUs this machine does not have.
func TestPrometheusEndToEnd(t *testing.T) {
	if os.Getenv("NCCLWATCH_PROM_E2E") == "" {
		t.Skip("set NCCLWATCH_PROM_E2E=1 (make prom-e2e)")
	}
	for _, tool := range []string{"prometheus", "bash", "curl", "setsid"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make tools installs prometheus)", tool)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("WATCHDOG_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "watchdog")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/watchdog").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	start, stop := quickstartBlocks(t, filepath.Join(root, "docs/quickstart-slurm.md"))
	qs := filepath.Join(t.TempDir(), "qs")
	detectorPort, promPort := freePort(t), freePort(t)
	env := append(os.Environ(),
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"QS="+qs,
		"ETCD_PORT="+strconv.Itoa(freePort(t)),
		"DETECTOR_PORT="+strconv.Itoa(detectorPort),
		"SIDECAR_PORT="+strconv.Itoa(freePortPair(t)),
		"PROM_PORT="+strconv.Itoa(promPort))
	const ready = "NCCLWATCH_QUICKSTART_READY"
	script := "set -e\n" + start + "\nset +e\necho " + ready + "\nread -r _\n" + stop

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = root, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	logPath := filepath.Join(t.TempDir(), "quickstart.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stopAll := func() {
		if stopped {
			return
		}
		stopped = true
		stdin.Write([]byte("\n"))
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the quickstart-stop block did not finish in 30 s")
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	defer stopAll()
	dump := func() {
		for _, f := range []string{"detector.log", "simulate.log", "run/qs.node0.log", "run/qs.node1.log", "prometheus.log"} {
			if b, err := os.ReadFile(filepath.Join(qs, f)); err == nil {
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				t.Logf("--- %s (tail)\n%s", f, b)
			}
		}
		if b, err := os.ReadFile(logPath); err == nil {
			t.Logf("--- quick start output\n%s", b)
		}
	}

	// The quick start prints the incident and waits for Prometheus, then says READY.
	readyc := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(logFile, sc.Text())
			if sc.Text() == ready {
				readyc <- nil
				_, _ = io.Copy(logFile, stdout)
				return
			}
		}
		readyc <- errors.New("the quick start ended before it was ready")
	}()
	select {
	case err := <-readyc:
		if err != nil {
			dump()
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		dump()
		t.Fatal("the quick start did not show a hang incident and a ready Prometheus within 3 minutes")
	}
	t.Logf("quick start: incident open and Prometheus ready after %s", time.Since(began).Round(time.Second))

	// A sidecar with 8 fake GPUs, as a third node of the job.
	gpuMetrics := startFakeGPUSidecar(t, ctx)
	target := fmt.Sprintf(`[{"targets": [%q], "labels": {"ncclwatch_job": "qs", "node": "gpu-fake"}}]`, gpuMetrics)
	if err := os.WriteFile(filepath.Join(qs, "targets", "qs.gpu-fake.json"), []byte(target), 0o644); err != nil {
		t.Fatal(err)
	}

	// Evaluate every dashboard query until each returns data or the time is up.
	queries, err := deploy.DashboardQueries(dashboardDir)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(promPort)
	got := make([]int, len(queries))
	errs := make([]error, len(queries))
	emptyOK := make([]string, len(queries))
	for i, q := range queries {
		names, _ := deploy.MetricNames(q.Expr)
		for _, n := range names {
			if r, ok := emptyAllowed[n]; ok {
				emptyOK[i] = r
			}
		}
	}
	// Until every query that should have data has some (the third sidecar's first
	// scrape, two samples for rate()), then once more for the final counts.
	deadline := time.Now().Add(90 * time.Second)
	for final := false; ; {
		missing := 0
		for i, q := range queries {
			got[i], errs[i] = promQuery(ctx, base, deploy.Expand(q.Expr, "1m"))
			if got[i] == 0 && emptyOK[i] == "" {
				missing++
			}
		}
		if final {
			break
		}
		if missing == 0 || time.Now().After(deadline) {
			final = true
			time.Sleep(10 * time.Second) // every target scraped twice more
			continue
		}
		time.Sleep(2 * time.Second)
	}
	var report strings.Builder
	withData, allowedEmpty := 0, 0
	for i, q := range queries {
		status := "data"
		switch {
		case errs[i] != nil:
			status = "ERROR " + errs[i].Error()
			t.Errorf("%s: %v", q.Source, errs[i])
		case got[i] > 0:
			withData++
			status = fmt.Sprintf("%d series", got[i])
		default:
			if why := emptyOK[i]; why != "" {
				allowedEmpty++
				status = "empty (expected: " + why + ")"
			} else {
				status = "EMPTY"
				t.Errorf("%s returned no data: %s", q.Source, q.Expr)
			}
		}
		fmt.Fprintf(&report, "  %-34s %s\n", status, q.Source)
	}
	t.Logf("dashboard queries through Prometheus: %d of %d return data, %d empty as expected\n%s",
		withData, len(queries), allowedEmpty, report.String())

	// The rules loaded and fired: the hang is a firing critical alert.
	alertDeadline := time.Now().Add(60 * time.Second)
	for {
		n, err := promQuery(ctx, base, `ALERTS{alertname="NcclwatchIncidentOpenCritical", alertstate="firing", kind="hang"}`)
		if err == nil && n > 0 {
			break
		}
		if time.Now().After(alertDeadline) {
			t.Errorf("NcclwatchIncidentOpenCritical{kind=\"hang\"} did not fire (err %v)", err)
			break
		}
		time.Sleep(2 * time.Second)
	}
	if t.Failed() {
		dump()
	}
	stopAll()
	// The epilog stopped the sidecars: their pid files are gone.
	if left, _ := filepath.Glob(filepath.Join(qs, "run", "*.pid")); len(left) > 0 {
		t.Errorf("the epilog left %v", left)
	}
	t.Logf("end to end in %s", time.Since(began).Round(time.Second))
}

// startFakeGPUSidecar runs a real sidecar over 8 fake GPUs (two computing, one waiting in
// a collective, one throttled, the rest idle) and returns the address of its /metrics.
func startFakeGPUSidecar(t *testing.T, ctx context.Context) string {
	t.Helper()
	fake := gpu.NewFake(8)
	for i := 0; i < 8; i++ {
		fake.Update(i, func(g *gpu.FakeGPU) {
			switch i {
			case 0, 1:
				g.Util, g.MemUtil, g.PowerMW, g.TempC = 95, 40, 610_000, 66
			case 2:
				g.Util, g.MemUtil, g.PowerMW = 100, 2, 120_000
			case 3:
				g.ClockEvents = gpu.ReasonHwSlowdown | gpu.ReasonHwThermalSlowdown
				g.SMClockMHz = 1200
			}
		})
	}
	reg := prometheus.NewRegistry()
	sc, release, err := assemble.Sidecar(ctx, nil, assemble.SidecarConfig{Job: "qs", Node: "gpu-fake",
		LogPatterns: []string{filepath.Join(t.TempDir(), "*.log")}, PollLogs: true, GPULibrary: fake,
		Logger: slog.New(slog.DiscardHandler), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sc.Run(sctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: sc.HTTPHandler(reg), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
	})
	return ln.Addr().String()
}
