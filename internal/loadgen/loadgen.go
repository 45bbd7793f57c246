// Package loadgen measures the watchdog at scale: simulated sidecars (one per node of 8 ranks,
// with a realistic communicator mix: tensor-parallel inside a node, pipeline across nodes,
// data-parallel across the rest, and the world) write real snapshots at the real rate, under
// real leases, to a real etcd, while a real detector process judges them; one rank goes
// silent and the time to its hang incident is measured, with etcd and detector costs.
package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/heartbeat/publish"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/loadgen/simjob"
	"github.com/ncclwatch/watchdog/internal/procstat"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Options configure a load run.
type Options struct {
	Ranks int // multiple of 8
	// PP is the number of pipeline stages (nodes are split into consecutive stages).
	PP int
	// Endpoints of an external etcd; empty starts an embedded one in this process.
	Endpoints []string
	// Detector is the watchdog binary run as `detector` in its own process (for its CPU
	// and RSS); empty means os.Executable().
	Detector string
	Warmup   time.Duration // healthy time before the fault (default 20 s)
	After    time.Duration // longest wait for the incident (default 40 s)
	StepTime time.Duration // training step (default 1 s)
	Clients  int           // etcd clients the simulated sidecars share (default 8)
	Logger   *slog.Logger
}

// Result is what a run measured.
type Result struct {
	Ranks              int      `json:"ranks"`
	Nodes              int      `json:"nodes"`
	Communicators      int      `json:"communicators_per_rank"`
	Etcd               string   `json:"etcd"`
	DurationS          float64  `json:"duration_s"`
	EtcdWritesPerS     float64  `json:"etcd_writes_per_s"`
	WritesPerNodePerS  float64  `json:"writes_per_node_per_s"`
	BytesPerS          float64  `json:"etcd_bytes_per_s"`
	BytesPerRankPerS   float64  `json:"etcd_bytes_per_rank_per_s"`
	SnapshotBytesAvg   float64  `json:"snapshot_bytes_avg"`
	DetectorCPUPerS    float64  `json:"detector_cpu_s_per_s"`
	DetectorPeakRSSMiB float64  `json:"detector_peak_rss_mib"`
	EvalP50Ms          float64  `json:"eval_p50_ms"`
	EvalP99Ms          float64  `json:"eval_p99_ms"`
	WatchLagP50Ms      float64  `json:"watch_lag_p50_ms"`
	WatchLagP99Ms      float64  `json:"watch_lag_p99_ms"`
	DetectionLatencyS  float64  `json:"detection_latency_s"`
	DetectedKind       string   `json:"detected_kind"`
	DetectedCulprits   []int    `json:"detected_culprit_ranks"`
	InjectedRank       int      `json:"injected_rank"`
	PublishErrors      int64    `json:"publish_errors"`
	Notes              []string `json:"notes,omitempty"`
}

// Run runs the load.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Ranks <= 0 || o.Ranks%8 != 0 {
		return nil, errors.New("loadgen: --ranks must be a positive multiple of 8")
	}
	if o.PP <= 0 {
		o.PP = 4
	}
	nodes := o.Ranks / 8
	for nodes%o.PP != 0 {
		o.PP--
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
	res := &Result{Ranks: o.Ranks, Nodes: nodes, Communicators: 4, Etcd: "external"}
	endpoints := o.Endpoints
	if len(endpoints) == 0 {
		srv, err := etcdembed.Start(ctx, etcdembed.Options{Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		endpoints, res.Etcd = srv.Endpoints(), "embedded"
	}
	bin := o.Detector
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	httpAddr, err := procstat.FreeAddr()
	if err != nil {
		return nil, err
	}
	det := exec.CommandContext(ctx, bin, "detector", "--etcd-endpoints", strings.Join(endpoints, ","), "--http", httpAddr,
		"--log-level", "warn")
	det.Stderr = os.Stderr
	if err := det.Start(); err != nil {
		return nil, fmt.Errorf("start detector: %w", err)
	}
	defer func() { det.Process.Kill(); det.Wait() }()
	base := "http://" + httpAddr
	if err := waitHTTP(base+"/readyz", 30*time.Second); err != nil {
		return nil, err
	}

	clients := make([]*clientv3.Client, o.Clients)
	for i := range clients {
		c, err := etcdconn.New(etcdconn.Config{Endpoints: endpoints})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		clients[i] = c
	}
	job := simjob.New("load", nodes, o.PP, o.StepTime, time.Now(), o.Ranks/2+3)
	res.InjectedRank = job.Culprit
	var errs atomic.Int64
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wire := &snapshot.Wire{} // shared: a few zstd coders for all the nodes
	pubs := make([]*publish.Publisher, nodes)
	for n := 0; n < nodes; n++ {
		pub := assemble.Publisher(clients[n%len(clients)], job.Name, simjob.NodeName(n),
			assemble.PublishConfig{LeaseTTL: 10 * time.Second, Interval: time.Second, Wire: wire}, o.Logger, nil)
		pubs[n] = pub
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the nodes over the second, as independent sidecars are.
			select {
			case <-time.After(time.Duration(n) * time.Second / time.Duration(nodes)):
			case <-lctx.Done():
				return
			}
			var sent simjob.Sent
			pub.Run(lctx, func() ([]byte, error) {
				sn, next := job.Node(n, time.Now(), sent)
				b, err := snapshot.Encode(sn)
				if err != nil {
					errs.Add(1)
					return nil, err
				}
				sent = next
				return b, nil
			})
		}()
	}
	// Writes and bytes count what the publishers sent to etcd: compressed values, bases
	// included, a transaction of a base and a value counted as one write.
	stats := func() (writes, bytes int64) {
		for _, p := range pubs {
			w, b := p.Stats()
			writes, bytes = writes+w, bytes+b
		}
		return writes, bytes
	}
	cpu0, _ := procstat.CPUSeconds(det.Process.Pid)
	writes0, bytes0 := stats()
	t0 := time.Now()
	select {
	case <-time.After(o.Warmup):
	case <-ctx.Done():
		stop()
		wg.Wait()
		return nil, ctx.Err()
	}
	faultAt := job.Inject(time.Now())
	deadline := time.Now().Add(o.After)
	for time.Now().Before(deadline) {
		var incs []incident.Incident
		if err := getJSON(base+"/api/v1/incidents?job=load", &incs); err == nil {
			for _, inc := range incs {
				if inc.Kind == incident.KindHang || inc.Kind == incident.KindCrash || inc.Kind == incident.KindMismatch {
					res.DetectionLatencyS = round(time.Since(faultAt).Seconds(), 2)
					res.DetectedKind = string(inc.Kind)
					for _, c := range inc.Culprits {
						res.DetectedCulprits = append(res.DetectedCulprits, c.Rank)
					}
				}
			}
		}
		if res.DetectedKind != "" {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	elapsed := time.Since(t0).Seconds()
	writes1, bytes1 := stats()
	writes, bytes := writes1-writes0, bytes1-bytes0
	cpu1, _ := procstat.CPUSeconds(det.Process.Pid)
	rss, _ := procstat.PeakRSSKiB(det.Process.Pid)
	metrics, _ := scrape(base + "/metrics")
	stop()
	wg.Wait()
	res.DurationS = round(elapsed, 1)
	res.EtcdWritesPerS = round(float64(writes)/elapsed, 1)
	res.WritesPerNodePerS = round(float64(writes)/elapsed/float64(nodes), 3)
	res.BytesPerS = round(float64(bytes)/elapsed, 0)
	res.BytesPerRankPerS = round(float64(bytes)/elapsed/float64(o.Ranks), 1)
	if writes > 0 {
		res.SnapshotBytesAvg = round(float64(bytes)/float64(writes), 0)
	}
	res.DetectorCPUPerS = round((cpu1-cpu0)/elapsed, 3)
	res.DetectorPeakRSSMiB = round(float64(rss)/1024, 1)
	res.EvalP50Ms = round(1000*quantile(metrics, "ncclwatch_detector_evaluation_seconds", 0.5), 1)
	res.EvalP99Ms = round(1000*quantile(metrics, "ncclwatch_detector_evaluation_seconds", 0.99), 1)
	res.WatchLagP50Ms = round(1000*quantile(metrics, "ncclwatch_detector_watch_lag_seconds", 0.5), 1)
	res.WatchLagP99Ms = round(1000*quantile(metrics, "ncclwatch_detector_watch_lag_seconds", 0.99), 1)
	res.PublishErrors = errs.Load()
	if res.DetectedKind == "" {
		res.Notes = append(res.Notes, fmt.Sprintf("no hang incident within %s of the fault", o.After))
	}
	return res, nil
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
