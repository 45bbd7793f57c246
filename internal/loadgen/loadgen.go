// Package loadgen measures the watchdog at scale: simulated sidecars (one per node of 8 ranks,
// with a realistic communicator mix: tensor-parallel inside a node, pipeline across nodes,
// data-parallel across the rest, and the world) write real snapshots at the real rate, under
// real leases, to a real etcd, while real detector processes judge them; one rank goes
// silent and the time to its hang incident is measured, with etcd and detector costs.
//
// Three kinds of process share the machine, so that each one's CPU is its own: this one
// (the embedded etcd, unless an external one is given, and the measurement), the generator
// (`watchdog loadgen --generate`, generate.go: every simulated sidecar) and one or more
// detector replicas (`watchdog detector`).
package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/procstat"
)

// Options configure a load run.
type Options struct {
	Ranks int // multiple of 8
	// Jobs splits the ranks into this many jobs of equal size (default 1); the silent rank
	// is in the first.
	Jobs int
	// PP is the number of pipeline stages (each job's nodes are split into consecutive stages).
	PP int
	// Endpoints of an external etcd; empty starts an embedded one in this process.
	Endpoints []string
	// Sidecar and Detector are the TLS files and credentials of the simulated sidecars and
	// of the detector processes (each part its own, docs/security.md); their Endpoints
	// are ignored.
	Sidecar, Detector etcdconn.Config
	// Replicas is the number of detector processes (default 1): they share the jobs.
	Replicas int
	// Binary is the watchdog binary run as `detector` and `loadgen --generate` in their own
	// processes; empty means os.Executable().
	Binary   string
	Warmup   time.Duration // healthy time before the fault (default 20 s)
	After    time.Duration // longest wait for the incident (default 40 s)
	StepTime time.Duration // training step (default 1 s)
	Clients  int           // etcd clients the simulated sidecars share (default 8)
	Logger   *slog.Logger
}

// connArgs are the flags that give a child process c's TLS files and credentials (file
// paths only: no secret on a command line).
func connArgs(c etcdconn.Config) []string {
	var out []string
	for _, f := range [][2]string{{"--etcd-ca-file", c.CAFile}, {"--etcd-cert-file", c.CertFile}, {"--etcd-key-file", c.KeyFile},
		{"--etcd-user", c.Username}, {"--etcd-password-file", c.PasswordFile}} {
		if f[1] != "" {
			out = append(out, f[0], f[1])
		}
	}
	return out
}

func (o *Options) defaults() error {
	if o.Jobs <= 0 {
		o.Jobs = 1
	}
	if o.Ranks <= 0 || o.Ranks%(8*o.Jobs) != 0 {
		return errors.New("loadgen: --ranks must be a positive multiple of 8 x --jobs")
	}
	if o.PP <= 0 {
		o.PP = 4
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Warmup == 0 {
		o.Warmup = 20 * time.Second
	}
	if o.After == 0 {
		o.After = 40 * time.Second
	}
	if o.StepTime == 0 {
		o.StepTime = time.Second
	}
	if o.Clients == 0 {
		o.Clients = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Result is what a run measured.
type Result struct {
	Ranks         int    `json:"ranks"`
	Nodes         int    `json:"nodes"`
	Jobs          int    `json:"jobs"`
	Replicas      int    `json:"detector_replicas"`
	Communicators int    `json:"communicators_per_rank"`
	Etcd          string `json:"etcd"`
	// DurationS is the measured window: from the generator's first writes to the incident.
	DurationS         float64 `json:"duration_s"`
	EtcdWritesPerS    float64 `json:"etcd_writes_per_s"`
	WritesPerNodePerS float64 `json:"writes_per_node_per_s"`
	BytesPerS         float64 `json:"etcd_bytes_per_s"`
	BytesPerRankPerS  float64 `json:"etcd_bytes_per_rank_per_s"`
	SnapshotBytesAvg  float64 `json:"snapshot_bytes_avg"`
	// DetectorCPUPerS sums the replicas; ByReplica lists each one's, and the jobs it owned.
	DetectorCPUPerS    float64         `json:"detector_cpu_s_per_s"`
	DetectorPeakRSSMiB float64         `json:"detector_peak_rss_mib"`
	ByReplica          []ReplicaResult `json:"by_replica,omitempty"`
	GeneratorCPUPerS   float64         `json:"generator_cpu_s_per_s"`
	// EtcdCPUPerS is this process's: the embedded etcd (and the measurement's polling).
	EtcdCPUPerS       float64  `json:"etcd_cpu_s_per_s,omitempty"`
	EvalP50Ms         float64  `json:"eval_p50_ms"`
	EvalP99Ms         float64  `json:"eval_p99_ms"`
	WatchLagP50Ms     float64  `json:"watch_lag_p50_ms"`
	WatchLagP99Ms     float64  `json:"watch_lag_p99_ms"`
	DetectionLatencyS float64  `json:"detection_latency_s"`
	DetectedKind      string   `json:"detected_kind"`
	DetectedCulprits  []int    `json:"detected_culprit_ranks"`
	InjectedRank      int      `json:"injected_rank"`
	PublishErrors     int64    `json:"publish_errors"`
	Notes             []string `json:"notes,omitempty"`
}

// ReplicaResult is one detector replica's share.
type ReplicaResult struct {
	ID         string  `json:"id"`
	JobsOwned  int     `json:"jobs_owned"`
	CPUPerS    float64 `json:"cpu_s_per_s"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	EvalP50Ms  float64 `json:"eval_p50_ms"`
}

// replicaProc is a running detector replica.
type replicaProc struct {
	id   string
	cmd  *exec.Cmd
	base string // http://addr
	cpu0 float64
}

// Run runs the load.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	nodes := o.Ranks / 8
	res := &Result{Ranks: o.Ranks, Nodes: nodes, Jobs: o.Jobs, Replicas: o.Replicas, Communicators: 4, Etcd: "external"}
	endpoints := o.Endpoints
	if len(endpoints) == 0 {
		srv, err := etcdembed.Start(ctx, etcdembed.Options{Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		endpoints, res.Etcd = srv.Endpoints(), "embedded"
	}
	bin := o.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	var reps []*replicaProc
	defer func() {
		for _, r := range reps {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
	}()
	for i := 0; i < o.Replicas; i++ {
		httpAddr, err := procstat.FreeAddr()
		if err != nil {
			return nil, err
		}
		id := fmt.Sprintf("replica%d", i)
		args := append([]string{"detector", "--etcd-endpoints", strings.Join(endpoints, ","), "--http", httpAddr,
			"--id", id, "--log-level", "warn"}, connArgs(o.Detector)...)
		det := exec.CommandContext(ctx, bin, args...)
		det.Stderr = os.Stderr
		if err := det.Start(); err != nil {
			return nil, fmt.Errorf("start detector: %w", err)
		}
		reps = append(reps, &replicaProc{id: id, cmd: det, base: "http://" + httpAddr})
	}
	for _, r := range reps {
		if err := waitHTTP(r.base+"/readyz", 30*time.Second); err != nil {
			return nil, err
		}
	}

	gen := exec.CommandContext(ctx, bin, append([]string{"loadgen", "--generate", "--etcd-endpoints", strings.Join(endpoints, ","),
		"--ranks", strconv.Itoa(o.Ranks), "--jobs", strconv.Itoa(o.Jobs), "--pp", strconv.Itoa(o.PP),
		"--warmup", o.Warmup.String(), "--step", o.StepTime.String(), "--clients", strconv.Itoa(o.Clients)}, connArgs(o.Sidecar)...)...)
	gen.Stderr = os.Stderr
	out, err := gen.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := gen.Start(); err != nil {
		return nil, fmt.Errorf("start generator: %w", err)
	}
	defer func() { gen.Process.Kill(); gen.Wait() }()
	reports := make(chan Report, 16)
	go readReports(out, reports)

	// The window starts with the generator's first report (its publishers are writing).
	var first Report
	select {
	case first = <-reports:
	case <-time.After(30 * time.Second):
		return nil, errors.New("loadgen: the generator did not start")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t0 := time.Now()
	for _, r := range reps {
		r.cpu0, _ = procstat.CPUSeconds(r.cmd.Process.Pid)
	}
	gen0, _ := procstat.CPUSeconds(gen.Process.Pid)
	self0, _ := procstat.CPUSeconds(os.Getpid())
	last := first
	var fault *Fault
	var deadline time.Time
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for res.DetectedKind == "" && (fault == nil || time.Now().Before(deadline)) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case r, ok := <-reports:
			if !ok {
				return nil, errors.New("loadgen: the generator stopped")
			}
			last = r
			if r.Fault != nil && fault == nil {
				fault, deadline = r.Fault, time.Now().Add(o.After)
				res.InjectedRank = r.Fault.Rank
			}
		case <-poll.C:
			if fault != nil {
				detected(reps, fault, res)
			}
		}
	}
	elapsed := time.Since(t0).Seconds()
	genCPU, _ := procstat.CPUSeconds(gen.Process.Pid)
	selfCPU, _ := procstat.CPUSeconds(os.Getpid())
	res.GeneratorCPUPerS = round((genCPU-gen0)/elapsed, 3)
	if res.Etcd == "embedded" {
		res.EtcdCPUPerS = round((selfCPU-self0)/elapsed, 3)
	}
	var evals, lags []string
	owners := map[string]int{}
	var leader map[string]any
	if getJSON(reps[0].base+"/api/v1/leader", &leader) == nil {
		if m, ok := leader["owners"].(map[string]any); ok {
			for _, o := range m {
				if s, ok := o.(string); ok {
					owners[s]++
				}
			}
		}
	}
	for _, r := range reps {
		cpu, _ := procstat.CPUSeconds(r.cmd.Process.Pid)
		rss, _ := procstat.PeakRSSKiB(r.cmd.Process.Pid)
		metrics, _ := scrape(r.base + "/metrics")
		rr := ReplicaResult{ID: r.id, JobsOwned: owners[r.id], CPUPerS: round((cpu-r.cpu0)/elapsed, 3),
			PeakRSSMiB: round(float64(rss)/1024, 1), EvalP50Ms: round(1000*quantile(metrics, "ncclwatch_detector_evaluation_seconds", 0.5), 1)}
		res.ByReplica = append(res.ByReplica, rr)
		res.DetectorCPUPerS += rr.CPUPerS
		res.DetectorPeakRSSMiB = max(res.DetectorPeakRSSMiB, rr.PeakRSSMiB)
		if rr.JobsOwned > 0 || len(evals) == 0 {
			// The percentiles of the replica that judges the silent rank's job (the first
			// owner) stand for the detector's.
			evals, lags = metrics, metrics
		}
	}
	res.DetectorCPUPerS = round(res.DetectorCPUPerS, 3)
	if o.Replicas == 1 {
		res.ByReplica = nil
	}
	writes, bytes := last.Writes-first.Writes, last.Bytes-first.Bytes
	span := last.At.Sub(first.At).Seconds()
	if span <= 0 {
		span = elapsed
	}
	res.DurationS = round(elapsed, 1)
	res.EtcdWritesPerS = round(float64(writes)/span, 1)
	res.WritesPerNodePerS = round(float64(writes)/span/float64(nodes), 3)
	res.BytesPerS = round(float64(bytes)/span, 0)
	res.BytesPerRankPerS = round(float64(bytes)/span/float64(o.Ranks), 1)
	if writes > 0 {
		res.SnapshotBytesAvg = round(float64(bytes)/float64(writes), 0)
	}
	res.EvalP50Ms = round(1000*quantile(evals, "ncclwatch_detector_evaluation_seconds", 0.5), 1)
	res.EvalP99Ms = round(1000*quantile(evals, "ncclwatch_detector_evaluation_seconds", 0.99), 1)
	res.WatchLagP50Ms = round(1000*quantile(lags, "ncclwatch_detector_watch_lag_seconds", 0.5), 1)
	res.WatchLagP99Ms = round(1000*quantile(lags, "ncclwatch_detector_watch_lag_seconds", 0.99), 1)
	res.PublishErrors = last.Errors
	if res.DetectedKind == "" {
		res.Notes = append(res.Notes, fmt.Sprintf("no hang incident within %s of the fault", o.After))
	}
	return res, nil
}

// detected asks every replica (any answers for every job) for the silent rank's incident.
func detected(reps []*replicaProc, f *Fault, res *Result) {
	for _, r := range reps {
		var incs []incident.Incident
		if err := getJSON(r.base+"/api/v1/incidents?job="+f.Job, &incs); err != nil {
			continue
		}
		for _, inc := range incs {
			if inc.Kind == incident.KindHang || inc.Kind == incident.KindCrash || inc.Kind == incident.KindMismatch {
				res.DetectionLatencyS = round(time.Since(f.At).Seconds(), 2)
				res.DetectedKind = string(inc.Kind)
				for _, c := range inc.Culprits {
					res.DetectedCulprits = append(res.DetectedCulprits, c.Rank)
				}
				return
			}
		}
	}
}

// readReports decodes the generator's report lines until its output ends.
func readReports(r io.Reader, out chan<- Report) {
	defer close(out)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var rep Report
		if json.Unmarshal(sc.Bytes(), &rep) == nil {
			out <- rep
		}
	}
}

func waitHTTP(u string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer within %s", u, limit)
}

func getJSON(u string, v any) error {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// scrape returns the text exposition lines.
func scrape(u string) ([]string, error) {
	resp, err := http.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out, sc.Err()
}

// quantile estimates a quantile of a Prometheus histogram from its buckets (linear within
// the bucket, like histogram_quantile).
func quantile(lines []string, name string, q float64) float64 {
	type bucket struct{ le, n float64 }
	var bs []bucket
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, name+"_bucket{le=\"")
		if !ok {
			continue
		}
		i := strings.Index(rest, "\"}")
		if i < 0 {
			continue
		}
		le, err1 := strconv.ParseFloat(rest[:i], 64)
		n, err2 := strconv.ParseFloat(strings.TrimSpace(rest[i+2:]), 64)
		if err1 == nil && err2 == nil {
			bs = append(bs, bucket{le, n})
		}
	}
	sort.Slice(bs, func(a, b int) bool { return bs[a].le < bs[b].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return 0
	}
	total := bs[len(bs)-1].n
	rank := q * total
	prevLe, prevN := 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return prevLe
			}
			if b.n == prevN {
				return b.le
			}
			return prevLe + (b.le-prevLe)*(rank-prevN)/(b.n-prevN)
		}
		prevLe, prevN = b.le, b.n
	}
	return prevLe
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
