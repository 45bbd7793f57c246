package detect

import (
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/detect/blame"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The profiler plugin's edges: what each member has issued, started on its GPU and completed,
// and on whom its open network transfers wait, read into open waits of the graph.

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
		class := blame.WaitHost
		switch q := queuedColl(d); {
		case m.Proc.State == snapshot.ProcExited && d.Done < k:
			// A dead member completes nothing, whatever it had issued.
		case q != nil && q.Seq == k:
			class = blame.WaitGPU
		case d.Issued >= k || d.InFlight != nil || d.Done < d.Issued:
			continue
		}
		out = append(out, connect(in, []*Proc{m.Proc}, func(w, a *Proc) Wait {
			return Wait{Waiter: w, Awaited: a, Comm: g.ID, Seq: k, Class: class, Since: since, For: waited, Open: true,
				Seen: blame.SeenByPlugin, Op: &flights[w].Op}
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
			out = append(out, Wait{Waiter: m.Proc, Awaited: root, Comm: g.ID, Seq: seq, Class: blame.WaitLink, Since: last,
				For: still, Open: true, Seen: blame.SeenTransfers, Op: &onGPU(m).Op, Peer: peer})
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
