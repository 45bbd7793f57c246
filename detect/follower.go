package detect

import (
	"sort"

	"github.com/ncclwatch/watchdog/snapshot"
)

// The follower walks a late arrival across communicators, to whom the late member itself
// waited for in the op it issued just before (its host was held there).

// follower follows a late arrival across communicators: the member that arrived last at a
// position had, just before it in its own issue order, an op of another communicator; if
// there it waited for someone who arrived only shortly before it issued this one, its host
// was held by that op, and the wait is that one's. Followed at most maxHops times.
type follower struct {
	j      *Job
	byID   map[string]*Group
	cached map[*Group]map[int64]arrival
}

const maxHops = 4

func newFollower(j *Job) *follower {
	f := &follower{j: j, byID: make(map[string]*Group, len(j.Groups)), cached: map[*Group]map[int64]arrival{}}
	for _, g := range j.Groups {
		f.byID[g.ID] = g
	}
	return f
}

func (f *follower) arrivalAt(g *Group, seq int64) (arrival, bool) {
	m, ok := f.cached[g]
	if !ok {
		m = map[int64]arrival{}
		for _, a := range groupArrivals(g, 0, 0) {
			m[a.seq] = a
		}
		f.cached[g] = m
	}
	a, ok := m[seq]
	return a, ok
}

// follow returns the root of a's wait, nil when it is the member that arrived last.
func (f *follower) follow(g *Group, a *arrival) *Proc {
	var root *Proc
	cur, seq, at, delay := g.Members[a.last], a.seq, a.at, a.delay
	for hop := 0; hop < maxHops; hop++ {
		o := opAt(cur.Comm, seq)
		if o == nil || o.Idx == 0 {
			break
		}
		h, prev := f.previousOp(cur.Proc, o.Idx, g)
		if h == nil {
			break
		}
		b, ok := f.arrivalAt(h, prev.Seq)
		if !ok || b.last < 0 || h.Members[b.last].Proc == cur.Proc {
			break
		}
		// It waited there (arrived well before the last), and issued here right after
		// the last one arrived there.
		if int64(b.at-prev.T) < delay/2 || b.at > at || int64(at-b.at) > delay/2 {
			break
		}
		next := h.Members[b.last]
		root, g, cur, seq, at, delay = next.Proc, h, next, prev.Seq, b.at, b.delay
		if delay <= 0 {
			break
		}
	}
	return root
}

// previousOp is the op p issued last before issue index idx on another communicator than g.
func (f *follower) previousOp(p *Proc, idx int64, g *Group) (*Group, *snapshot.Op) {
	var best *snapshot.Op
	var bestG *Group
	for i := range p.Comms {
		c := &p.Comms[i]
		if c.ID == g.ID {
			continue
		}
		r := c.Recent
		k := sort.Search(len(r), func(k int) bool { return r[k].Idx >= idx }) - 1
		if k >= 0 && r[k].Idx > 0 && r[k].Idx < idx && (best == nil || r[k].Idx > best.Idx) {
			if h := f.byID[c.ID]; h != nil {
				best, bestG = &r[k], h
			}
		}
	}
	return bestG, best
}
