package detect

import (
	"sort"
	"time"
)

// The waits-for graph is the engine's one model of blame: every op instance in flight or
// recently completed says which member the others waited for, how, and for how long. A rank
// that waited is never a root while what it waited for can be followed further: waits are
// followed across communicators until they reach a member that waits for nothing (the
// root), or come back to where they started (a cycle: an order inversion).

// WaitClass says what a waiter waited for on the member it waited on.
type WaitClass string

const (
	// WaitHost: the member had not issued the op (its host was late or stopped).
	WaitHost WaitClass = "host"
	// WaitGPU: the member had issued the op but its GPU had not started it.
	WaitGPU WaitClass = "gpu"
	// WaitLink: the member was in the op, but its data to a peer lagged.
	WaitLink WaitClass = "link"
)

// Wait is one edge: Waiter waited for Awaited at op Seq of communicator Comm.
type Wait struct {
	Waiter, Awaited *Proc
	Comm            string
	Seq             int64
	Class           WaitClass
	// Since is when the wait began; For how long it lasted (so far, when Open).
	Since time.Time
	For   time.Duration
	// Open: the waiter still waits now (a stall); otherwise the awaited member arrived and
	// the wait is history (a late arrival, a slow transfer).
	Open bool
}

// WaitGraph holds the edges of one evaluation, indexed by waiter.
type WaitGraph struct {
	edges []Wait
	out   map[*Proc][]int
}

// NewWaitGraph indexes edges by waiter.
func NewWaitGraph(edges []Wait) *WaitGraph {
	g := &WaitGraph{edges: edges, out: make(map[*Proc][]int, len(edges))}
	for i, e := range edges {
		if e.Waiter != nil && e.Awaited != nil && e.Waiter != e.Awaited {
			g.out[e.Waiter] = append(g.out[e.Waiter], i)
		}
	}
	return g
}

// Edges lists every edge.
func (g *WaitGraph) Edges() []Wait { return g.edges }

// Waits lists what p waits for (open edges only when open is set).
func (g *WaitGraph) Waits(p *Proc, open bool) []Wait {
	var out []Wait
	for _, i := range g.out[p] {
		if !open || g.edges[i].Open {
			out = append(out, g.edges[i])
		}
	}
	return out
}

// Trace is where following a member's waits ends.
type Trace struct {
	// Roots are the members that wait for nothing further on the followed path.
	Roots []*Proc
	// Cycle holds the members of a cycle the path entered (nil when none): each waits for
	// the next, so none of them will ever move.
	Cycle []*Proc
}

// maxFollow bounds a trace: a 100k-rank job's chains are short (a rank waits in one op at a
// time), so a long one is a cycle the bound cuts.
const maxFollow = 4096

// Follow follows p's open waits to their roots. A member that waits for nothing is its own
// root.
func (g *WaitGraph) Follow(p *Proc) Trace {
	var t Trace
	seen := map[*Proc]bool{}
	onPath := map[*Proc]int{}
	var path []*Proc
	var walk func(q *Proc)
	walk = func(q *Proc) {
		if len(seen) > maxFollow {
			return
		}
		if i, ok := onPath[q]; ok {
			if t.Cycle == nil {
				t.Cycle = append([]*Proc(nil), path[i:]...)
			}
			return
		}
		if seen[q] {
			return
		}
		seen[q] = true
		next := g.Waits(q, true)
		if len(next) == 0 {
			t.Roots = append(t.Roots, q)
			return
		}
		onPath[q] = len(path)
		path = append(path, q)
		for _, e := range next {
			walk(e.Awaited)
		}
		path = path[:len(path)-1]
		delete(onPath, q)
	}
	walk(p)
	sort.SliceStable(t.Roots, func(a, b int) bool { return t.Roots[a].Rank < t.Roots[b].Rank })
	return t
}

// Explained says whether q's open waits lead somewhere other than q itself: then q only
// waited, and is never a root.
func (g *WaitGraph) Explained(q *Proc) bool {
	return len(g.Waits(q, true)) > 0
}
