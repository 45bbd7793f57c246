package detect

import (
	"fmt"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
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
		ok, _ := stalled(j, g, cfg.HangConfig)
		finished := !ok && j.Offline
		if !ok && !finished {
			continue
		}
		type counted struct {
			Member
			counts []snapshot.P2P
			whole  bool
		}
		members := make([]counted, len(g.Members))
		byRank := map[int]counted{}
		for i, m := range g.Members {
			c, whole := p2pCounts(m.Comm)
			members[i] = counted{m, c, whole}
			byRank[m.Comm.Rank] = members[i]
		}
		for _, a := range members {
			for _, pa := range a.counts {
				b, ok := byRank[pa.Peer]
				if !ok || !b.whole {
					continue
				}
				bCounts := b.counts
				recvs := int64(0)
				for _, pb := range bCounts {
					if pb.Peer == a.Comm.Rank {
						recvs = pb.Recvs
					}
				}
				if pa.Sends == recvs {
					continue
				}
				culprit, other := b, a
				what := fmt.Sprintf("rank %d sent %d times to rank %d, which posted only %d receives", a.Comm.Rank, pa.Sends, b.Comm.Rank, recvs)
				waitsSince := pa.LastSend
				if pa.Sends < recvs {
					culprit, other = a, b
					what = fmt.Sprintf("rank %d posted %d receives from rank %d, which sent only %d times", b.Comm.Rank, recvs, a.Comm.Rank, pa.Sends)
					waitsSince = lastRecvFrom(bCounts, a.Comm.Rank)
				}
				if waitsSince == 0 {
					waitsSince = p2pInFlightSince(other.Comm)
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
				// When the unmatched op was posted: a rank killed for it much later (PyTorch's
				// timeout) then stays the p2p culprit, not a crash.
				if t := waitsSince.Time(); waitsSince != 0 && (f.FaultAt.IsZero() || t.Before(f.FaultAt)) {
					f.FaultAt = t
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

// p2pCounts is a member's point-to-point counts per peer: from its log lines, else from the
// profiler plugin's per-peer sends and receives issued. whole says that a peer missing from
// them posted none: the log lists every peer, the plugin up to snapshot.MaxPeers, past
// which a missing peer may only have been left out.
func p2pCounts(c *snapshot.Comm) (counts []snapshot.P2P, whole bool) {
	if len(c.P2P) > 0 || c.Done == nil {
		return c.P2P, true
	}
	byPeer := map[int]int{}
	for _, pp := range c.Done.Peers {
		if pp.P2PIssued == 0 {
			continue
		}
		i, ok := byPeer[pp.Peer]
		if !ok {
			i = len(counts)
			byPeer[pp.Peer] = i
			counts = append(counts, snapshot.P2P{Peer: pp.Peer})
		}
		if pp.Dir == snapshot.DirSend {
			counts[i].Sends = max(counts[i].Sends, pp.P2PIssued)
		} else {
			counts[i].Recvs = max(counts[i].Recvs, pp.P2PIssued)
		}
	}
	return counts, len(c.Done.Peers) < snapshot.MaxPeers
}

func lastRecvFrom(counts []snapshot.P2P, peer int) snapshot.Micros {
	for _, c := range counts {
		if c.Peer == peer {
			return c.LastRecv
		}
	}
	return 0
}

// p2pInFlightSince is when the point-to-point op a member's plugin shows pending was issued.
func p2pInFlightSince(c *snapshot.Comm) snapshot.Micros {
	if c.Done == nil || c.Done.InFlight == nil || !c.Done.InFlight.P2P {
		return 0
	}
	return c.Done.InFlight.T
}
