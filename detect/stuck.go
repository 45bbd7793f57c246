package detect

import (
	"fmt"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// StuckInFlight finds communicators where every rank entered the same collective and none
// moved past the hang window while their GPUs spin: the collective itself does not finish,
// which points at the network path or a GPU. The same picture with idle GPUs is a pause
// (checkpoint, data loader): reported as paused, never as an incident.
func StuckInFlight(j *Job, cfg Config) ([]Finding, []string) {
	if j.Offline {
		return nil, nil
	}
	var out []Finding
	var paused []string
	for _, g := range j.Groups {
		if len(g.Members) < 2 || len(g.Members) < g.NRanks || !level(g) {
			continue
		}
		count := g.Members[0].Comm.Count
		ok, still := stalled(j, g, cfg.HangConfig)
		if !ok {
			continue
		}
		gs := splitGPUs(j, g)
		if gs.heldByBusy(j, g) {
			continue // BusyGPU names them
		}
		waiting, idle, unknown := gs.waiting, gs.idle+len(gs.busy), gs.unknown
		if waiting == 0 || waiting < len(g.Members)-unknown {
			if idle > 0 {
				paused = append(paused, g.ID)
			}
			continue
		}
		last := g.Members[0].Comm.Last
		f := Finding{Kind: incident.KindStuckInFlight, Severity: incident.SeverityCritical, Comm: g.ID, Seq: count,
			Victims: len(g.Members), Key: fmt.Sprintf("stuck:%s:%d", g.ID, count)}
		op := "its last collective"
		if last != nil {
			op = describeOp(last)
			f.Ops = map[string]incident.Op{"all": Op(last)}
			f.FaultAt = last.T.Time()
		}
		f.Summary = fmt.Sprintf("all %d ranks of communicator %s entered %s at position %d and none completed it for %s while their GPUs spin: suspect the network path or a GPU",
			len(g.Members), shortComm(g.ID), op, count, still.Round(time.Second))
		nodes := map[string]bool{}
		for _, m := range g.Members {
			f.culpritKeys = append(f.culpritKeys, m.Proc.Key())
			if !nodes[m.Proc.Node] {
				nodes[m.Proc.Node] = true
				f.Culprits = append(f.Culprits, m.Proc.Culprit())
			}
			if gs := gpuOf(j, m.Proc); gs != nil {
				f.addEvidence("%s GPU: %s", m.Proc.Name(), describeGPU(gs))
			}
		}
		out = append(out, f)
	}
	return out, paused
}
