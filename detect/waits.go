package detect

import (
	"fmt"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// StuckWaits finds, with the profiler plugin's completion state, communicators where every
// rank has the same collective running on its GPU and none has completed it for the
// completion window. It says, for each rank, which peer and channel its network transfers
// wait on, and names what all the waiting points at: the rank its peers wait on (frozen,
// its proxy thread stopped, its GPU hung), or the pair of ranks whose transfer sits on the
// network (the link between them). Where the waits point nowhere in particular, every rank
// is named, as StuckInFlight does from GPU power alone.
func StuckWaits(j *Job, cfg Config) []Finding {
	if j.Offline {
		return nil
	}
	var out []Finding
	for _, g := range j.Groups {
		if len(g.Members) < 2 || len(g.Members) < g.NRanks {
			continue
		}
		seq := int64(-1)
		var last time.Time
		all := true
		for _, m := range g.Members {
			f := onGPU(m)
			if f == nil || (seq >= 0 && f.Seq != seq) {
				all = false
				break
			}
			seq = f.Seq
			last = maxTime(last, f.GPUStart.Time(), m.Comm.Done.LastDone.Time())
		}
		if !all {
			continue
		}
		still := j.Now.Sub(last)
		if still < cfg.CompletionWindow(g) {
			continue
		}
		out = append(out, stuckWaitsFinding(j, g, seq, still))
	}
	return out
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

// waitGraph is who waits on whom among a communicator's ranks (by communicator rank).
type waitGraph struct {
	onPeer map[int]map[int]bool // rank -> peers it waits on (their receive posted, or their data)
	onNet  map[[2]int]bool      // sender, receiver: data on the network, not completing
}

func buildWaits(g *Group) waitGraph {
	w := waitGraph{onPeer: map[int]map[int]bool{}, onNet: map[[2]int]bool{}}
	for _, m := range g.Members {
		r := m.Comm.Rank
		for _, pp := range openPeers(m) {
			switch {
			case pp.State.WaitsOnPeer():
				if w.onPeer[r] == nil {
					w.onPeer[r] = map[int]bool{}
				}
				w.onPeer[r][pp.Peer] = true
			case pp.State.WaitsOnNetwork():
				w.onNet[[2]int{r, pp.Peer}] = true
			}
		}
	}
	return w
}

// blame names what the waits point at: the rank more ranks wait on than on any other (at
// least two of them, or the only rank waited on), else the one pair of ranks with data
// stuck on the network between them, else the only two ranks, waiting on each other.
func (w waitGraph) blame() (ranks []int, link bool) {
	count := map[int]int{}
	for _, peers := range w.onPeer {
		for q := range peers {
			count[q]++
		}
	}
	type waited struct{ rank, by int }
	var ws []waited
	for q, c := range count {
		ws = append(ws, waited{q, c})
	}
	sort.Slice(ws, func(a, b int) bool {
		if ws[a].by != ws[b].by {
			return ws[a].by > ws[b].by
		}
		return ws[a].rank < ws[b].rank
	})
	if len(ws) == 1 || (len(ws) > 1 && ws[0].by >= 2 && ws[0].by > ws[1].by) {
		return []int{ws[0].rank}, false
	}
	pairs := map[[2]int]bool{}
	for k := range w.onNet {
		pairs[[2]int{min(k[0], k[1]), max(k[0], k[1])}] = true
	}
	if len(pairs) == 1 {
		for k := range pairs {
			return []int{k[0], k[1]}, true
		}
	}
	if len(ws) == 2 && len(w.onPeer) == 2 {
		a, b := min(ws[0].rank, ws[1].rank), max(ws[0].rank, ws[1].rank)
		if w.onPeer[a][b] && w.onPeer[b][a] {
			return []int{a, b}, true
		}
	}
	return nil, false
}

func stuckWaitsFinding(j *Job, g *Group, seq int64, still time.Duration) Finding {
	op := &onGPU(g.Members[0]).Op
	f := Finding{Kind: incident.KindStuckInFlight, Severity: incident.SeverityCritical, Comm: g.ID, Seq: seq,
		Victims: len(g.Members), Key: fmt.Sprintf("stuck:%s:%d", g.ID, seq), measured: true,
		Ops: map[string]incident.Op{"all": Op(op)}, FaultAt: j.Now.Add(-still)}
	byRank := map[int]Member{}
	for _, m := range g.Members {
		byRank[m.Comm.Rank] = m
	}
	blamed, link := buildWaits(g).blame()
	var named []Member
	for _, r := range blamed {
		if m, ok := byRank[r]; ok {
			named = append(named, m)
		}
	}
	what := fmt.Sprintf("all %d ranks of communicator %s have collective %d %s running on their GPUs and none completed it for %s",
		len(g.Members), shortComm(g.ID), seq, describeOp(op), still.Round(100*time.Millisecond))
	switch {
	case len(named) == 1:
		f.Summary = fmt.Sprintf("%s: their network transfers wait on %s, which does not move (frozen, or its GPU or proxy thread stuck)",
			what, named[0].Proc.Name())
	case len(named) == 2 && link:
		f.Summary = fmt.Sprintf("%s: the waiting points at the link between %s and %s", what, named[0].Proc.Name(), named[1].Proc.Name())
	default:
		named = nil
		f.Summary = what + ": the waits point at no single rank or link; suspect the network or a GPU"
	}
	if named == nil {
		named = g.Members
	}
	for _, m := range named {
		f.culpritKeys = append(f.culpritKeys, m.Proc.Key())
		f.Culprits = append(f.Culprits, m.Proc.Culprit())
	}
	for _, m := range g.Members {
		fl := onGPU(m)
		waits := waitsText(m, j.Now)
		if waits == "" {
			waits = "; no network transfer open (its part is on the GPU or over NVLink/shared memory)"
		}
		f.addEvidence("%s: on its GPU since %s%s", m.Proc.Name(), fmtTime(fl.GPUStart.Time()), waits)
	}
	if len(named) <= 2 {
		for _, m := range named {
			processEvidence(j, m.Proc, &f)
		}
	}
	return f
}

// completionStuck says whether a communicator's ops have stopped completing, by the plugin:
// some rank has had an op in flight for the completion window and no rank completed one
// since. It is how OrderInversion sees, early, that a communicator is stuck.
func completionStuck(j *Job, g *Group, cfg Config) bool {
	if j.Offline {
		return false
	}
	var issued, done time.Time
	for _, m := range g.Members {
		d := m.Comm.Done
		if d == nil {
			continue
		}
		done = maxTime(done, d.LastDone.Time())
		if d.InFlight != nil && d.InFlight.T != 0 && (issued.IsZero() || d.InFlight.T.Time().Before(issued)) {
			issued = d.InFlight.T.Time()
		}
	}
	if issued.IsZero() {
		return false
	}
	w := cfg.CompletionWindow(g)
	return j.Now.Sub(issued) >= w && j.Now.Sub(done) >= w
}
