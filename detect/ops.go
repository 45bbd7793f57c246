package detect

import (
	"sort"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Op renders a snapshot op as an incident op.
func Op(o *snapshot.Op) incident.Op {
	return incident.Op{Op: o.Op, Count: o.Count, Datatype: o.Dtype, RedOp: o.Red, Root: o.Root}
}

// SameSignature reports whether two ranks issued the same call at one position.
func SameSignature(a, b *snapshot.Op) bool {
	// The plugin does not see the reduction op (Red ""): it matches any.
	return a.Op == b.Op && a.Count == b.Count && a.Dtype == b.Dtype && a.Root == b.Root &&
		(a.Red == b.Red || a.Red == "" || b.Red == "")
}

// opAt finds a member's op at a sequence position among its recent and last ops.
func opAt(c *snapshot.Comm, seq int64) *snapshot.Op {
	if c.Last != nil && c.Last.Seq == seq {
		return c.Last
	}
	r := c.Recent
	if len(r) == 0 {
		return nil
	}
	// Recent is ordered by Seq and usually contiguous.
	if i := seq - r[0].Seq; i >= 0 && i < int64(len(r)) && r[i].Seq == seq {
		return &r[i]
	}
	i := sort.Search(len(r), func(i int) bool { return r[i].Seq >= seq })
	if i < len(r) && r[i].Seq == seq {
		return &r[i]
	}
	return nil
}

// Period finds the smallest P such that the member's latest ops before seq repeat every P
// positions (a training step issues the same collectives each iteration); 0 when none.
// Only the tail is checked, so warm-up ops (an initial Broadcast) do not hide the pattern.
// The history may have holes (a busy communicator issues more ops between two snapshots
// than one carries): ops are paired by position, and a pair with a side missing is skipped.
func Period(c *snapshot.Comm, before int64) int64 {
	ops := c.Recent[:sort.Search(len(c.Recent), func(i int) bool { return c.Recent[i].Seq >= before })]
	for p := 1; p <= len(ops)/3; p++ {
		if repeatsEvery(ops, p) {
			return int64(p)
		}
	}
	return 0
}

// repeatsEvery reports whether the newest ops each equal the op p positions earlier: no pair
// differs among the newest max(2p, 16) pairs, or among all when fewer, which must be at
// least 2p (without holes, exactly the pairs of the last max(2p, 16)+p ops).
func repeatsEvery(ops []snapshot.Op, p int) bool {
	pairs := 0
	for i := len(ops) - 1; i > 0 && pairs < max(2*p, 16); i-- {
		want := ops[i].Seq - int64(p)
		j := i - p // where it lies when the history has no holes
		if j < 0 || ops[j].Seq != want {
			j = sort.Search(i, func(k int) bool { return ops[k].Seq >= want })
			if j == i || ops[j].Seq != want {
				continue
			}
		}
		if !SameSignature(&ops[i], &ops[j]) {
			return false
		}
		pairs++
	}
	return pairs >= 2*p
}
