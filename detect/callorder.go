package detect

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclwatch/watchdog/snapshot"
)

// A process's order of calls across two communicators, and the comparison in words.

// positionText is "communicator X position N (its call #I)" for the process's member c.
func positionText(c *snapshot.Comm, p *Proc, g *Group, pos int64) string {
	s := fmt.Sprintf("communicator %s position %d", shortComm(g.ID), pos)
	if idx, _ := issueIndex(p, c, pos); idx != 0 {
		s += fmt.Sprintf(" (its call #%d)", idx)
	} else if c.Count < pos {
		s += " (not issued yet)"
	}
	return s
}

func orderSource(p *Proc) string {
	if p.Source == snapshot.SourcePlugin {
		return ", in the order the profiler plugin counted its calls"
	}
	return ", in the order of its log lines"
}

// procNames is "rank 1 (host pid 7)" or "ranks 0, 2 and 3".
func procNames(ps []*Proc) string {
	switch len(ps) {
	case 0:
		return "no rank"
	case 1:
		return ps[0].Name()
	}
	ranks := make([]int, 0, len(ps))
	for _, p := range ps {
		ranks = append(ranks, p.Rank)
	}
	sort.Ints(ranks)
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprint(r)
	}
	return "ranks " + strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// issueOrder is +1 when the process issued ca's op at sa before cb's op at sb, -1 after, 0
// when their issue indexes are not both known in one numbering.
func issueOrder(p *Proc, ca *snapshot.Comm, sa int64, cb *snapshot.Comm, sb int64) int {
	ia, pa := issueIndex(p, ca, sa)
	ib, pb := issueIndex(p, cb, sb)
	switch {
	case ia == 0 || ib == 0 || pa != pb || ia == ib:
		return 0
	case ia < ib:
		return 1
	}
	return -1
}

// issueIndex is the issue index of a communicator's op at seq, and whether it is the
// plugin's numbering (the log's otherwise): a process's comm ops come from its log unless
// it has none, its ops in flight always from the plugin.
func issueIndex(p *Proc, c *snapshot.Comm, seq int64) (int64, bool) {
	if o := opAt(c, seq); o != nil && o.Idx != 0 {
		return o.Idx, p.Source == snapshot.SourcePlugin
	}
	if d := c.Done; d != nil && d.InFlight != nil && !d.InFlight.P2P && d.InFlight.Seq == seq && d.InFlight.Idx != 0 {
		return d.InFlight.Idx, true
	}
	return 0, false
}
