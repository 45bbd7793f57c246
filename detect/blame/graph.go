// Package blame holds the engine's one model of blame: the waits-for graph. Every op
// instance in flight or recently completed says which member the others waited for, how,
// and for how long. A rank that waited is never a root while what it waited for can be
// followed further: waits are followed across communicators until they reach a member that
// waits for nothing (the root), or come back to where they started (a cycle: an order
// inversion). The edge producers (detect/waits.go, pluginwaits.go, inversion.go) read the
// evidence; detect/roots.go says what each root did.
package blame

import (
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

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
type Wait[P comparable] struct {
	Waiter, Awaited P
	Comm            string
	Seq             int64
	Class           WaitClass
	// Since is when the wait began; For how long it lasted (so far, when Open).
	Since time.Time
	For   time.Duration
	// Open: the waiter still waits now (a stall); otherwise the awaited member arrived and
	// the wait is history (a late arrival, a slow transfer).
	Open bool
	// Seen says which evidence showed the wait; Op is the op the waiter waits in (nil when
	// unknown); Peer, on a link wait, is the other end of the awaited member's link; Why is
	// the evidence in words, where the producer has more to say than the edge.
	Seen WaitSeen
	Op   *snapshot.Op
	Peer P
	Why  string
}

// WaitSeen is the evidence a wait was read from, best first where two say the same.
type WaitSeen uint8

const (
	// SeenByPlugin: the profiler plugin's completion state (an op on the waiter's GPU, the
	// awaited member's not issued or not started).
	SeenByPlugin WaitSeen = iota + 1
	// SeenBehind: the logs' collective counts (the awaited member stopped behind).
	SeenBehind
	// SeenPastEnd: the logs' counts, where the members behind destroyed the communicator
	// together and the awaited members issued past that end (pastend.go).
	SeenPastEnd
	// SeenP2P: point-to-point counts (the awaited member posted fewer sends or receives).
	SeenP2P
	// SeenTransfers: the plugin's per-peer transfers of an op every member is in.
	SeenTransfers
	// SeenOrder: the order in which the members called two communicators' ops.
	SeenOrder
)

// Graph holds the edges of one evaluation, indexed by waiter and by awaited member.
type Graph[P comparable] struct {
	edges   []Wait[P]
	out, in map[P][]int
	less    func(a, b P) bool // orders a cycle's members (by rank)
}

// NewGraph indexes edges by waiter and by awaited member; less orders the members of a
// cycle. Edges from or to the zero member (nobody known) are kept but lead nowhere.
func NewGraph[P comparable](edges []Wait[P], less func(a, b P) bool) *Graph[P] {
	g := &Graph[P]{edges: edges, out: make(map[P][]int, len(edges)), in: make(map[P][]int, len(edges)), less: less}
	var none P
	for i, e := range edges {
		if e.Waiter != none && e.Awaited != none && e.Waiter != e.Awaited {
			g.out[e.Waiter] = append(g.out[e.Waiter], i)
			g.in[e.Awaited] = append(g.in[e.Awaited], i)
		}
	}
	return g
}

// Waits lists what p waits for (open edges only when open is set).
func (g *Graph[P]) Waits(p P, open bool) []Wait[P] { return g.pick(g.out[p], open) }

// WaitedBy lists the waits for p (open edges only when open is set).
func (g *Graph[P]) WaitedBy(p P, open bool) []Wait[P] { return g.pick(g.in[p], open) }

func (g *Graph[P]) pick(ix []int, open bool) []Wait[P] {
	var out []Wait[P]
	for _, i := range ix {
		if !open || g.edges[i].Open {
			out = append(out, g.edges[i])
		}
	}
	return out
}

// Ends is where every open wait of the graph ends, found at once: Roots are the members
// waited for that wait for nothing, in the order the edges first name them; Cycles the sets
// of members that wait for each other and for no one outside, each ordered by less.
func (g *Graph[P]) Ends() (roots []P, cycles [][]P) {
	comp, comps := g.components()
	leaves := make([]bool, len(comps))
	for _, e := range g.edges {
		if g.open(e) && comp[e.Waiter] != comp[e.Awaited] {
			leaves[comp[e.Waiter]] = true
		}
	}
	seen := map[P]bool{}
	for _, e := range g.edges {
		if c := comp[e.Awaited]; g.open(e) && !leaves[c] && len(comps[c]) == 1 && !seen[e.Awaited] {
			seen[e.Awaited] = true
			roots = append(roots, e.Awaited)
		}
	}
	for c, ps := range comps {
		if !leaves[c] && len(ps) > 1 {
			sort.SliceStable(ps, func(a, b int) bool { return g.less(ps[a], ps[b]) })
			cycles = append(cycles, ps)
		}
	}
	return roots, cycles
}

func (g *Graph[P]) open(e Wait[P]) bool {
	var none P
	return e.Open && e.Waiter != none && e.Awaited != none && e.Waiter != e.Awaited
}

// components are the strongly connected components of the open waits (Tarjan's, without
// recursion: a chain of 100k waits must not grow the stack), and each member's component.
func (g *Graph[P]) components() (map[P]int, [][]P) {
	index, low, comp := map[P]int{}, map[P]int{}, map[P]int{}
	var comps [][]P
	var stack []P
	type frame struct {
		p    P
		next int
	}
	visit := func(p P, work []frame) []frame {
		index[p], low[p] = len(index), len(index)
		stack = append(stack, p)
		return append(work, frame{p: p})
	}
	for _, start := range g.edges {
		if _, done := index[start.Waiter]; done || !g.open(start) {
			continue
		}
		work := visit(start.Waiter, nil)
		for len(work) > 0 {
			f := &work[len(work)-1]
			if outs := g.out[f.p]; f.next < len(outs) {
				e := g.edges[outs[f.next]]
				f.next++
				if !e.Open {
					continue
				}
				if _, seen := index[e.Awaited]; !seen {
					work = visit(e.Awaited, work)
				} else if _, closed := comp[e.Awaited]; !closed {
					low[f.p] = min(low[f.p], index[e.Awaited])
				}
				continue
			}
			p := f.p
			work = work[:len(work)-1]
			if len(work) > 0 {
				parent := work[len(work)-1].p
				low[parent] = min(low[parent], low[p])
			}
			if low[p] != index[p] {
				continue
			}
			var c []P
			for {
				q := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				comp[q] = len(comps)
				c = append(c, q)
				if q == p {
					break
				}
			}
			comps = append(comps, c)
		}
	}
	return comp, comps
}

// Waiters are the members whose open waits lead to any of ps, nearest first, with the
// wait that takes each one step nearer (to follow a waiter's path to them).
func (g *Graph[P]) Waiters(ps ...P) ([]P, map[P]*Wait[P]) {
	via := map[P]*Wait[P]{}
	in := map[P]bool{}
	for _, p := range ps {
		in[p] = true
	}
	var who []P
	queue := append([]P(nil), ps...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, i := range g.in[p] {
			if e := &g.edges[i]; e.Open && !in[e.Waiter] {
				if _, seen := via[e.Waiter]; !seen {
					via[e.Waiter] = e
					who = append(who, e.Waiter)
					queue = append(queue, e.Waiter)
				}
			}
		}
	}
	return who, via
}
