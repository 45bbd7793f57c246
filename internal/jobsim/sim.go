// Package jobsim simulates a distributed training job (PyTorch over NCCL) well enough for
// the watchdog to watch it: N ranks on M nodes write NCCL debug logs exactly as real NCCL
// 2.18-2.30 does (one NCCL_DEBUG_FILE per rank process, nccl.<host>.<pid>.log, in a folder
// per node), each node has a scriptable fake NVML (heartbeat/gpu.Fake) whose readings
// follow the simulated activity and an InfiniBand sysfs tree (heartbeat/ibport/ibsim)
// whose counters advance with traffic, and scripted faults (a skipped or mismatched
// collective, a silent or crashed rank, a straggler, a degraded port, an XID, a pause)
// happen at chosen steps, each recorded with the time it was injected: the ground truth
// for detection tests and latency measurements.
//
// Run writes the job in real time (lines appear when NCCL would print them, for the demo
// and live tests); Generate writes a finished job as fast as it can with timestamps from a
// fake clock (offline tests, benchmarks, the load generator). Output is a pure function of
// the Config, Seed included, in both modes.
//
// The job is Megatron-like: a world communicator (ncclCommInitRankConfig), split by
// ncclCommSplit into tensor-parallel groups (the ranks of a node), data-parallel groups
// (the same local rank across the nodes of a pipeline stage) and, with pipeline stages,
// pipeline groups (Send/Recv between neighbouring stages); split colors are PyTorch's. A
// step issues per layer a tensor-parallel AllGather and ReduceScatter (bf16) forward and
// backward, DDP's bucket AllReduces (bf16, four buckets of different sizes), the
// tensor-parallel AllReduce of the norm gradients (fp32) and a world AllReduce of the loss
// (fp32, count 1). Sim.StepOps lists a rank's ops; Sim.CommID names its communicators as
// the analysis does.
//
// The logs are those of NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV,COLL,NET
// (+DESTROY, for 2.30.3+), NCCL_DEBUG_FILE=<dir>/<node>/nccl.%h.%p.log and, with
// Config.Timestamps, NCCL_DEBUG_TIMESTAMP_LEVELS=ALL NCCL_DEBUG_TIMESTAMP_FORMAT="[%F %T.%6f] ",
// the timestamps docs/configuration.md asks of a job ("NCCL settings of the training
// job"). A fault that hangs the job lets every rank finish enqueueing that step (enqueue
// is asynchronous; the step's end synchronises), then nothing more is logged; faults
// scheduled after it never happen.
package jobsim

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/ibport/ibsim"
)

// Config describes the simulated job. Zero fields take the documented defaults.
type Config struct {
	Nodes        int // default 4
	RanksPerNode int // 1 to 8, default 8: one rank per GPU
	Steps        int // default 100
	// StepTime is the training step period (default 1s); Jitter varies each step's period
	// uniformly by up to ±Jitter, for every rank alike.
	StepTime, Jitter time.Duration
	// Timestamps asks NCCL (2.26+) for "[%F %T.%6f] " on every line
	// (NCCL_DEBUG_TIMESTAMP_LEVELS=ALL); otherwise only WARN lines carry "[%F %T] " (2.26+).
	Timestamps bool
	// Version is the NCCL release whose formats are written: "2.18" to "2.30.7" (default
	// DefaultVersion).
	Version string
	// PipelineStages splits the nodes into consecutive stages (default 1); it must divide
	// Nodes.
	PipelineStages int
	// Layers is the number of transformer layers whose tensor-parallel ops a step issues
	// (default 2).
	Layers int
	Faults []Fault
	Seed   int64
	// Start is the fake clock's start in Generate (default 2026-01-05 10:00:00 in Location).
	Start time.Time
	// Location is the zone NCCL prints its timestamps in (default time.Local).
	Location *time.Location
	// ClockSkew offsets each node's printed clock by up to ±ClockSkew (default 0).
	ClockSkew time.Duration
	// Hold is how long Run keeps a hung job (processes alive, GPUs spinning or idle) before
	// it returns; 0 holds until the context ends.
	Hold time.Duration
	// InjectionLog, when set, receives one JSON line per injection (when OnInjection is
	// called).
	InjectionLog io.Writer
	// OnInjection, when set, is called at each injection: by Run as it happens, by
	// Generate at its end, in time order.
	OnInjection func(Injection)
	// Workers bounds Generate's parallelism (default GOMAXPROCS).
	Workers int
	// LogsOnly skips the IB sysfs trees (the GPU fakes remain): for load generation at a
	// scale where thousands of small files per node would cost more than the logs.
	LogsOnly bool
}

func (c *Config) defaults() {
	c.Nodes = cmp.Or(c.Nodes, 4)
	c.RanksPerNode = cmp.Or(c.RanksPerNode, 8)
	c.Steps = cmp.Or(c.Steps, 100)
	c.StepTime = cmp.Or(c.StepTime, time.Second)
	c.PipelineStages = cmp.Or(c.PipelineStages, 1)
	c.Layers = cmp.Or(c.Layers, 2)
	if c.Location == nil {
		c.Location = time.Local
	}
	if c.Start.IsZero() {
		c.Start = time.Date(2026, 1, 5, 10, 0, 0, 0, c.Location)
	}
	c.Workers = cmp.Or(c.Workers, runtime.GOMAXPROCS(0))
}

func (c *Config) validate(d dialect) error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("jobsim: Nodes %d: need at least 1", c.Nodes)
	case c.RanksPerNode < 1 || c.RanksPerNode > hcaCount:
		return fmt.Errorf("jobsim: RanksPerNode %d: want 1 to %d (one rank per GPU)", c.RanksPerNode, hcaCount)
	case c.Steps < 1:
		return fmt.Errorf("jobsim: Steps %d: need at least 1", c.Steps)
	case c.StepTime < time.Millisecond:
		return fmt.Errorf("jobsim: StepTime %s: need at least 1ms", c.StepTime)
	case c.Jitter < 0 || c.Jitter >= c.StepTime:
		return fmt.Errorf("jobsim: Jitter %s: want 0 <= Jitter < StepTime", c.Jitter)
	case c.PipelineStages < 1 || c.Nodes%c.PipelineStages != 0:
		return fmt.Errorf("jobsim: PipelineStages %d must divide Nodes %d", c.PipelineStages, c.Nodes)
	case c.Layers < 1 || c.Layers > 64:
		return fmt.Errorf("jobsim: Layers %d: want 1 to 64", c.Layers)
	case c.Timestamps && !d.timestamps():
		return fmt.Errorf("jobsim: NCCL %s has no NCCL_DEBUG_TIMESTAMP_* (2.26+): turn Timestamps off", d)
	case c.ClockSkew < 0 || c.Hold < 0:
		return errors.New("jobsim: ClockSkew and Hold must not be negative")
	}
	return nil
}

// Injection records one fault as it was injected.
type Injection struct {
	Kind FaultKind `json:"kind"`
	Rank int       `json:"rank"`
	Host string    `json:"host"`
	PID  int       `json:"pid"`
	Step int       `json:"step"`
	// Time is when the simulator injected it: the wall clock in Run, the fake clock in
	// Generate. It is the ground truth for detection latency.
	Time time.Time `json:"time"`
	// Benign marks what must not be reported as a fault (a pause).
	Benign bool `json:"benign,omitempty"`
	// Comm and Seq say where the fault shows in the logs: the communicator (as the analysis
	// names it) and the 1-based collective position on it, when the fault has one.
	Comm string `json:"comm,omitempty"`
	Seq  int64  `json:"seq,omitempty"`
	// Positions gives, for every communicator of the rank, the position of the first
	// collective the fault affects: where a detector should place its onset.
	Positions map[string]int64 `json:"positions,omitempty"`
	Detail    string           `json:"detail,omitempty"`
}

// Stats count what was written.
type Stats struct {
	Lines int64 // log lines, the blank line before each WARN included
	Bytes int64
	Files int
}

// Sim is one simulated job. Its query methods are safe to call while Run or Generate runs.
type Sim struct {
	cfg    Config
	dir    string
	d      dialect
	nodes  []*simNode
	ranks  []*simRank
	groups []*group
	byPID  map[int]*simRank
	faults []resolvedFault
	sched  schedule

	// verify, set by tests, parses every written line and records those that do not parse
	// to the kind they were written as.
	verify bool

	// behind is the most the live run fell behind its own schedule (ns): on a machine too
	// busy for it, lines go out late with their scheduled times, and its ranks look still.
	behind atomic.Int64

	mu         sync.Mutex
	started    bool
	injections []Injection
	dead       map[int]bool // crashed pids
	exited     bool         // the job ended cleanly: every process exited
	stats      Stats
	verifyErrs []string
	injectOut  sync.Mutex
}

// New lays out the job under dir: a folder per node with its IB sysfs tree (written now,
// healthy) and, once the job runs, its log files. GPU fakes start idle.
func New(cfg Config, dir string) (*Sim, error) {
	cfg.defaults()
	d, err := parseDialect(cfg.Version)
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(d); err != nil {
		return nil, err
	}
	cfg.Faults = slices.Clone(cfg.Faults)
	s := &Sim{cfg: cfg, dir: filepath.Clean(dir), d: d, byPID: map[int]*simRank{}, dead: map[int]bool{}}
	if err := s.buildTopology(); err != nil {
		return nil, err
	}
	if err := s.resolveFaults(); err != nil {
		return nil, err
	}
	s.buildSchedule()
	for _, n := range s.nodes {
		if err := os.MkdirAll(n.LogDir, 0o755); err != nil {
			return nil, fmt.Errorf("jobsim: %w", err)
		}
		n.ports = make([]ibsim.Port, hcaCount)
		for i := range n.ports {
			n.ports[i] = ibsim.NDR("mlx5_"+strconv.Itoa(i), 1)
			n.ports[i].Counters = map[string]uint64{}
			if cfg.LogsOnly {
				continue
			}
			if err := ibsim.WritePort(n.IBRoot, n.ports[i]); err != nil {
				return nil, fmt.Errorf("jobsim: %w", err)
			}
		}
		for i := 0; i < hcaCount; i++ {
			s.setGPU(n, i, gpuIdle, 0)
		}
	}
	return s, nil
}

// Behind is the most the live run (Run) fell behind its schedule so far: how late it wrote
// a line. A few milliseconds on a machine that keeps up; a simulation that falls seconds
// behind shows ranks still that are not, and its results say more about the machine than
// about the detector.
func (s *Sim) Behind() time.Duration { return time.Duration(s.behind.Load()) }

// Nodes describes the nodes, their ranks, GPU fakes and IB trees.
func (s *Sim) Nodes() []NodeInfo {
	out := make([]NodeInfo, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.NodeInfo
		out[i].Ranks = slices.Clone(n.Ranks)
	}
	return out
}

// Ranks describes every rank, by global rank.
func (s *Sim) Ranks() []RankInfo {
	out := make([]RankInfo, len(s.ranks))
	for i, r := range s.ranks {
		out[i] = r.RankInfo
	}
	return out
}

// Injections returns the injections so far, by time.
func (s *Sim) Injections() []Injection {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.injections)
	sort.SliceStable(out, func(a, b int) bool {
		if !out[a].Time.Equal(out[b].Time) {
			return out[a].Time.Before(out[b].Time)
		}
		return out[a].Rank < out[b].Rank
	})
	return out
}

// Alive reports whether a rank process of the job is alive: false for a pid that is not
// one of its ranks, for a crashed rank, and for every rank once the job ended cleanly.
// A hung job's processes stay alive. It is what a liveness fake should answer.
func (s *Sim) Alive(pid int) bool {
	if s.byPID[pid] == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.dead[pid] && !s.exited
}

// Stats reports what has been written so far.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Hung reports whether the script ends in a hang (the job never reaches its last step).
func (s *Sim) Hung() bool { return s.sched.hangStep >= 0 }

// Config returns the configuration with its defaults filled in.
func (s *Sim) Config() Config {
	c := s.cfg
	c.Faults = slices.Clone(c.Faults)
	return c
}

func (s *Sim) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("jobsim: a Sim runs once")
	}
	s.started = true
	return nil
}

// record keeps an injection; in real time it reports it at once, Generate reports them
// all, in time order, when done.
func (s *Sim) record(in Injection, live bool) {
	s.mu.Lock()
	s.injections = append(s.injections, in)
	s.mu.Unlock()
	if live {
		s.report(in)
	}
}

func (s *Sim) report(in Injection) {
	if s.cfg.InjectionLog != nil {
		b, err := json.Marshal(in)
		if err == nil {
			s.injectOut.Lock()
			_, _ = s.cfg.InjectionLog.Write(append(b, '\n'))
			s.injectOut.Unlock()
		}
	}
	if s.cfg.OnInjection != nil {
		s.cfg.OnInjection(in)
	}
}
