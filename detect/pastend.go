package detect

import (
	"fmt"
	"time"

	"github.com/ncclwatch/watchdog/detect/blame"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// A communicator whose members behind all destroyed it at one position ended there, as
// they agreed: the fewer members that issued past that end ran more steps than their peers
// (a loop bound, a data loader or an early return that differs between ranks) and wait for
// ranks that are gone. They are the roots, not the ranks that ended.

// pastEnd reports whether the members at lo all destroyed the communicator there (an
// abort ends a failure, not the work) and outnumber the members past it.
func pastEnd(g *Group, lo int64, past, ended []*Proc) bool {
	if len(past) >= len(ended) {
		return false
	}
	for _, m := range g.Members {
		if m.Comm.Count == lo && m.Comm.State != snapshot.CommDestroyed {
			return false
		}
	}
	return true
}

// pastEndWaits are the edges that make the members past the end the roots: the ranks that
// ended wait, in words, for those to end too.
func pastEndWaits(j *Job, g *Group, lo int64, ended, past []*Proc, still time.Duration) []Wait {
	return connect(ended, past, func(w, a *Proc) Wait {
		return Wait{Waiter: w, Awaited: a, Comm: g.ID, Seq: lo + 1, Class: blame.WaitHost, Since: j.Now.Add(-still), For: still,
			Open: true, Seen: blame.SeenPastEnd}
	})
}

// pastEndCause is the root's cause in words.
const pastEndCause = "it issued past the position where all its peers destroyed the communicator together: it ran more steps than they did (a loop bound, a data loader or an early return that differs between ranks)"

// pastEndView: the root issued ops after its peers destroyed the communicator together.
func (e *engine) pastEndView(r *Proc, ws []Wait, victims int) Finding {
	g := e.byID[ws[0].Comm]
	m := e.member(g, r)
	end := ws[0].Seq - 1
	f := rankFinding(incident.KindHang, r, g.ID)
	f.Seq = end + 1
	waitIn := ""
	if op := opAt(m.Comm, end+1); op != nil {
		waitIn = " " + describeOp(op)
		f.Ops = map[string]incident.Op{fmt.Sprint(m.Comm.Rank): Op(op)}
	}
	f.Summary = fmt.Sprintf("%s issued op %d%s of communicator %s after its %d peer(s) destroyed it together at position %d: it ran one step more than they did, and waits for ranks that are gone",
		r.Name(), end+1, waitIn, shortComm(g.ID), victims, end)
	f.addEvidence("communicator %s (%d ranks): %s is at %d; %d rank(s) destroyed it at %d and ended cleanly", shortComm(g.ID), g.NRanks,
		r.Name(), m.Comm.Count, victims, end)
	if m.Comm.Last != nil && m.Comm.Last.T != 0 {
		f.FaultAt = m.Comm.Last.T.Time()
	}
	return f
}
