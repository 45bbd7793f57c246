package detect

import (
	"fmt"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/detect/blame"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The edge producers: each reads one kind of evidence about a stalled communicator and
// says who waits for whom there, as open waits of the waits-for graph (waitgraph.go).
// roots.go follows them to their roots and says what each root did.

// HangConfig sets the hang window of the log evidence. A log says a rank issued an op, not
// that it completed, so a communicator counts as stalled once it has not moved for
// max(HangFloor, HangK × its recent p99 gap between ops): one that still moves may catch up.
//
// Certainty decides severity: a wait whose root is certain (a dead or stopped process, a
// mismatch) pages at once; a rank that is alive and only not issuing may be pausing
// (evaluation, a checkpoint), so its wait is a warning until it lasts PageAfter, or PauseK
// times the longest pause the job itself recovered from, whichever is longer.
type HangConfig struct {
	HangFloor time.Duration `yaml:"hang_floor"`
	HangK     float64       `yaml:"hang_k"`
	PageAfter time.Duration `yaml:"page_after"`
	PauseK    float64       `yaml:"pause_k"`
	// AbandonedAfter: a communicator that a member ended while another member, still in
	// it, has issued past that point waits for an op that can never complete; it counts as
	// stalled once it sat still this long (a rank's log may lag its plugin's last word).
	AbandonedAfter time.Duration `yaml:"abandoned_after"`
}

// PageWindow is how long an uncertain wait lasts before it pages, given the longest pause
// the job recovered from.
func (c HangConfig) PageWindow(longestPause time.Duration) time.Duration {
	return max(c.PageAfter, time.Duration(c.PauseK*float64(longestPause)))
}

// HangWindow is how long a communicator may sit still, given its recent pace.
func (c HangConfig) HangWindow(g *Group) time.Duration {
	return max(c.HangFloor, time.Duration(c.HangK*float64(p99Gap(recentGaps(g)))))
}

// p99Gap is the 99th percentile of gaps (µs) between ops, 0 with fewer than 4 of them.
func p99Gap(gaps []int64) time.Duration {
	if len(gaps) < 4 {
		return 0
	}
	sort.Slice(gaps, func(a, b int) bool { return gaps[a] < gaps[b] })
	return time.Duration(gaps[min(len(gaps)-1, len(gaps)*99/100)]) * time.Microsecond
}

// opGaps are the µs between a communicator's recent ops at consecutive positions.
func opGaps(c *snapshot.Comm) []int64 {
	var gaps []int64
	r := c.Recent
	for i := 1; i < len(r); i++ {
		if r[i].Seq == r[i-1].Seq+1 && r[i].T > 0 && r[i-1].T > 0 && r[i].T >= r[i-1].T {
			gaps = append(gaps, int64(r[i].T-r[i-1].T))
		}
	}
	return gaps
}

// recentGaps are the µs between successive ops of the most advanced member.
func recentGaps(g *Group) []int64 {
	if lead := leader(g); lead.Comm != nil {
		return opGaps(lead.Comm)
	}
	return nil
}

// behind is a member behind the most advanced member of its communicator.
type behind struct {
	group          *Group
	member, leader Member
}

// leader is the most advanced member of a communicator (the first of them).
func leader(g *Group) Member {
	var best Member
	for _, m := range g.Members {
		if best.Comm == nil || m.Comm.Count > best.Comm.Count {
			best = m
		}
	}
	return best
}

// lastProgress is the newest op time of any member on the communicator.
func lastProgress(g *Group) snapshot.Micros {
	var t snapshot.Micros
	for _, m := range g.Members {
		if m.Comm.Last != nil && m.Comm.Last.T > t {
			t = m.Comm.Last.T
		}
		for _, p := range m.Comm.P2P {
			t = max(t, p.LastSend, p.LastRecv)
		}
	}
	return t
}

// stalled says whether a communicator has not moved for its hang window (live), or is in
// its final state (offline: a communicator destroyed by every member is not stalled). Live,
// once every member has exited, the first death ends what can be observed: a communicator
// that was moving until its job was killed did not hang, however long ago that was.
func stalled(j *Job, g *Group, cfg HangConfig) (bool, time.Duration) {
	if j.Offline {
		for _, m := range g.Members {
			if m.Comm.State != snapshot.CommDestroyed {
				return true, 0
			}
		}
		return false, 0
	}
	last := lastProgress(g)
	if last == 0 {
		return false, 0
	}
	if abandoned(g) {
		if still := j.Now.Sub(last.Time()); still >= cfg.AbandonedAfter+j.InputLag {
			return true, still
		}
	}
	end := j.Now
	if died, ok := allExited(g); ok && died.Before(end) {
		end = died
	}
	still := end.Sub(last.Time())
	return still >= cfg.HangWindow(g)+j.InputLag, still
}

// abandoned says whether a member ended the communicator (destroyed or aborted it) at a
// position a member that has not ended it has passed: the ops beyond it can never complete,
// so the communicator is stalled once it sat still for AbandonedAfter, whatever its pace.
func abandoned(g *Group) bool {
	var ended, ahead int64 = -1, -1
	for _, m := range g.Members {
		if m.Comm.State.Ended() {
			if ended < 0 || m.Comm.Count < ended {
				ended = m.Comm.Count
			}
		} else {
			ahead = max(ahead, m.Comm.Count)
		}
	}
	return ended >= 0 && ahead > ended
}

// allExited says whether every member's process has exited, and when the first did.
func allExited(g *Group) (time.Time, bool) {
	var first snapshot.Micros
	for _, m := range g.Members {
		p := m.Proc
		if p.State != snapshot.ProcExited || p.ExitedAt == 0 {
			return time.Time{}, false
		}
		if first == 0 || p.ExitedAt < first {
			first = p.ExitedAt
		}
	}
	return first.Time(), first != 0
}

// maxCommEdges bounds the waits one communicator's evidence adds (a 100k-rank world where
// half the ranks stopped): past it each waiter waits for some of the awaited and each
// awaited is waited for by some waiter, so every root is still found.
const maxCommEdges = 1 << 16

// connect makes the waits of every waiter for every awaited process, within maxCommEdges.
func connect(waiters, awaited []*Proc, wait func(w, a *Proc) Wait) []Wait {
	if len(waiters) == 0 || len(awaited) == 0 {
		return nil
	}
	out := make([]Wait, 0, min(len(waiters)*len(awaited), max(len(waiters), len(awaited), maxCommEdges)))
	if len(waiters)*len(awaited) <= maxCommEdges {
		for _, w := range waiters {
			for _, a := range awaited {
				out = append(out, wait(w, a))
			}
		}
		return out
	}
	for i := range max(len(waiters), len(awaited)) {
		out = append(out, wait(waiters[i%len(waiters)], awaited[i%len(awaited)]))
	}
	return out
}

// behindWaits reads the logs' counts: on a communicator that has not moved for its hang
// window, the members that reached op lo+1 wait for those still at lo, which never issued it.
func behindWaits(j *Job, g *Group, cfg Config) []Wait {
	lo, hi := int64(1<<62), int64(-1)
	for _, m := range g.Members {
		lo, hi = min(lo, m.Comm.Count), max(hi, m.Comm.Count)
	}
	if lo == hi {
		return nil
	}
	ok, still := stalled(j, g, cfg.HangConfig)
	if !ok {
		return nil
	}
	var waiters, awaited []*Proc
	for _, m := range g.Members {
		if m.Comm.Count == lo {
			awaited = append(awaited, m.Proc)
		} else {
			waiters = append(waiters, m.Proc)
		}
	}
	if pastEnd(g, lo, waiters, awaited) {
		return pastEndWaits(j, g, lo, awaited, waiters, still)
	}
	return connect(waiters, awaited, func(w, a *Proc) Wait {
		return Wait{Waiter: w, Awaited: a, Comm: g.ID, Seq: lo + 1, Class: blame.WaitHost, Since: j.Now.Add(-still), For: still,
			Open: true, Seen: blame.SeenBehind}
	})
}

// spinning reads GPU power where nothing better is known: every member issued the same
// collective, none moved past the hang window, and their GPUs spin. The collective itself
// does not finish (the network path or a GPU): the finding names every rank. The same
// picture with idle GPUs is a pause (checkpoint, data loader), never an incident; with
// some GPUs computing, BusyGPU names them.
func spinning(j *Job, g *Group, cfg Config) (f *Finding, paused bool) {
	if len(g.Members) < g.NRanks || !level(g) {
		return nil, false
	}
	ok, still := stalled(j, g, cfg.HangConfig)
	if !ok {
		return nil, false
	}
	gs := splitGPUs(j, g)
	if gs.heldByBusy(j, g) {
		return nil, false
	}
	if gs.waiting == 0 || gs.waiting < len(g.Members)-gs.unknown {
		return nil, gs.idle+len(gs.busy) > 0
	}
	count := g.Members[0].Comm.Count
	s := Finding{Kind: incident.KindStuckInFlight, Severity: incident.SeverityCritical, Comm: g.ID, Seq: count,
		Victims: len(g.Members), Key: fmt.Sprintf("stuck:%s:%d", g.ID, count)}
	op := "its last collective"
	if last := g.Members[0].Comm.Last; last != nil {
		op = describeOp(last)
		s.Ops = map[string]incident.Op{"all": Op(last)}
		s.FaultAt = last.T.Time()
	}
	s.Summary = fmt.Sprintf("all %d ranks of communicator %s entered %s at position %d and none completed it for %s while their GPUs spin: suspect the network path or a GPU",
		len(g.Members), shortComm(g.ID), op, count, still.Round(time.Second))
	nodes := map[string]bool{}
	for _, m := range g.Members {
		s.culpritKeys = append(s.culpritKeys, m.Proc.Key())
		if !nodes[m.Proc.Node] {
			// The spin names no rank: the hosts (their network paths, their GPUs) are the
			// suspects, not the first rank of each.
			nodes[m.Proc.Node] = true
			s.Culprits = append(s.Culprits, incident.Culprit{Rank: -1, Host: m.Proc.Host})
		}
		if gs := gpuOf(j, m.Proc); gs != nil {
			s.addEvidence("%s GPU: %s", m.Proc.Name(), describeGPU(gs))
		}
	}
	return &s, false
}

// p2pWaits reads point-to-point counts once a communicator has stopped moving: where a's
// sends to b do not equal b's receives from a, the rank that posted fewer is waited for by
// the other. Offline, a communicator every rank destroyed belongs to a job that finished:
// the wait is history (closed), as an unmatched send there hung nothing (small messages
// complete into NCCL's buffers), but its data was never received, a bug all the same.
func p2pWaits(j *Job, g *Group, cfg Config) []Wait {
	ok, _ := stalled(j, g, cfg.HangConfig)
	if !ok && !j.Offline {
		return nil
	}
	type counted struct {
		Member
		counts []snapshot.P2P
		whole  bool
	}
	byRank := map[int]counted{}
	members := make([]counted, len(g.Members))
	for i, m := range g.Members {
		c, whole := p2pCounts(m.Comm)
		members[i] = counted{m, c, whole}
		byRank[m.Comm.Rank] = members[i]
	}
	var out []Wait
	for _, a := range members {
		for _, pa := range a.counts {
			b, known := byRank[pa.Peer]
			if !known || !b.whole {
				continue
			}
			var recvs int64
			var lastRecv snapshot.Micros
			for _, pb := range b.counts {
				if pb.Peer == a.Comm.Rank {
					recvs, lastRecv = pb.Recvs, pb.LastRecv
				}
			}
			if pa.Sends == recvs {
				continue
			}
			culprit, other := b, a
			what := fmt.Sprintf("rank %d sent %d times to rank %d, which posted only %d receives", a.Comm.Rank, pa.Sends, b.Comm.Rank, recvs)
			since := pa.LastSend
			if pa.Sends < recvs {
				culprit, other = a, b
				what = fmt.Sprintf("rank %d posted %d receives from rank %d, which sent only %d times", b.Comm.Rank, recvs, a.Comm.Rank, pa.Sends)
				since = lastRecv
			}
			if d := other.Comm.Done; since == 0 && d != nil && d.InFlight != nil && d.InFlight.P2P {
				since = d.InFlight.T
			}
			w := Wait{Waiter: other.Proc, Awaited: culprit.Proc, Comm: g.ID, Class: blame.WaitHost, Open: ok, Seen: blame.SeenP2P, Why: what}
			if since != 0 {
				w.Since = since.Time()
			}
			out = append(out, w)
		}
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
