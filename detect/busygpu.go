package detect

import (
	"fmt"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// BusyGPU finds communicators where every rank issued the same collective, none moved past
// the hang window, and the GPUs split: most spin in the collective (NVML: full utilization at
// low power) while the others compute at full power. Those have not reached the collective:
// a kernel that does not end or runs far past its step (a hung custom kernel, a GPU fault
// that leaves it busy) holds them, and the spinning ranks wait for them. Only where each rank
// has a GPU of its own: on a shared GPU NVML describes the GPU, not the rank. With the
// plugin, CompletionHang says the same from the op's kernel start.
func BusyGPU(j *Job, cfg Config) []Finding {
	if j.Offline {
		return nil
	}
	var out []Finding
	for _, g := range j.Groups {
		if len(g.Members) < 2 || len(g.Members) < g.NRanks || !level(g) {
			continue
		}
		ok, still := stalled(j, g, cfg.HangConfig)
		if !ok {
			continue
		}
		if gs := splitGPUs(j, g); gs.heldByBusy(j, g) {
			out = append(out, busyGPUHoldsPeers(j, g, gs.busy, still))
		}
	}
	return out
}

// level says whether every member issued the same number of collectives, at least one.
func level(g *Group) bool {
	count := g.Members[0].Comm.Count
	ok := count > 0
	for _, m := range g.Members {
		ok = ok && m.Comm.Count == count
	}
	return ok
}

// gpuSplit counts a communicator's members by what their GPUs do.
type gpuSplit struct {
	waiting, idle, unknown int
	busy                   []Member // computing
}

func splitGPUs(j *Job, g *Group) gpuSplit {
	var s gpuSplit
	for _, m := range g.Members {
		switch gs := gpuOf(j, m.Proc); {
		case gs == nil || gs.State == snapshot.GPUUnknown:
			s.unknown++
		case gs.State == snapshot.GPUWaiting:
			s.waiting++
		case gs.State == snapshot.GPUComputing:
			s.busy = append(s.busy, m)
		default:
			s.idle++
		}
	}
	return s
}

// heldByBusy: some GPUs spin, the others compute, none idles, and no GPU serves two members.
func (s gpuSplit) heldByBusy(j *Job, g *Group) bool {
	return s.waiting > 0 && len(s.busy) > 0 && s.idle == 0 && sharedGPUs(j, g) == 0
}

func busyGPUHoldsPeers(j *Job, g *Group, busy []Member, still time.Duration) Finding {
	first := busy[0].Proc
	f := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Comm: g.ID, Seq: busy[0].Comm.Count,
		Victims: len(g.Members) - len(busy), Key: "rank:" + first.Key()}
	var ps []*Proc
	for _, m := range busy {
		ps = append(ps, m.Proc)
		f.Culprits = append(f.Culprits, m.Proc.Culprit())
		f.culpritKeys = append(f.culpritKeys, m.Proc.Key())
	}
	op := "its last collective"
	if last := busy[0].Comm.Last; last != nil {
		op = describeOp(last)
		f.FaultAt = last.T.Time()
	}
	f.Summary = fmt.Sprintf("%s issued %s at position %d of communicator %s like every rank, but its GPU has been computing, not in the collective, for %s while the others' GPUs spin in it: a kernel that does not end (or a GPU fault) holds them",
		procNames(ps), op, busy[0].Comm.Count, shortComm(g.ID), still.Round(time.Second))
	for _, m := range g.Members {
		if gs := gpuOf(j, m.Proc); gs != nil {
			f.addEvidence("%s GPU: %s", m.Proc.Name(), describeGPU(gs))
		}
	}
	return f
}

// sharedGPUs counts the GPUs that serve more than one member: NVML then describes the GPU,
// not the rank, and a busy reading may be another rank's kernel.
func sharedGPUs(j *Job, g *Group) int {
	seen := map[*snapshot.GPU]int{}
	for _, m := range g.Members {
		if gs := gpuOf(j, m.Proc); gs != nil {
			seen[gs]++
		}
	}
	n := 0
	for _, c := range seen {
		if c > 1 {
			n++
		}
	}
	return n
}
