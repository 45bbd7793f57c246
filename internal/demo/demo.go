// Package demo runs the whole watchdog on one machine: an embedded etcd, simulated jobs
// (jobsim) whose nodes each get a real sidecar (log follower, parser, fake-NVML sampler,
// IB sysfs sampler, liveness), and the live detector with a console notifier. Each scenario
// is a job that runs healthy, meets its fault, is detected, and ends; the result says what
// was detected and how long after the fault. `watchdog demo` and the end-to-end tests use it.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/detect/live"
	"github.com/ncclwatch/watchdog/heartbeat/proc"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/jobsim"
)

// Scenario is one simulated job and what the detector must find in it.
type Scenario struct {
	Name string
	// Fault is injected at FaultStep; none for healthy.
	Faults []jobsim.Fault
	// Expect is the incident kind that must open (empty: none may).
	Expect incident.Kind
	// Steps and StepTime shape the job; the job ends after Steps or when Deadline passes.
	Steps    int
	StepTime time.Duration
	// Deadline bounds the scenario; after detection the job is stopped early (recovery).
	Deadline time.Duration
	// Linger keeps the job running this long after detection before stopping it.
	Linger time.Duration
}

// Scenarios are the built-in ones, by name, for a job of nodes × ranksPerNode ranks. Faults
// hit ranks away from rank 0 and on different nodes, as real ones would.
func Scenarios(nodes, ranksPerNode int) map[string]Scenario {
	const st = 250 * time.Millisecond
	n := nodes * ranksPerNode
	pick := func(node, local int) int { return min(node%nodes*ranksPerNode+local%ranksPerNode, n-1) }
	f := func(k jobsim.FaultKind, rank int) []jobsim.Fault {
		return []jobsim.Fault{{Kind: k, Rank: rank, Step: 12, Op: -1}}
	}
	straggle := f(jobsim.FaultStraggler, pick(3, 6))
	straggle[0].Delay = st / 5 // +20% step time
	pause := f(jobsim.FaultPause, 0)
	pause[0].Duration = 60 * time.Second
	return map[string]Scenario{
		"healthy":         {Name: "healthy", Steps: 60, StepTime: st, Deadline: 20 * time.Second},
		"silent":          {Name: "silent", Faults: f(jobsim.FaultSilent, pick(1, 5)), Expect: incident.KindHang, Steps: 400, StepTime: st, Deadline: 45 * time.Second, Linger: 3 * time.Second},
		"crash":           {Name: "crash", Faults: f(jobsim.FaultCrash, pick(2, 5)), Expect: incident.KindCrash, Steps: 400, StepTime: st, Deadline: 45 * time.Second, Linger: 3 * time.Second},
		"mismatch":        {Name: "mismatch", Faults: f(jobsim.FaultWrongSize, pick(1, 1)), Expect: incident.KindMismatch, Steps: 400, StepTime: st, Deadline: 30 * time.Second, Linger: 3 * time.Second},
		"straggler":       {Name: "straggler", Faults: straggle, Expect: incident.KindStraggler, Steps: 400, StepTime: st, Deadline: 50 * time.Second, Linger: 3 * time.Second},
		"degraded-link":   {Name: "degraded-link", Faults: f(jobsim.FaultIBPort, pick(2, 1)), Expect: incident.KindLink, Steps: 400, StepTime: st, Deadline: 30 * time.Second, Linger: 3 * time.Second},
		"stuck-in-flight": {Name: "stuck-in-flight", Faults: f(jobsim.FaultStuck, 0), Expect: incident.KindStuckInFlight, Steps: 400, StepTime: st, Deadline: 45 * time.Second, Linger: 3 * time.Second},
		// The job ends 17 s after the pause (80 steps in all): enough to see it resume quietly.
		"pause": {Name: "pause", Faults: pause, Steps: 80, StepTime: st, Deadline: 95 * time.Second},
	}
}

// AllScenarios is the order of `--scenario all` (the 60 s pause is separate: it is long).
var AllScenarios = []string{"healthy", "silent", "crash", "mismatch", "straggler", "degraded-link", "stuck-in-flight"}

// Options configure a demo run.
type Options struct {
	Scenarios    []string
	Nodes        int // default 4
	RanksPerNode int // default 8
	// Out receives the story (incidents as they open and resolve, a summary); nil: discard.
	Out io.Writer
	// Notify names real notifiers that get the incidents too, beside the console story.
	Notify Notifiers
	Logger *slog.Logger
	// Dir holds the simulated jobs (default: a temporary directory, removed at the end).
	Dir string
	// HTTP, when set, serves the detector's API, /metrics, /healthz and /readyz there while
	// the demo runs (`watchdog status` and curl can look at it); Stay keeps them up after
	// the summary until ctx ends.
	HTTP string
	Stay bool
	// Program is how the hints invoke this binary (default "watchdog").
	Program string
}

// Detected is one incident seen during a scenario.
type Detected struct {
	ID                   string             `json:"id"`
	Kind                 incident.Kind      `json:"kind"`
	Culprits             []incident.Culprit `json:"culprits"`
	Summary              string             `json:"summary"`
	DetectedAfterSeconds float64            `json:"detected_after_seconds"`
	Resolved             bool               `json:"resolved"`
}

// Result is one scenario's outcome.
type Result struct {
	Scenario   string             `json:"scenario"`
	Expect     incident.Kind      `json:"expect,omitempty"`
	Injections []jobsim.Injection `json:"injections,omitempty"`
	Incidents  []Detected         `json:"incidents"`
	OK         bool               `json:"ok"`
	Note       string             `json:"note,omitempty"`
	// Unjudged is set on a scenario that went wrong while this machine was too slow for
	// it (its timers ran late beyond what the scenario stands): then OK is false, but the
	// failure is not the detector's to answer for, and Unjudged says so plainly.
	Unjudged string `json:"unjudged,omitempty"`
	// TimerLateP99Ms and TimerLateMaxMs are how late this process's timers fired during
	// the scenario (99th percentile and worst): how busy the machine was.
	TimerLateP99Ms float64 `json:"timer_late_p99_ms"`
	TimerLateMaxMs float64 `json:"timer_late_max_ms"`
	// SimBehindMs is the most the simulated job fell behind its own schedule.
	SimBehindMs float64 `json:"sim_behind_ms"`
}

// Run runs the scenarios side by side on one etcd and one detector. With real notifiers
// (Options.Notify) that failed to deliver an incident, it returns the results and an error
// that names them.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 4
	}
	if opts.RanksPerNode == 0 {
		opts.RanksPerNode = 8
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	alerts, build, err := opts.Notify.config()
	if err != nil {
		return nil, err
	}
	all := Scenarios(opts.Nodes, opts.RanksPerNode)
	var scs []Scenario
	for _, name := range opts.Scenarios {
		sc, ok := all[name]
		if !ok {
			return nil, fmt.Errorf("demo: no scenario %q (have %s, all)", name, strings.Join(slices.Sorted(maps.Keys(all)), ", "))
		}
		scs = append(scs, sc)
	}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "ncclwatch-demo-*")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: etcd.Endpoints()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	story := &storyWriter{w: opts.Out, start: time.Now()}
	// The real notifiers are built here rather than by the detector, so that their
	// deliveries can be counted and reported (the demo's log is discarded).
	built, err := alerts.Targets(build)
	if err != nil {
		return nil, err
	}
	targets := []alert.Target{{Notifier: story, Settings: consoleSettings()}}
	var recs []*recorded
	for _, t := range built {
		r := newRecorded(t.Notifier, story)
		recs = append(recs, r)
		targets = append(targets, alert.Target{Notifier: r, Settings: t.Settings})
	}
	reg := prometheus.NewRegistry()
	det, err := assemble.Detector(cli, assemble.DetectorConfig{Interval: 500 * time.Millisecond, ResolveAfter: 2 * time.Second,
		LeaseTTL: 5 * time.Second, Logger: opts.Logger, Registerer: reg,
		Alerts: assemble.Alerts(&alert.Config{}, cli, assemble.AlertOptions{Build: build, Logger: opts.Logger, Targets: targets})})
	if err != nil {
		return nil, err
	}
	dctx, stopDetector := context.WithCancel(ctx)
	var dwg sync.WaitGroup
	dwg.Add(1)
	go func() { defer dwg.Done(); det.Run(dctx) }()
	defer func() { stopDetector(); dwg.Wait() }()

	probe := newMachineProbe(20 * time.Millisecond)
	pctx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	go probe.run(pctx)

	fmt.Fprintf(opts.Out, "ncclwatch demo: %d scenario(s), %d nodes x %d ranks each, embedded etcd at %s\n",
		len(scs), opts.Nodes, opts.RanksPerNode, etcd.Endpoints()[0])
	if opts.HTTP != "" {
		addr, closeHTTP, err := serve(ctx, opts.HTTP, assemble.DetectorHandler(det, reg))
		if err != nil {
			return nil, err
		}
		defer closeHTTP()
		writeTryNext(opts.Out, opts.Program, addr, opts.Stay)
	}
	results := make([]Result, len(scs))
	var wg sync.WaitGroup
	for i, sc := range scs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			results[i] = runScenario(ctx, opts, sc, filepath.Join(dir, sc.Name), cli, det, story)
			p99, worst := probe.lateness(start, time.Now())
			r := &results[i]
			r.TimerLateP99Ms, r.TimerLateMaxMs = ms(p99), ms(worst)
			if !r.OK {
				r.Unjudged = unjudged(sc, p99, worst, time.Duration(r.SimBehindMs*float64(time.Millisecond)))
			}
		}()
	}
	wg.Wait()
	// Let the resolves reach the console.
	time.Sleep(2500 * time.Millisecond)
	for i := range results {
		markResolved(det, &results[i])
	}
	writeSummary(opts.Out, results)
	writeMachine(opts.Out, results)
	// The results stand; a real notifier that failed to deliver makes the run fail.
	err = writeDeliveries(opts.Out, recs)
	if opts.HTTP != "" && opts.Stay {
		fmt.Fprintln(opts.Out, "\nThe detector stays up (--stay): interrupt (Ctrl-C) to end.")
		<-ctx.Done()
	}
	return results, err
}

func ms(d time.Duration) float64 { return roundS(float64(d) / float64(time.Millisecond)) }

func consoleSettings() alert.Settings {
	s := alert.DefaultSettings()
	s.GroupWait = 0
	return s
}

// runScenario runs one job: its simulator and one sidecar per node, until the expected
// incident opened and lingered, or the deadline.
func runScenario(ctx context.Context, opts Options, sc Scenario, dir string, cli *clientv3.Client, det *live.Detector, story *storyWriter) Result {
	res := Result{Scenario: sc.Name, Expect: sc.Expect, Incidents: []Detected{}}
	job := "demo-" + sc.Name
	sim, err := jobsim.New(jobsim.Config{Nodes: opts.Nodes, RanksPerNode: opts.RanksPerNode, Steps: sc.Steps, StepTime: sc.StepTime,
		Jitter: sc.StepTime / 50, Timestamps: true, Faults: sc.Faults, Seed: 7}, dir)
	if err != nil {
		res.Note = err.Error()
		return res
	}
	var injMu sync.Mutex
	sctx, cancel := context.WithTimeout(ctx, sc.Deadline)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range sim.Nodes() {
		side, release, err := assemble.Sidecar(sctx, cli, assemble.SidecarConfig{Job: job, Node: n.Name,
			LogPatterns: []string{filepath.Join(n.LogDir, "*.log")}, SampleEvery: 500 * time.Millisecond,
			Publish:    assemble.PublishConfig{LeaseTTL: 5 * time.Second, Interval: 500 * time.Millisecond},
			GPULibrary: n.GPUs, GPUWindow: 1500 * time.Millisecond, Ports: true, IBRoot: n.IBRoot, NetRoot: filepath.Join(dir, "no-net"),
			Liveness: &simLiveness{sim: sim}, Logger: opts.Logger})
		if err != nil {
			res.Note = err.Error()
			return res
		}
		defer release()
		wg.Add(1)
		go func() { defer wg.Done(); side.Run(sctx) }()
	}
	simDone := make(chan error, 1)
	go func() { simDone <- sim.Run(sctx) }()
	story.printf("%-16s job %s started: %d ranks on %d nodes, step %s", sc.Name, job, opts.Nodes*opts.RanksPerNode, opts.Nodes, sc.StepTime)

	deadline := time.NewTimer(sc.Deadline)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var detectedAt time.Time
	injected := false
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline.C:
			break loop
		case <-simDone:
			simDone = nil
			if sc.Expect == "" && detectedAt.IsZero() {
				break loop
			}
		case <-tick.C:
		}
		injMu.Lock()
		if ins := sim.Injections(); len(ins) > 0 && !injected {
			injected = true
			res.Injections = ins
			story.printf("%-16s fault injected: %s on rank %d (%s pid %d) at step %d", sc.Name, ins[0].Kind, ins[0].Rank, ins[0].Host, ins[0].PID, ins[0].Step)
		}
		injMu.Unlock()
		collect(det, job, &res)
		if sc.Expect != "" && detectedAt.IsZero() {
			for _, d := range res.Incidents {
				if d.Kind == sc.Expect {
					detectedAt = time.Now()
				}
			}
		}
		if !detectedAt.IsZero() && time.Since(detectedAt) >= sc.Linger {
			break loop
		}
	}
	// Recovery: the job is stopped (a restart from checkpoint, say); the sidecars stop
	// cleanly and the detector resolves the job's incidents.
	cancel()
	wg.Wait()
	if simDone != nil {
		<-simDone
	}
	res.Injections = sim.Injections()
	res.SimBehindMs = ms(sim.Behind())
	collect(det, job, &res)
	res.OK = judge(sc, &res)
	story.printf("%-16s job stopped (recovery)", sc.Name)
	return res
}

// collect refreshes the scenario's incidents and their detection latency.
func collect(det *live.Detector, job string, res *Result) {
	var fault time.Time
	for _, in := range res.Injections {
		if !in.Benign {
			fault = in.Time
			break
		}
	}
	for _, inc := range det.Incidents(job, "") {
		d := Detected{ID: inc.ID, Kind: inc.Kind, Culprits: inc.Culprits, Summary: inc.Summary, Resolved: inc.State == incident.StateResolved}
		if !fault.IsZero() {
			d.DetectedAfterSeconds = roundS(inc.OpenedAt.Sub(fault).Seconds())
		}
		found := false
		for i := range res.Incidents {
			if res.Incidents[i].ID == d.ID {
				res.Incidents[i].Resolved = d.Resolved
				found = true
			}
		}
		if !found {
			res.Incidents = append(res.Incidents, d)
		}
	}
}

func markResolved(det *live.Detector, res *Result) {
	job := "demo-" + res.Scenario
	for _, inc := range det.Incidents(job, "") {
		for i := range res.Incidents {
			if res.Incidents[i].ID == inc.ID {
				res.Incidents[i].Resolved = inc.State == incident.StateResolved
			}
		}
	}
}

func roundS(s float64) float64 { return float64(int64(s*100+0.5)) / 100 }

// judge says whether the scenario went as it must: the expected kind naming the faulty
// rank and nothing else (every other incident about the job is a false one), or no incident
// about the job at all for healthy jobs and pauses. Monitoring incidents are about the
// watchdog (a sidecar that ran late on this machine), not the job: they are shown, not judged.
func judge(sc Scenario, res *Result) bool {
	var job []Detected
	for _, d := range res.Incidents {
		if !d.Kind.Monitoring() {
			job = append(job, d)
		}
	}
	if sc.Expect == "" {
		if len(job) > 0 {
			res.Note = fmt.Sprintf("%d incident(s) on a job that had no fault", len(job))
			return false
		}
		return true
	}
	var rank int = -1
	var host string
	for _, in := range res.Injections {
		if !in.Benign {
			rank, host = in.Rank, in.Host
			break
		}
	}
	names := func(d Detected) bool {
		for _, c := range d.Culprits {
			if (c.Rank == rank && c.Rank >= 0) || (sc.Expect == incident.KindLink && c.Host == host) || sc.Expect == incident.KindStuckInFlight {
				return true
			}
		}
		return false
	}
	hit := false
	var wrong []string
	for _, d := range job {
		if !hit && d.Kind == sc.Expect && names(d) {
			hit = true
			continue
		}
		wrong = append(wrong, fmt.Sprintf("%s naming %s", d.Kind, culprit(d.Culprits)))
	}
	switch {
	case !hit && len(wrong) == 0:
		res.Note = fmt.Sprintf("no %s incident", sc.Expect)
	case !hit:
		res.Note = fmt.Sprintf("no %s incident naming rank %d on %s; instead %s", sc.Expect, rank, host, strings.Join(wrong[:min(len(wrong), 3)], ", "))
	case len(wrong) > 0:
		res.Note = fmt.Sprintf("%d false incident(s) beside the right one: %s", len(wrong), strings.Join(wrong[:min(len(wrong), 3)], ", "))
	}
	return hit && len(wrong) == 0
}

// simLiveness answers for the simulated processes as /proc would for real ones.
type simLiveness struct {
	sim     *jobsim.Sim
	mu      sync.Mutex
	watched map[int]bool
}

func (l *simLiveness) Watch(pid int) (proc.Info, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.watched == nil {
		l.watched = map[int]bool{}
	}
	l.watched[pid] = true
	return l.infoLocked(pid), nil
}

func (l *simLiveness) Info(pid int) (proc.Info, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.watched[pid] {
		return proc.Info{}, false
	}
	return l.infoLocked(pid), true
}

func (l *simLiveness) infoLocked(pid int) proc.Info {
	st := proc.Running
	if !l.sim.Alive(pid) {
		st = proc.Exited
	}
	return proc.Info{PID: pid, State: st}
}

func (l *simLiveness) Unwatch(pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.watched, pid)
}

func (l *simLiveness) Run(ctx context.Context, onExit func(pid int, at time.Time)) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		var gone []int
		for pid := range l.watched {
			if !l.sim.Alive(pid) {
				gone = append(gone, pid)
				delete(l.watched, pid)
			}
		}
		l.mu.Unlock()
		for _, pid := range gone {
			onExit(pid, time.Now())
		}
	}
}
