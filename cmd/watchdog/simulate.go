package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/internal/jobsim"
)

// faultFlags collects repeated --fault values.
type faultFlags []jobsim.Fault

func (f *faultFlags) String() string {
	var s []string
	for _, x := range *f {
		s = append(s, x.String())
	}
	return strings.Join(s, " ")
}

func (f *faultFlags) Set(v string) error {
	x, err := jobsim.ParseFault(v)
	if err != nil {
		return err
	}
	*f = append(*f, x)
	return nil
}

// runSimulate writes the NCCL logs, GPU and IB state of a simulated training job, with
// scripted faults; each injection is printed to stdout as a JSON line.
func runSimulate(ctx context.Context, args []string) error {
	fs := newFlags("simulate", `usage: watchdog simulate --out DIR [flags]

Writes a simulated training job's NCCL debug logs (DIR/<node>/nccl.<host>.<pid>.log) and IB
sysfs trees, with scripted faults; prints each injection as a JSON line on stdout.

With --fleet-nodes N it simulates a fleet instead (no --out): --fleet-jobs jobs placed by a
simple scheduler on N nodes, three bad parts (a slow NIC, a throttling GPU, a flaky host)
among background trouble, the jobs' incidents booked through the fleet ledger on an
embedded etcd; it prints how many jobs and hours it took to name each bad part, and the
node incidents on good parts (docs/scale.md). Exits 1 when a bad part went unnamed or a
good one was named.`)
	out := fs.String("out", "", "folder to write the job into: one folder per node with its NCCL logs and sys/class/infiniband (required)")
	nodes := fs.Int("nodes", 4, "nodes")
	perNode := fs.Int("ranks-per-node", 8, "ranks (GPUs) per node, 1 to 8")
	steps := fs.Int("steps", 100, "training steps")
	stepTime := fs.Duration("step-time", time.Second, "training step period")
	jitter := fs.Duration("jitter", 0, "step period varies by up to ± this")
	stamps := fs.Bool("timestamps", false, "µs timestamps on every line (NCCL_DEBUG_TIMESTAMP_LEVELS=ALL, NCCL 2.26+)")
	version := fs.String("nccl-version", jobsim.DefaultVersion, "NCCL release whose log formats to write (2.18 to 2.30.7)")
	stages := fs.Int("pipeline-stages", 1, "pipeline stages (Send/Recv between them); must divide --nodes")
	layers := fs.Int("layers", 2, "transformer layers whose tensor-parallel collectives each step issues")
	seed := fs.Int64("seed", 1, "random seed: the same seed writes the same job")
	realtime := fs.Bool("realtime", false, "write lines as the job runs (wall clock) instead of generating a finished job at once")
	hold := fs.Duration("hold", 0, "with --realtime, how long to keep a hung job before exiting (0: until interrupted)")
	logsOnly := fs.Bool("logs-only", false, "skip the IB sysfs trees (load generation at scale)")
	fleetNodes := fs.Int("fleet-nodes", 0, "simulate a fleet of this many nodes instead of one job (see above)")
	fleetJobs := fs.Int("fleet-jobs", 100, "with --fleet-nodes, the jobs to place")
	asJSON := fs.Bool("json", false, "with --fleet-nodes, print the measurements as JSON")
	var faults faultFlags
	fs.Var(&faults, "fault", "kind:rank:step[:params], repeatable; kinds: "+kindList()+
		"\n(e.g. skip:5:10, wrong-op:9:12, straggler:7:0:200ms, ib-port:3:10:down,warn, pause:0:20:30s, xid:4:8:79)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if *fleetNodes > 0 {
		if err := positiveInt("fleet-jobs", *fleetJobs); err != nil {
			return err
		}
		return simulateFleet(ctx, *fleetNodes, *fleetJobs, *seed, *asJSON)
	}
	if *out == "" || fs.NArg() > 0 {
		return usagef("--out is required and no arguments are taken")
	}
	if *perNode > 8 {
		return usagef("--ranks-per-node %d: at most 8", *perNode)
	}
	if err := errors.Join(positiveInt("nodes", *nodes), positiveInt("ranks-per-node", *perNode), positiveInt("steps", *steps),
		positiveDuration("step-time", *stepTime), notNegative("jitter", jitter.Seconds()), positiveInt("pipeline-stages", *stages),
		notNegative("layers", float64(*layers)), notNegative("hold", hold.Seconds())); err != nil {
		return err
	}
	cfg := jobsim.Config{
		Nodes: *nodes, RanksPerNode: *perNode, Steps: *steps, StepTime: *stepTime, Jitter: *jitter,
		Timestamps: *stamps, Version: *version, PipelineStages: *stages, Layers: *layers,
		Faults: faults, Seed: *seed, Hold: *hold, LogsOnly: *logsOnly, InjectionLog: os.Stdout,
	}
	sim, err := jobsim.New(cfg, *out)
	if err != nil {
		return err
	}
	began := time.Now()
	if *realtime {
		fmt.Fprintf(os.Stderr, "simulating %d ranks on %d nodes in real time under %s (interrupt to stop)\n", *nodes**perNode, *nodes, *out)
		err = sim.Run(ctx)
	} else {
		err = sim.Generate()
	}
	st := sim.Stats()
	fmt.Fprintf(os.Stderr, "wrote %d lines (%d bytes) in %d files under %s in %s", st.Lines, st.Bytes, st.Files, *out, time.Since(began).Round(time.Millisecond))
	if sim.Hung() {
		fmt.Fprint(os.Stderr, "; the job ends hung")
	}
	fmt.Fprintln(os.Stderr)
	return err
}

func kindList() string {
	var s []string
	for _, k := range jobsim.FaultKinds {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}
