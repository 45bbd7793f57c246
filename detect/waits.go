package detect

import (
	"fmt"
	"sort"
	"time"

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
	end := j.Now
	if died, ok := allExited(g); ok && died.Before(end) {
		end = died
	}
	still := end.Sub(last.Time())
	return still >= cfg.HangWindow(g)+j.InputLag, still
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

// CompletionConfig sets the window of the profiler plugin's evidence: an op that sits on
// the GPUs for max(CompletionFloor, CompletionK × the mean busy time of the communicator's
// completed collectives on its slowest rank). The plugin says the op is on the GPU and has
// not finished, so the wait can be short and still be sure.
type CompletionConfig struct {
	CompletionFloor time.Duration `yaml:"completion_floor"`
	CompletionK     float64       `yaml:"completion_k"`
}

// CompletionWindow is the window of a communicator, from its ranks' observed op times.
func (c CompletionConfig) CompletionWindow(g *Group) time.Duration {
	w := c.CompletionFloor
	for _, m := range g.Members {
		if d := m.Comm.Done; d != nil && d.Timing != nil && d.Timing.N > 0 {
			w = max(w, time.Duration(c.CompletionK*float64(d.Timing.Busy))*time.Microsecond)
		}
	}
	return w
}

// onGPU is the collective a member has in flight on its GPU, nil when none. A process
// that exited shows its last state for ever: it runs nothing.
func onGPU(m Member) *snapshot.Flight {
	d := m.Comm.Done
	if d == nil || d.InFlight == nil || d.InFlight.P2P || d.InFlight.GPUStart == 0 || m.Proc.State == snapshot.ProcExited {
		return nil
	}
	return d.InFlight
}

// queuedColl is the collective a completion state shows issued but not started on the GPU
// (busy with something else first), nil when none.
func queuedColl(d *snapshot.Completion) *snapshot.Flight {
	if d == nil || d.InFlight == nil || d.InFlight.P2P || d.InFlight.GPUStart != 0 {
		return nil
	}
	return d.InFlight
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
		return Wait{Waiter: w, Awaited: a, Comm: g.ID, Seq: lo + 1, Class: WaitHost, Since: j.Now.Add(-still), For: still,
			Open: true, Seen: SeenBehind}
	})
}

// pluginWaits reads the profiler plugin's completion state: the members that have had a
// communicator's earliest collective on their GPUs for the window wait for each member that
// has not issued it (idle, all it issued completed) or whose GPU has not started it.
func pluginWaits(j *Job, g *Group, window time.Duration) []Wait {
	k := int64(-1)
	for _, m := range g.Members {
		if f := onGPU(m); f != nil && (k < 0 || f.Seq < k) {
			k = f.Seq
		}
	}
	if k < 0 {
		return nil
	}
	var in []*Proc
	flights := map[*Proc]*snapshot.Flight{}
	var waited time.Duration = -1
	var since time.Time
	for _, m := range g.Members {
		if f := onGPU(m); f != nil && f.Seq == k {
			in = append(in, m.Proc)
			flights[m.Proc] = f
			if w := j.Now.Sub(f.GPUStart.Time()); waited < 0 || w < waited {
				waited = w
			}
			if since.IsZero() || f.GPUStart.Time().Before(since) {
				since = f.GPUStart.Time()
			}
		}
	}
	if waited < window {
		return nil
	}
	var out []Wait
	for _, m := range g.Members {
		d := m.Comm.Done
		if d == nil {
			continue
		}
		class := WaitHost
		switch q := queuedColl(d); {
		case m.Proc.State == snapshot.ProcExited && d.Done < k:
			// A dead member completes nothing, whatever it had issued.
		case q != nil && q.Seq == k:
			class = WaitGPU
		case d.Issued >= k || d.InFlight != nil || d.Done < d.Issued:
			continue
		}
		out = append(out, connect(in, []*Proc{m.Proc}, func(w, a *Proc) Wait {
			return Wait{Waiter: w, Awaited: a, Comm: g.ID, Seq: k, Class: class, Since: since, For: waited, Open: true,
				Seen: SeenByPlugin, Op: &flights[w].Op}
		})...)
	}
	return out
}

// transferWaits reads the plugin's per-peer transfers of a collective every member has had
// on its GPU for the window, none completing: the waiting points at the rank more ranks
// wait on than on any other (frozen, its GPU or proxy thread stuck), or at one link with
// data on the network; every other member waits for it. Where it points nowhere in
// particular, the stuck collective is the finding, naming every rank.
func transferWaits(j *Job, g *Group, window time.Duration) ([]Wait, *Finding) {
	if len(g.Members) < g.NRanks {
		return nil, nil
	}
	seq := int64(-1)
	var last time.Time
	for _, m := range g.Members {
		f := onGPU(m)
		if f == nil || (seq >= 0 && f.Seq != seq) {
			return nil, nil
		}
		seq = f.Seq
		last = maxTime(last, f.GPUStart.Time(), m.Comm.Done.LastDone.Time())
	}
	still := j.Now.Sub(last)
	if still < window {
		return nil, nil
	}
	ranks, link := blameTransfers(g)
	byRank := map[int]*Proc{}
	for _, m := range g.Members {
		byRank[m.Comm.Rank] = m.Proc
	}
	if len(ranks) == 0 || byRank[ranks[0]] == nil || link && byRank[ranks[1]] == nil {
		f := stuckFinding(j, g, seq, still, nil)
		return nil, &f
	}
	root := byRank[ranks[0]]
	var peer *Proc
	if link {
		peer = byRank[ranks[1]]
	}
	var out []Wait
	for _, m := range g.Members {
		if m.Proc != root {
			out = append(out, Wait{Waiter: m.Proc, Awaited: root, Comm: g.ID, Seq: seq, Class: WaitLink, Since: last,
				For: still, Open: true, Seen: SeenTransfers, Op: &onGPU(m).Op, Peer: peer})
		}
	}
	return out, nil
}

func maxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// blameTransfers names what a communicator's open transfers point at: the rank more ranks
// wait on than on any other (at least two of them, or the only rank waited on), else the
// one pair of ranks with data stuck on the network between them, else the only two ranks,
// waiting on each other (a link).
func blameTransfers(g *Group) (ranks []int, link bool) {
	onPeer := map[int]map[int]bool{}
	onNet := map[[2]int]bool{}
	count := map[int]int{}
	for _, m := range g.Members {
		r := m.Comm.Rank
		for _, pp := range openPeers(m) {
			switch {
			case pp.State.WaitsOnPeer() && !onPeer[r][pp.Peer]:
				if onPeer[r] == nil {
					onPeer[r] = map[int]bool{}
				}
				onPeer[r][pp.Peer] = true
				count[pp.Peer]++
			case pp.State.WaitsOnNetwork():
				onNet[[2]int{min(r, pp.Peer), max(r, pp.Peer)}] = true
			}
		}
	}
	var ws []int
	for q := range count {
		ws = append(ws, q)
	}
	sort.Slice(ws, func(a, b int) bool {
		if count[ws[a]] != count[ws[b]] {
			return count[ws[a]] > count[ws[b]]
		}
		return ws[a] < ws[b]
	})
	if len(ws) == 1 || (len(ws) > 1 && count[ws[0]] >= 2 && count[ws[0]] > count[ws[1]]) {
		return ws[:1], false
	}
	if len(onNet) == 1 {
		for k := range onNet {
			return k[:], true
		}
	}
	if len(ws) == 2 && len(onPeer) == 2 {
		a, b := min(ws[0], ws[1]), max(ws[0], ws[1])
		if onPeer[a][b] && onPeer[b][a] {
			return []int{a, b}, true
		}
	}
	return nil, false
}

// openPeers are the member's peer directions with network transfers still running.
func openPeers(m Member) []snapshot.PeerProgress {
	d := m.Comm.Done
	if d == nil {
		return nil
	}
	var out []snapshot.PeerProgress
	for _, pp := range d.Peers {
		if pp.Open > 0 {
			out = append(out, pp)
		}
	}
	return out
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
			w := Wait{Waiter: other.Proc, Awaited: culprit.Proc, Comm: g.ID, Class: WaitHost, Open: ok, Seen: SeenP2P, Why: what}
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
