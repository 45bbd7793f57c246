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
func Period(c *snapshot.Comm, before int64) int64 {
	var ops []*snapshot.Op
	for i := range c.Recent {
		if c.Recent[i].Seq < before {
			ops = append(ops, &c.Recent[i])
		}
	}
	for p := 1; p <= len(ops)/3; p++ {
		pairs := min(len(ops)-p, max(2*p, 16))
		ok := true
		for i := len(ops) - pairs; i < len(ops); i++ {
			if ops[i].Seq-ops[i-p].Seq != int64(p) || !SameSignature(ops[i], ops[i-p]) {
				ok = false
				break
			}
		}
		if ok {
			return int64(p)
		}
	}
	return 0
}
