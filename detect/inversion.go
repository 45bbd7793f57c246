package detect

import (
	"fmt"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/detect/blame"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Order inversions: ranks that called the collectives of two stuck communicators in the
// other order than their peers. Rank 1 calls its world AllReduce before its tensor-parallel
// one, the others the tensor-parallel one first; wherever the GPU runs the two one after
// the other (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron sets it) each communicator then
// waits for a rank that waits in the other: a cycle of the waits-for graph. The plugin sees
// the cycle itself (each rank's GPU in one op, the other queued); the logs only show that
// every rank issued both, so the order of the calls is the evidence, and it names who
// inverted: the minority order.
//
// One process's calls are ordered by its issue index (Op.Idx): the order of its log lines,
// timestamps or not, or the plugin's per-process count. Two ops are compared where every
// process sharing both communicators issued both (the latest such positions), else at the
// newest positions, where a process that issued one and not yet the other called that one
// first. Two ranks alone (a tensor-parallel pair inside the world) are a tie, broken by the
// sibling groups of the smaller communicator (same size, other ranks, inside the larger
// one), which show the usual order; without them the finding names both and says so.

// orderVerdict is what the order of two communicators' calls says: aFirst called a's op
// first, bFirst b's (so each of aFirst waits in a for bFirst, which wait in b for them),
// and the finding that names the minority.
type orderVerdict struct {
	o              orders
	aFirst, bFirst []*Proc
	tie            bool
	f              Finding
}

// waits are the cycle the verdict's orders make.
func (v *orderVerdict) waits() []Wait {
	edge := func(g *Group, pos int64) func(w, a *Proc) Wait {
		return func(w, a *Proc) Wait {
			return Wait{Waiter: w, Awaited: a, Comm: g.ID, Seq: pos, Class: blame.WaitGPU, Open: true, Seen: blame.SeenOrder}
		}
	}
	return append(connect(v.aFirst, v.bFirst, edge(v.o.a, v.o.posA)), connect(v.bFirst, v.aFirst, edge(v.o.b, v.o.posB))...)
}

// orderVerdicts compares the calls of every pair of stuck communicators that two or more
// processes share; order lists the pairs with a verdict, in the order the processes name them.
func orderVerdicts(j *Job, cfg Config, ix commIndex) (verdicts map[[2]*Group]*orderVerdict, order [][2]*Group) {
	var stuck []*Group
	for _, g := range j.Groups {
		if len(g.Members) < 2 {
			continue
		}
		if ok, _ := stalled(j, g, cfg.HangConfig); ok || completionStuck(j, g, cfg) {
			stuck = append(stuck, g)
		}
	}
	verdicts = map[[2]*Group]*orderVerdict{}
	if len(stuck) < 2 {
		return verdicts, nil
	}
	procGroups := map[*Proc][]*Group{}
	for _, g := range stuck {
		for _, m := range g.Members {
			if gs := procGroups[m.Proc]; len(gs) < maxPairComms {
				procGroups[m.Proc] = append(gs, g)
			}
		}
	}
	shared := map[[2]*Group][]*Proc{}
	var pairs [][2]*Group
	for _, p := range j.Procs {
		gs := procGroups[p]
		for i := range gs {
			for k := i + 1; k < len(gs); k++ {
				pr := orderedPair(gs[i], gs[k])
				if _, ok := shared[pr]; !ok {
					pairs = append(pairs, pr)
				}
				shared[pr] = append(shared[pr], p)
			}
		}
	}
	for _, pr := range pairs {
		if v := judgeOrder(j, ix, pr, shared[pr]); v != nil {
			verdicts[pr] = v
			order = append(order, pr)
		}
	}
	return verdicts, order
}

// orderedPair is a pair of communicators, the smaller first.
func orderedPair(a, b *Group) [2]*Group {
	if smaller(b, a) {
		return [2]*Group{b, a}
	}
	return [2]*Group{a, b}
}

// judgeOrder compares the calls of the processes ps share a pair of communicators in; nil
// when they agree or cannot be compared.
func judgeOrder(j *Job, ix commIndex, pr [2]*Group, ps []*Proc) *orderVerdict {
	if len(ps) < 2 {
		return nil
	}
	o := compareOrders(ix, pr[0], pr[1], ps)
	first, second := o.split(ps)
	if len(first) == 0 || len(second) == 0 {
		return nil
	}
	v := &orderVerdict{o: o, aFirst: first, bFirst: second}
	v.f, v.tie = inversionFinding(j, ix, pr[0], pr[1], ps, o, first, second)
	return v
}

// completionStuck says whether a communicator's ops have stopped completing, by the plugin:
// some rank has had an op in flight for the completion window and no rank completed one
// since. It is how the order comparison sees, early, that a communicator is stuck.
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

// maxPairComms bounds the stuck communicators of one process compared pairwise.
const maxPairComms = 32

func smaller(a, b *Group) bool {
	if a.NRanks != b.NRanks {
		return a.NRanks < b.NRanks
	}
	return a.ID < b.ID
}

// commIndex finds a process's member of a group in O(1): a 100k-rank job has groups of
// 100k members, and the order comparison asks for every process of every pair.
type commIndex map[*Group]map[*Proc]*snapshot.Comm

func (ix commIndex) of(g *Group, p *Proc) *snapshot.Comm {
	m, ok := ix[g]
	if !ok {
		m = make(map[*Proc]*snapshot.Comm, len(g.Members))
		for _, mb := range g.Members {
			m[mb.Proc] = mb.Comm
		}
		ix[g] = m
	}
	return m[p]
}

// orders is what each process of a set did with one op of a and one of b.
type orders struct {
	a, b       *Group
	posA, posB int64
	// vote: +1 the process called a's op first, -1 b's, 0 unknown.
	vote map[*Proc]int
}

// split returns the processes that called a's op first and those that called b's first.
func (o orders) split(ps []*Proc) (aFirst, bFirst []*Proc) {
	for _, p := range ps {
		switch o.vote[p] {
		case 1:
			aFirst = append(aFirst, p)
		case -1:
			bFirst = append(bFirst, p)
		}
	}
	return aFirst, bFirst
}

// compareOrders compares, for each process, its ops of a and b where the processes differ:
// the ops each waits on (the plugin's oldest op not complete on both); else the first
// position where their interleavings of a and b differ (a deadlocked rank's host often goes
// on issuing the rest of its step, so the inverted pair is rarely the last one issued); else
// the latest positions all of them reached on both, then the newest positions any reached.
func compareOrders(ix commIndex, a, b *Group, ps []*Proc) orders {
	if o, ok := waitedOrders(ix, a, b, ps); ok {
		return o
	}
	if o, ok := firstDivergence(ix, a, b, ps); ok {
		return o
	}
	return latestOrders(ix, a, b, ps)
}

// waitedOrders compares the ops each process waits on in a and b, when every process has
// one in flight on both at the same positions.
func waitedOrders(ix commIndex, a, b *Group, ps []*Proc) (orders, bool) {
	o := orders{a: a, b: b, vote: map[*Proc]int{}}
	for i, p := range ps {
		ca, cb := ix.of(a, p), ix.of(b, p)
		fa, fb := collectiveInFlight(ca), collectiveInFlight(cb)
		if fa == nil || fb == nil {
			return o, false
		}
		if i == 0 {
			o.posA, o.posB = fa.Seq, fb.Seq
		} else if fa.Seq != o.posA || fb.Seq != o.posB {
			return o, false
		}
		o.vote[p] = issueOrder(p, ca, fa.Seq, cb, fb.Seq)
	}
	first, second := o.split(ps)
	return o, len(first) > 0 && len(second) > 0
}

func collectiveInFlight(c *snapshot.Comm) *snapshot.Flight {
	if c.Done == nil || c.Done.InFlight == nil || c.Done.InFlight.P2P {
		return nil
	}
	return c.Done.InFlight
}

// maxDivergenceScan bounds the positions firstDivergence looks at (a ring holds 4096 ops
// offline, 32-64 live).
const maxDivergenceScan = 4096

// firstDivergence finds the first position of a, over the history every process still
// holds, before which the processes issued different numbers of b's ops: there their
// interleavings of the two communicators part. Those that issued fewer called a's op first.
func firstDivergence(ix commIndex, a, b *Group, ps []*Proc) (orders, bool) {
	lo, hi := int64(1), int64(1<<62)
	for _, p := range ps {
		ca := ix.of(a, p)
		if len(ca.Recent) == 0 {
			return orders{}, false
		}
		lo, hi = max(lo, ca.Recent[0].Seq), min(hi, ca.Count)
	}
	before := make(map[*Proc]int64, len(ps))
	for i := lo; i <= hi && i-lo < maxDivergenceScan; i++ {
		least, most, known := int64(1<<62), int64(-1), true
		for _, p := range ps {
			n, ok := issuedBefore(ix.of(a, p), i, ix.of(b, p))
			if !ok {
				known = false
				break
			}
			before[p] = n
			least, most = min(least, n), max(most, n)
		}
		if !known || least == most {
			continue
		}
		o := orders{a: a, b: b, posA: i, posB: least + 1, vote: make(map[*Proc]int, len(ps))}
		for _, p := range ps {
			if before[p] == least {
				o.vote[p] = 1
			} else {
				o.vote[p] = -1
			}
		}
		return o, true
	}
	return orders{}, false
}

// issuedBefore is how many of cb's ops the process issued before ca's op at seq (cb's
// position of its last op with a smaller issue index); ok is false when the process's
// history does not show it (no issue index, or cb's history starts later).
func issuedBefore(ca *snapshot.Comm, seq int64, cb *snapshot.Comm) (int64, bool) {
	oa := opAt(ca, seq)
	if oa == nil || oa.Idx == 0 {
		return 0, false
	}
	if cb.Count == 0 {
		return 0, true
	}
	r := cb.Recent
	if len(r) == 0 || r[0].Idx == 0 || r[len(r)-1].Idx == 0 {
		return 0, false
	}
	k := sort.Search(len(r), func(k int) bool { return r[k].Idx > oa.Idx })
	if k == 0 {
		if r[0].Seq == 1 {
			return 0, true
		}
		return 0, false // b's ops before the window are not known
	}
	if k == len(r) && r[k-1].Seq < cb.Count {
		return 0, false // b's newest ops are missing from the history
	}
	return r[k-1].Seq, true
}

// latestOrders compares at the latest positions all processes reached on both; where those
// agree, at the newest positions any reached.
func latestOrders(ix commIndex, a, b *Group, ps []*Proc) orders {
	minA, minB, maxA, maxB := int64(1<<62), int64(1<<62), int64(0), int64(0)
	for _, p := range ps {
		ca, cb := ix.of(a, p), ix.of(b, p)
		minA, maxA = min(minA, ca.Count), max(maxA, ca.Count)
		minB, maxB = min(minB, cb.Count), max(maxB, cb.Count)
	}
	common := orders{a: a, b: b, posA: minA, posB: minB, vote: map[*Proc]int{}}
	if minA > 0 && minB > 0 {
		for _, p := range ps {
			common.vote[p] = issueOrder(p, ix.of(a, p), minA, ix.of(b, p), minB)
		}
		if first, second := common.split(ps); len(first) > 0 && len(second) > 0 {
			return common
		}
	}
	newest := orders{a: a, b: b, posA: maxA, posB: maxB, vote: map[*Proc]int{}}
	for _, p := range ps {
		ca, cb := ix.of(a, p), ix.of(b, p)
		switch hasA, hasB := ca.Count >= maxA, cb.Count >= maxB; {
		case hasA && hasB:
			newest.vote[p] = issueOrder(p, ca, maxA, cb, maxB)
		case hasA:
			newest.vote[p] = 1
		case hasB:
			newest.vote[p] = -1
		}
	}
	return newest
}

// siblingOrders is the order in which a sibling group's processes called their op at the
// inverted pair's positions (sibling groups of one split advance in step): from their issue
// indexes, else from completion (a process that finished its sibling op but not the large
// communicator's called the sibling's first, as its GPU runs them in that order).
func siblingOrders(ix commIndex, sib, large *Group, sp []*Proc, posS, posL int64) orders {
	o := orders{a: sib, b: large, posA: posS, posB: posL, vote: make(map[*Proc]int, len(sp))}
	for _, p := range sp {
		cs, cl := ix.of(sib, p), ix.of(large, p)
		if v := issueOrder(p, cs, posS, cl, posL); v != 0 {
			o.vote[p] = v
			continue
		}
		if cs.Done == nil || cl.Done == nil {
			continue
		}
		switch sDone, lDone := cs.Done.Done >= posS, cl.Done.Done >= posL; {
		case sDone && !lDone:
			o.vote[p] = 1
		case lDone && !sDone:
			o.vote[p] = -1
		}
	}
	return o
}

// siblings are the groups of the small one's size, inside the large one, sharing no
// process with the small one: the other tensor-parallel groups of the same world.
func siblings(j *Job, small, large *Group) []*Group {
	inLarge, inSmall := map[*Proc]bool{}, map[*Proc]bool{}
	for _, m := range large.Members {
		inLarge[m.Proc] = true
	}
	for _, m := range small.Members {
		inSmall[m.Proc] = true
	}
	var out []*Group
	for _, g := range j.Groups {
		if g == small || g == large || g.NRanks != small.NRanks || len(g.Members) < 2 {
			continue
		}
		ok := true
		for _, m := range g.Members {
			ok = ok && inLarge[m.Proc] && !inSmall[m.Proc]
		}
		if ok {
			out = append(out, g)
		}
	}
	return out
}

func inversionFinding(j *Job, ix commIndex, small, large *Group, ps []*Proc, o orders, smallFirst, largeFirst []*Proc) (Finding, bool) {
	f := Finding{Kind: incident.KindOrderInversion, Severity: incident.SeverityCritical, Comm: small.ID, Seq: o.posA,
		comms: []string{small.ID, large.ID}, Cause: incident.CauseOrder}
	// The usual order: the majority of the ranks sharing both, then of the siblings.
	usualSmall, usualLarge := len(smallFirst), len(largeFirst)
	var sibEvidence []string
	if usualSmall == usualLarge {
		for _, sib := range siblings(j, small, large) {
			var sp []*Proc
			for _, m := range sib.Members {
				sp = append(sp, m.Proc)
			}
			so := siblingOrders(ix, sib, large, sp, o.posA, o.posB)
			a, b := so.split(sp)
			usualSmall, usualLarge = usualSmall+len(a), usualLarge+len(b)
			if len(a) > 0 {
				sibEvidence = append(sibEvidence, fmt.Sprintf("%s, in the sibling communicator %s, called theirs before %s",
					procNames(a), shortComm(sib.ID), shortComm(large.ID)))
			}
			if len(b) > 0 {
				sibEvidence = append(sibEvidence, fmt.Sprintf("%s, in the sibling communicator %s, called %s first",
					procNames(b), shortComm(sib.ID), shortComm(large.ID)))
			}
		}
	}
	culprits, usual := largeFirst, smallFirst
	cFirst, cSecond := large, small
	if usualLarge > usualSmall {
		culprits, usual = smallFirst, largeFirst
		cFirst, cSecond = small, large
	}
	tie := usualSmall == usualLarge
	if tie {
		culprits = append(append([]*Proc(nil), smallFirst...), largeFirst...)
	}
	for _, p := range culprits {
		f.Culprits = append(f.Culprits, p.Culprit())
		f.culpritKeys = append(f.culpritKeys, p.Key())
	}
	f.Victims = len(ps) - len(culprits)
	f.Key = "inversion:" + small.ID + ":" + large.ID
	if len(culprits) == 1 {
		f.Key = "rank:" + culprits[0].Key()
	}
	opText := func(g *Group, p *Proc, pos int64) string {
		if op := opAt(ix.of(g, p), pos); op != nil {
			return describeOp(op) + " on communicator " + shortComm(g.ID)
		}
		return fmt.Sprintf("its collective %d on communicator %s (not issued yet)", pos, shortComm(g.ID))
	}
	posOf := func(g *Group) int64 {
		if g == o.a {
			return o.posA
		}
		return o.posB
	}
	if tie {
		f.Summary = fmt.Sprintf("%s called the collectives of communicators %s and %s in opposite orders, so each communicator waits for the other (a deadlock where the GPU runs them one after the other, e.g. CUDA_DEVICE_MAX_CONNECTIONS=1); which order is wrong cannot be told: no other rank shares both and no sibling group shows the usual one",
			procNames(smallFirst)+" and "+procNames(largeFirst), shortComm(small.ID), shortComm(large.ID))
	} else {
		c := culprits[0]
		f.Summary = fmt.Sprintf("%s called %s before %s; %s called them the other way round, so each communicator waits for the other (a deadlock where the GPU runs them one after the other, e.g. CUDA_DEVICE_MAX_CONNECTIONS=1)",
			procNames(culprits), opText(cFirst, c, posOf(cFirst)), opText(cSecond, c, posOf(cSecond)), procNames(usual))
		for _, p := range culprits {
			if op := opAt(ix.of(cSecond, p), posOf(cSecond)); op != nil && op.T != 0 {
				f.FaultAt = op.T.Time()
			}
		}
	}
	for _, p := range ps {
		first, second := small, large
		switch o.vote[p] {
		case 0:
			continue
		case -1:
			first, second = large, small
		}
		f.addEvidence("%s: %s, then %s%s", p.Name(), positionText(ix.of(first, p), p, first, posOf(first)),
			positionText(ix.of(second, p), p, second, posOf(second)), orderSource(p))
	}
	for _, e := range sibEvidence {
		f.addEvidence("%s", e)
	}
	return f, tie
}
