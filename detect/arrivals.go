package detect

import (
	"sort"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Arrivals are the evidence timeline's op instances of one communicator: per position that
// every member issued, when each did. The member that arrived last is the one the others
// waited for at that position (host side: it had not issued the op), and by how long: from
// the second-last arrival to its own, the op could not start.

// arrival is one position of a communicator: who the others waited for, and how long.
type arrival struct {
	seq   int64
	first snapshot.Micros // the first member's issue time
	last  int             // index in Group.Members of the member that arrived last
	prev  int             // and of the second-last
	at    snapshot.Micros // its issue time
	delay int64           // µs from the second-last arrival to the last
	// root is whom the last member's wait leads to when it only arrived late because it
	// waited for someone in another communicator (nil: itself).
	root *Proc
}

// groupArrivals lists, in position order, the positions after `after` where every member of
// g has an issue time, at most max of the newest.
func groupArrivals(g *Group, after int64, most int) []arrival {
	n := len(g.Members)
	if n < 2 {
		return nil
	}
	lines := make([][]lagSample, n)
	parallel(n, 16, func(i int) { lines[i] = timeline(g.Members[i].Comm) })
	// Positions every member has, intersected in order.
	var common []int64
	for _, x := range lines[0] {
		if x.seq > after {
			common = append(common, x.seq)
		}
	}
	for _, l := range lines[1:] {
		kept, k := common[:0], 0
		for _, s := range common {
			for k < len(l) && l[k].seq < s {
				k++
			}
			if k < len(l) && l[k].seq == s {
				kept = append(kept, s)
			}
		}
		common = kept
	}
	if most > 0 && len(common) > most {
		common = common[len(common)-most:]
	}
	out := make([]arrival, len(common))
	for c, s := range common {
		out[c] = arrival{seq: s, last: -1, prev: -1}
	}
	// Per member, its time at each common position; the first, last and second-last.
	second := make([]snapshot.Micros, len(common))
	for i, l := range lines {
		k := 0
		for c, s := range common {
			for l[k].seq < s {
				k++
			}
			t := snapshot.Micros(l[k].lag)
			a := &out[c]
			if a.first == 0 || t < a.first {
				a.first = t
			}
			switch {
			case a.last < 0:
				a.last, a.at = i, t
			case t > a.at:
				second[c], a.prev, a.last, a.at = a.at, a.last, i, t
			case t > second[c] || second[c] == 0:
				second[c], a.prev = t, i
			}
		}
	}
	for c := range out {
		if second[c] > 0 && out[c].at > second[c] {
			out[c].delay = int64(out[c].at - second[c])
		}
	}
	return out
}

// timeline merges a member's timed ops and marks into (position, time) sorted by position;
// lagSample.lag holds the absolute time here.
func timeline(c *snapshot.Comm) []lagSample {
	out := make([]lagSample, 0, len(c.Recent)+len(c.Marks))
	r, m := c.Recent, c.Marks
	for len(r) > 0 || len(m) > 0 {
		switch {
		case len(m) == 0 || (len(r) > 0 && r[0].Seq <= m[0].Seq):
			if len(m) > 0 && m[0].Seq == r[0].Seq {
				m = m[1:]
			}
			if r[0].T != 0 && (len(out) == 0 || out[len(out)-1].seq < r[0].Seq) {
				out = append(out, lagSample{seq: r[0].Seq, lag: int64(r[0].T)})
			}
			r = r[1:]
		default:
			if m[0].T != 0 && (len(out) == 0 || out[len(out)-1].seq < m[0].Seq) {
				out = append(out, lagSample{seq: m[0].Seq, lag: int64(m[0].T)})
			}
			m = m[1:]
		}
	}
	return out
}

type lagSample struct {
	seq int64
	lag int64
}

// stepShape is a communicator's training step: how many positions one step issues, and how
// long a step takes (median over the positions at hand, 0 when unknown).
type stepShape struct {
	positions int64
	period    int64 // µs
}

// shapeOf finds the step from the op pattern of the most advanced member: the positions it
// repeats every step, and the median time between a position and the one a step later.
// Without a pattern a step is taken as a third of the member's history, the lower bound of
// what Period could not find.
func shapeOf(g *Group, arr []arrival) stepShape {
	var leader *snapshot.Comm
	for _, m := range g.Members {
		if leader == nil || m.Comm.Count > leader.Count {
			leader = m.Comm
		}
	}
	if leader == nil {
		return stepShape{}
	}
	p := Period(leader, leader.Count+1)
	if p == 0 {
		p = int64(len(leader.Recent)/3 + 1)
	}
	var d []int64
	for _, a := range arr {
		// The arrival one step later, found by position in the ordered list.
		k := sort.Search(len(arr), func(k int) bool { return arr[k].seq >= a.seq+p })
		if k < len(arr) && arr[k].seq == a.seq+p && arr[k].first > a.first {
			d = append(d, int64(arr[k].first-a.first))
		}
	}
	return stepShape{positions: p, period: median(d)}
}

func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]int64(nil), v...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
