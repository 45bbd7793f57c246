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
	"hash/fnv"
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

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
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
	job := &simJob{nodes: nodes, pp: o.PP, step: o.StepTime, start: time.Now(), culprit: o.Ranks/2 + 3}
	res.InjectedRank = job.culprit
	var writes, bytes, errs atomic.Int64
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for n := 0; n < nodes; n++ {
		pub := assemble.Publisher(clients[n%len(clients)], "load", nodeName(n),
			assemble.PublishConfig{LeaseTTL: 10 * time.Second, Interval: time.Second}, o.Logger, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the nodes over the second, as independent sidecars are.
			select {
			case <-time.After(time.Duration(n) * time.Second / time.Duration(nodes)):
			case <-lctx.Done():
				return
			}
			var lastSent map[string]int64
			pub.Run(lctx, func() ([]byte, error) {
				b, sent, err := job.encode(n, time.Now(), lastSent)
				if err != nil {
					errs.Add(1)
					return nil, err
				}
				lastSent = sent
				writes.Add(1)
				bytes.Add(int64(len(b)))
				return b, nil
			})
		}()
	}
	cpu0, _ := procstat.CPUSeconds(det.Process.Pid)
	t0 := time.Now()
	select {
	case <-time.After(o.Warmup):
	case <-ctx.Done():
		stop()
		wg.Wait()
		return nil, ctx.Err()
	}
	faultAt := job.inject(time.Now())
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
	cpu1, _ := procstat.CPUSeconds(det.Process.Pid)
	rss, _ := procstat.PeakRSSKiB(det.Process.Pid)
	metrics, _ := scrape(base + "/metrics")
	stop()
	wg.Wait()
	res.DurationS = round(elapsed, 1)
	res.EtcdWritesPerS = round(float64(writes.Load())/elapsed, 1)
	res.WritesPerNodePerS = round(float64(writes.Load())/elapsed/float64(nodes), 3)
	res.BytesPerS = round(float64(bytes.Load())/elapsed, 0)
	if w := writes.Load(); w > 0 {
		res.SnapshotBytesAvg = round(float64(bytes.Load())/float64(w), 0)
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

func nodeName(n int) string { return fmt.Sprintf("node%05d", n) }

// simJob is the simulated job's progress, shared by the node goroutines.
type simJob struct {
	nodes, pp int
	step      time.Duration
	start     time.Time
	culprit   int

	mu        sync.Mutex
	faultStep int64 // 0: healthy
}

func (j *simJob) inject(now time.Time) time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.faultStep = int64(now.Sub(j.start)/j.step) + 1
	// The culprit never issues step faultStep; its last op is the end of step faultStep-1.
	return j.start.Add(time.Duration(j.faultStep) * j.step)
}

// comm describes one communicator of a rank: its identity, size, rank in it and ops per step.
type comm struct {
	id     string
	nranks int
	rank   int
	ops    []snapshot.Op // per-step signature
	peer   int           // pipeline peer (p2p), -1 for none
}

var (
	tpOps    = []snapshot.Op{{Op: "AllGather", Count: 4194304, Dtype: "bfloat16"}, {Op: "ReduceScatter", Count: 4194304, Dtype: "bfloat16", Red: "sum"}, {Op: "AllGather", Count: 4194304, Dtype: "bfloat16"}, {Op: "ReduceScatter", Count: 4194304, Dtype: "bfloat16", Red: "sum"}, {Op: "AllReduce", Count: 8192, Dtype: "float32", Red: "sum"}}
	dpOps    = []snapshot.Op{{Op: "AllReduce", Count: 26214400, Dtype: "bfloat16", Red: "sum"}, {Op: "AllReduce", Count: 26214400, Dtype: "bfloat16", Red: "sum"}, {Op: "AllReduce", Count: 13107200, Dtype: "bfloat16", Red: "sum"}, {Op: "AllReduce", Count: 6553600, Dtype: "bfloat16", Red: "sum"}}
	worldOps = []snapshot.Op{{Op: "AllReduce", Count: 1, Dtype: "float32", Red: "sum"}}
)

func (j *simJob) comms(rank int) []comm {
	node, local := rank/8, rank%8
	perStage := j.nodes / j.pp
	stage := node / perStage
	return []comm{
		{id: "0xfeedface", nranks: j.nodes * 8, rank: rank, ops: worldOps, peer: -1},
		{id: "0xfeedface/s1c" + strconv.Itoa(node), nranks: 8, rank: local, ops: tpOps, peer: -1},
		{id: "0xfeedface/s2c" + strconv.Itoa(stage*8+local), nranks: perStage, rank: node % perStage, ops: dpOps, peer: -1},
		{id: "0xfeedface/s3c" + strconv.Itoa((node%perStage)*8+local), nranks: j.pp, rank: stage, peer: pipelinePeer(stage, j.pp)},
	}
}

func pipelinePeer(stage, pp int) int {
	if pp < 2 {
		return -1
	}
	if stage+1 < pp {
		return stage + 1
	}
	return stage - 1
}

// steps says how many steps a rank has completed issuing at now.
func (j *simJob) steps(rank int, now time.Time) int64 {
	j.mu.Lock()
	f := j.faultStep
	j.mu.Unlock()
	s := int64(now.Sub(j.start) / j.step)
	if f > 0 {
		limit := f // everyone issued step f, then waits
		if rank == j.culprit {
			limit = f - 1
		}
		s = min(s, limit)
	}
	return s
}

// encode renders one node's snapshot at now; each communicator carries the ops issued since
// the previous snapshot (as the real sidecar does), bounded like it.
func (j *simJob) encode(node int, now time.Time, lastSent map[string]int64) ([]byte, map[string]int64, error) {
	sent := map[string]int64{}
	n := &snapshot.Node{Job: "load", Node: nodeName(node), Time: snapshot.MicrosOf(now), Started: snapshot.MicrosOf(j.start)}
	for local := 0; local < 8; local++ {
		rank := node*8 + local
		steps := j.steps(rank, now)
		p := snapshot.Process{Host: nodeName(node), PID: 10000 + local, Rank: rank, LocalRank: local, CudaDev: local,
			BusID: fmt.Sprintf("%x000", 0x18+local), State: snapshot.ProcRunning, NCCL: "2.28.9", Timestamps: true, TSDigits: 6}
		for _, c := range j.comms(rank) {
			sc := snapshot.Comm{ID: c.id, Ptr: fmt.Sprintf("0x%x", len(p.Comms)+1), Rank: c.rank, NRanks: c.nranks, State: snapshot.CommReady}
			if len(c.ops) > 0 {
				per := int64(len(c.ops))
				sc.Count = steps * per
				from := max(lastSent[c.id], sc.Count-32)
				from = min(from, sc.Count-4) // at least the newest 4, like the sidecar
				for seq := max(from+1, 1); seq <= sc.Count; seq++ {
					sc.Recent = append(sc.Recent, j.op(c, seq, per))
				}
				if len(sc.Recent) > 0 {
					last := sc.Recent[len(sc.Recent)-1]
					sc.Last = &last
				}
				// Marks: those since the previous snapshot, and the newest (as the sidecar does).
				for m := sc.Count / 16 * 16; m > 0 && m > sc.Count-64; m -= 16 {
					if m <= lastSent[c.id] && len(sc.Marks) > 0 {
						break
					}
					sc.Marks = append(snapshot.Marks{{Seq: m, Digest: digest(c.id, m), T: j.op(c, m, per).T}}, sc.Marks...)
				}
				sent[c.id] = sc.Count
			} else if c.peer >= 0 {
				t := snapshot.MicrosOf(j.start.Add(time.Duration(steps) * j.step))
				sc.P2P = []snapshot.P2P{{Peer: c.peer, Sends: steps, Recvs: steps, LastSend: t, LastRecv: t}}
			}
			p.Comms = append(p.Comms, sc)
		}
		j.mu.Lock()
		faulted := j.faultStep > 0
		j.mu.Unlock()
		switch {
		case faulted && rank == j.culprit:
			p.GPUState = snapshot.GPUIdle
		case faulted:
			p.GPUState = snapshot.GPUWaiting
		default:
			p.GPUState = snapshot.GPUComputing
		}
		n.Processes = append(n.Processes, p)
	}
	for g := 0; g < 8; g++ {
		n.GPUs = append(n.GPUs, snapshot.GPU{Index: g, BusID: fmt.Sprintf("%x000", 0x18+g), T: n.Time, Util: 99, PowerW: 650, PowerLimitW: 700,
			SMClockMHz: 1980, SMMaxMHz: 1980, TempC: 60, State: n.Processes[g].GPUState})
	}
	for h := 0; h < 8; h++ {
		n.Ports = append(n.Ports, snapshot.Port{Kind: "ib", Device: fmt.Sprintf("mlx5_%d", h), Port: 1, State: "ACTIVE", PhysState: "LinkUp",
			RateGbps: 400, Width: "4X", Speed: "NDR", T: n.Time})
	}
	b, err := snapshot.Encode(n)
	return b, sent, err
}

// op is the seq-th op of a communicator, timed within its step.
func (j *simJob) op(c comm, seq, per int64) snapshot.Op {
	o := c.ops[(seq-1)%per]
	o.Seq = seq
	stepIdx := (seq - 1) / per
	within := time.Duration((seq-1)%per) * j.step / time.Duration(per+1)
	o.T = snapshot.MicrosOf(j.start.Add(time.Duration(stepIdx)*j.step + within))
	return o
}

func digest(id string, seq int64) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", id, seq)
	return strconv.FormatUint(h.Sum64(), 16)
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
