package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// describeOp is "AllReduce(count 250000 float32 sum)".
func describeOp(o *snapshot.Op) string {
	s := fmt.Sprintf("%s(count %d %s", o.Op, o.Count, o.Dtype)
	if o.Red != "" {
		s += " " + o.Red
	}
	if o.Root != 0 {
		s += fmt.Sprintf(" root %d", o.Root)
	}
	return s + ")"
}

// shortComm abbreviates a communicator identity for sentences.
func shortComm(id string) string {
	if len(id) > 40 {
		return id[:37] + "..."
	}
	return id
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "unknown time"
	}
	return t.UTC().Format("15:04:05.000Z")
}

// processEvidence adds what is known about a culprit process: liveness and its GPU.
func processEvidence(j *Job, p *Proc, f *Finding) {
	switch p.State {
	case snapshot.ProcExited:
		f.addEvidence("the process has exited (at %s)", fmtTime(p.ExitedAt.Time()))
		if cleanExit(p) {
			// Peers still wait in a collective it will never call.
			f.addEvidence("it destroyed its communicators before exiting: it ended early (fewer steps or batches than its peers, an early return), not a crash")
		}
	case snapshot.ProcRunning:
		f.addEvidence("the process is still alive")
	}
	if g := gpuOf(j, p); g != nil && p.State != snapshot.ProcExited {
		f.addEvidence("its GPU %d: %s", g.Index, describeGPU(g))
		if n, _ := ranksOnGPU(j, p, g); n > 1 {
			// NVML's state of a GPU several ranks share is the GPU's, not this rank's.
			f.addEvidence("its GPU serves %d of the job's ranks: its state is theirs together", n)
			return
		}
		switch g.State {
		case snapshot.GPUIdle:
			f.addEvidence("its GPU is idle: the host code is stuck before the collective (data loader, deadlock, I/O), not NCCL")
		case snapshot.GPUWaiting:
			f.addEvidence("its GPU spins in an NCCL kernel: it waits on a collective of another communicator")
		}
	}
	if p.LastLine != 0 && !j.Offline {
		f.addEvidence("its last NCCL log line was %s ago", j.Now.Sub(p.LastLine.Time()).Round(100*time.Millisecond))
	}
}

// gpuOf finds the GPU sample of a process's device by bus id on its node.
func gpuOf(j *Job, p *Proc) *snapshot.GPU {
	n := j.Nodes[p.Node]
	if n == nil {
		return nil
	}
	var found *snapshot.GPU
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if p.BusID != "" && strings.EqualFold(strings.TrimLeft(g.BusID, "0"), strings.TrimLeft(p.BusID, "0")) {
			found = g
			break
		}
	}
	if found == nil && p.BusID == "" {
		// Without its Init line (a job logging at WARN) the rank's bus id is unknown: its
		// pid among a GPU's processes names the GPU where the pid namespaces agree.
		for i := range n.GPUs {
			for _, q := range n.GPUs[i].Procs {
				if p.PID > 0 && q.PID == p.PID {
					found = &n.GPUs[i]
				}
			}
		}
	}
	if found != nil && found.T != 0 && !j.Now.IsZero() && j.Now.Sub(found.T.Time()) > staleGPUSample {
		return nil // what a stuck sampler last saw is not what the GPU does now
	}
	return found
}

// staleGPUSample: GPUs are sampled every second; a sample this old means the sampler (or
// the node's publishing) stalled, and a rule must not read a pause as a spin from it.
const staleGPUSample = 5 * time.Second

func describeGPU(g *snapshot.GPU) string {
	s := fmt.Sprintf("%d%% util, %.0f W", g.Util, g.PowerW)
	if g.PowerLimitW > 0 {
		s += fmt.Sprintf(" of %.0f W", g.PowerLimitW)
	}
	if g.SMClockMHz > 0 {
		s += fmt.Sprintf(", SM %d MHz", g.SMClockMHz)
		if g.SMMaxMHz > 0 {
			s += fmt.Sprintf(" of %d", g.SMMaxMHz)
		}
	}
	if g.TempC > 0 {
		s += fmt.Sprintf(", %d C", g.TempC)
	}
	if len(g.Reasons) > 0 {
		s += ", clock events " + strings.Join(g.Reasons, "+")
	}
	if g.State != "" {
		s += ", state " + string(g.State)
	}
	return s
}
