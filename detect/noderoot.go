package detect

import (
	"fmt"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// A node is one root. When several ranks of one node are each a root of the waits-for
// graph at once (every rank of an 8-GPU node stopped at the same step: the host hung, its
// file system or its network stalled, the node was paused), the fault is the node's, and
// one incident names it with its ranks: an 8-GPU node pages once, not eight times.

// nodeWide says whether a root's cause may be its node's: a rank that stopped or died without
// a reason of its own. A rank that left its communicator, skipped an op or waits on its GPU
// has its own cause, whatever its node's other ranks do.
func nodeWide(c incident.Cause) bool {
	return c == incident.CauseHostStalled || c == incident.CauseDied
}

// foldNodeRoots folds the single-rank hang roots that share a node and stopped together
// (within nodeTogether) into one finding per node, led by its lowest rank's, keyed by the
// node. Two ranks of a node that stopped apart are two roots.
func foldNodeRoots(j *Job, roots []Finding) []Finding {
	if len(roots) < 2 {
		return roots
	}
	procs := make(map[string]*Proc, len(j.Procs))
	for _, p := range j.Procs {
		procs[p.Key()] = p
	}
	byNode := map[string][]int{}
	for i, f := range roots {
		if f.Kind != incident.KindHang || len(f.culpritKeys) != 1 || !nodeWide(f.Cause) {
			continue
		}
		if p := procs[f.culpritKeys[0]]; p != nil && p.Node != "" {
			byNode[p.Node] = append(byNode[p.Node], i)
		}
	}
	folded := make([]bool, len(roots))
	for node, ix := range byNode {
		if len(ix) < 2 {
			continue
		}
		sort.Slice(ix, func(a, b int) bool { return firstRank(&roots[ix[a]]) < firstRank(&roots[ix[b]]) })
		lead := &roots[ix[0]]
		together := ix[:1]
		for _, i := range ix[1:] {
			if d := roots[i].FaultAt.Sub(lead.FaultAt); d <= nodeTogether && d >= -nodeTogether {
				together = append(together, i)
			}
		}
		if ix = together; len(ix) < 2 {
			continue
		}
		ranks := 0
		for _, p := range j.Procs {
			if p.Node == node {
				ranks++
			}
		}
		for _, i := range ix[1:] {
			f := &roots[i]
			lead.Culprits = append(lead.Culprits, f.Culprits...)
			lead.culpritKeys = append(lead.culpritKeys, f.culpritKeys...)
			lead.Victims = max(lead.Victims, f.Victims)
			if f.Severity.Rank() < lead.Severity.Rank() {
				lead.Severity = f.Severity
			}
			if earlier(f, lead) {
				lead.FaultAt = f.FaultAt
			}
			if f.Cause != lead.Cause {
				lead.Cause = incident.CauseHostStalled
			}
			folded[i] = true
		}
		who := fmt.Sprintf("%d of its %d ranks", len(ix), ranks)
		if len(ix) == ranks {
			who = fmt.Sprintf("all %d of its ranks", ranks)
		}
		lead.Key = "node:" + node
		lead.Summary = fmt.Sprintf("node %s stopped: %s stopped issuing collectives, so the node is the root (the host hung or paused, its storage or network stalled), not one rank; %s",
			node, who, lead.Summary)
		for _, i := range ix[1:] {
			lead.addEvidence("also: %s", roots[i].Summary)
		}
	}
	return without(roots, folded)
}

// nodeTogether: ranks of one node that stopped within this of each other stopped together
// (a node-level event reaches its ranks within one step).
const nodeTogether = 2 * time.Second
