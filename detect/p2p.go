package detect

import (
	"fmt"

	"github.com/ncclwatch/watchdog/incident"
)

// P2PMismatch finds Sends from a to b that do not equal b's Recvs from a, once the
// communicator has stopped moving. The rank with fewer posted is the culprit. Offline, a
// communicator every rank destroyed belongs to a job that finished: an unmatched send there
// did not hang it (small messages complete into NCCL's buffers), but its data was never
// received, which is a bug of the application all the same.
func P2PMismatch(j *Job, cfg Config) []Finding {
	byProc := map[string]*Finding{}
	var order []string
	for _, g := range j.Groups {
		if len(g.Members) < 2 {
			continue
		}
		byRank := map[int]Member{}
		for _, m := range g.Members {
			byRank[m.Comm.Rank] = m
		}
		ok, _ := stalled(j, g, cfg.HangConfig)
		finished := !ok && j.Offline
		if !ok && !finished {
			continue
		}
		for _, a := range g.Members {
			for _, pa := range a.Comm.P2P {
				b, ok := byRank[pa.Peer]
				if !ok {
					continue
				}
				recvs := int64(0)
				for _, pb := range b.Comm.P2P {
					if pb.Peer == a.Comm.Rank {
						recvs = pb.Recvs
					}
				}
				if pa.Sends == recvs {
					continue
				}
				culprit, other := b, a
				what := fmt.Sprintf("rank %d sent %d times to rank %d, which posted only %d receives", a.Comm.Rank, pa.Sends, b.Comm.Rank, recvs)
				if pa.Sends < recvs {
					culprit, other = a, b
					what = fmt.Sprintf("rank %d posted %d receives from rank %d, which sent only %d times", b.Comm.Rank, recvs, a.Comm.Rank, pa.Sends)
				}
				k := culprit.Proc.Key()
				f := byProc[k]
				if f == nil {
					f = &Finding{Kind: incident.KindP2PMismatch, Severity: incident.SeverityCritical, Comm: g.ID,
						Culprits: []incident.Culprit{culprit.Proc.Culprit()}, culpritKeys: []string{k}, Key: "rank:" + k}
					f.Summary = fmt.Sprintf("point-to-point mismatch on communicator %s: %s; culprit %s",
						shortComm(g.ID), what, culprit.Proc.Name())
					if finished {
						f.Severity = incident.SeverityWarning
						f.Summary += "; the job finished (every rank destroyed the communicator), so the unmatched operation completed into NCCL's buffers and its data was never received"
					}
					byProc[k] = f
					order = append(order, k)
				}
				f.Victims++
				f.addEvidence("communicator %s: %s (peer %s)", shortComm(g.ID), what, other.Proc.Name())
			}
		}
	}
	var out []Finding
	for _, k := range order {
		out = append(out, *byProc[k])
	}
	return out
}
