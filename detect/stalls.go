package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/detect/blame"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The findings of the hang engine's roots (roots.go), one view per kind of evidence that
// showed the waits for the root; the first view leads, the others are its evidence.

func (e *engine) view(r *Proc, seen blame.WaitSeen, ws []Wait, victims int) Finding {
	switch seen {
	case blame.SeenByPlugin:
		return e.pluginView(r, ws, victims)
	case blame.SeenBehind:
		return e.behindView(r, ws, victims)
	case blame.SeenP2P:
		return p2pFinding(r, ws, false)
	case blame.SeenPastEnd:
		return e.pastEndView(r, ws, victims)
	}
	named := []*Proc{r}
	if p := ws[0].Peer; p != nil {
		named = orderByRank(r, p)
	}
	return stuckFinding(e.j, e.byID[ws[0].Comm], ws[0].Seq, ws[0].For, named)
}

// rankFinding is a critical finding about one rank process on a communicator.
func rankFinding(kind incident.Kind, r *Proc, comm string) Finding {
	return Finding{Kind: kind, Severity: incident.SeverityCritical, Comm: comm, Culprits: []incident.Culprit{r.Culprit()},
		culpritKeys: []string{r.Key()}, Key: "rank:" + r.Key()}
}

func orderByRank(a, b *Proc) []*Proc {
	if b.Rank < a.Rank {
		return []*Proc{b, a}
	}
	return []*Proc{a, b}
}

// waitersOf lists the waiters of waits, once each.
func waitersOf(ws []Wait) []*Proc {
	var out []*Proc
	seen := make(map[*Proc]bool, len(ws))
	for _, w := range ws {
		if !seen[w.Waiter] {
			seen[w.Waiter] = true
			out = append(out, w.Waiter)
		}
	}
	return out
}

func (e *engine) member(g *Group, p *Proc) Member { return Member{Proc: p, Comm: e.ix.of(g, p)} }

// behindView: the logs show the root behind its peers on stalled communicators.
func (e *engine) behindView(r *Proc, ws []Wait, victims int) Finding {
	comms := byComm(ws)
	g := e.byID[comms[0][0].Comm]
	m, lead := e.member(g, r), leader(g)
	f := rankFinding(incident.KindHang, r, g.ID)
	f.Seq = m.Comm.Count + 1
	waitIn := ""
	if op := opAt(lead.Comm, m.Comm.Count+1); op != nil {
		waitIn = " " + describeOp(op)
		f.Ops = map[string]incident.Op{fmt.Sprint(lead.Comm.Rank): Op(op)}
	}
	f.Summary = fmt.Sprintf("%s stopped issuing collectives after position %d of communicator %s; %s reached position %d and waits in op %d%s (%d rank(s) waiting)%s",
		r.Name(), m.Comm.Count, shortComm(g.ID), lead.Proc.Name(), lead.Comm.Count, m.Comm.Count+1, waitIn, victims, stalledMore(comms))
	for _, c := range comms {
		g := e.byID[c[0].Comm]
		m, lead := e.member(g, r), leader(g)
		last := "no op yet"
		if m.Comm.Last != nil {
			last = "its last op was " + describeOp(m.Comm.Last)
		}
		f.addEvidence("communicator %s (%d ranks): %s is at %d, %s; %s is at %d", shortComm(g.ID), g.NRanks,
			r.Name(), m.Comm.Count, last, lead.Proc.Name(), lead.Comm.Count)
		if c[0].For > 0 {
			f.addEvidence("communicator %s has not moved for %s", shortComm(g.ID), c[0].For.Round(100*time.Millisecond))
		}
	}
	if m.Comm.Last != nil && m.Comm.Last.T != 0 {
		f.FaultAt = m.Comm.Last.T.Time()
	}
	return f
}

// stalledMore is "; it stalled 3 communicators" when the root stalled more than one.
func stalledMore(comms [][]Wait) string {
	if len(comms) > 1 {
		return fmt.Sprintf("; it stalled %d communicators", len(comms))
	}
	return ""
}

// pluginView: the plugin shows the root's peers running an op on their GPUs that the root
// has not issued, or has issued without its GPU starting it.
func (e *engine) pluginView(r *Proc, ws []Wait, victims int) Finding {
	comms := byComm(ws)
	first := comms[0][0]
	g := e.byID[first.Comm]
	waiting := waitersOf(comms[0])
	f := rankFinding(incident.KindHang, r, g.ID)
	f.Seq, f.FaultAt, f.measured = first.Seq, first.Since, true
	f.Ops = map[string]incident.Op{fmt.Sprint(e.member(g, waiting[0]).Comm.Rank): Op(first.Op)}
	did := "has not issued"
	if first.Class == blame.WaitGPU {
		did = "issued but its GPU has not started"
	}
	f.Summary = fmt.Sprintf("%s %s collective %d of communicator %s, which %s %s had running on the GPU for %s, waiting for it (%d rank(s) waiting)%s",
		r.Name(), did, first.Seq, shortComm(g.ID), procNames(waiting), describeOp(first.Op), first.For.Round(100*time.Millisecond),
		victims, stalledMore(comms))
	for _, c := range comms {
		g := e.byID[c[0].Comm]
		d := e.member(g, r).Comm.Done
		if c[0].Class == blame.WaitGPU {
			f.addEvidence("communicator %s (%d ranks): %s issued collective %d at %s; its GPU has not started it: it is busy with something else (another communicator's collective, a kernel that does not end)",
				shortComm(g.ID), g.NRanks, r.Name(), d.InFlight.Seq, fmtTime(d.InFlight.T.Time()))
		} else {
			f.addEvidence("communicator %s (%d ranks): %s issued %d collectives and completed them all; nothing of it is in flight",
				shortComm(g.ID), g.NRanks, r.Name(), d.Issued)
		}
		for _, w := range waitersOf(c) {
			m := e.member(g, w)
			if fl := onGPU(m); fl != nil {
				f.addEvidence("%s: collective %d %s on its GPU since %s%s", w.Name(), fl.Seq, describeOp(&fl.Op),
					fmtTime(fl.GPUStart.Time()), waitsText(m, e.j.Now))
			}
		}
	}
	return f
}

// stuckFinding: every rank of a communicator has had collective seq on its GPU for still,
// none completing; named are what the transfers point at (nil: nothing in particular).
func stuckFinding(j *Job, g *Group, seq int64, still time.Duration, named []*Proc) Finding {
	op := &onGPU(g.Members[0]).Op
	f := Finding{Kind: incident.KindStuckInFlight, Severity: incident.SeverityCritical, Comm: g.ID, Seq: seq,
		Victims: len(g.Members), Key: fmt.Sprintf("stuck:%s:%d", g.ID, seq), measured: true,
		Ops: map[string]incident.Op{"all": Op(op)}, FaultAt: j.Now.Add(-still)}
	what := fmt.Sprintf("all %d ranks of communicator %s have collective %d %s running on their GPUs and none completed it for %s",
		len(g.Members), shortComm(g.ID), seq, describeOp(op), still.Round(100*time.Millisecond))
	anyone := len(named) == 0
	switch len(named) {
	case 1:
		f.Summary = fmt.Sprintf("%s: their network transfers wait on %s, which does not move (frozen, or its GPU or proxy thread stuck)",
			what, named[0].Name())
	case 2:
		f.Summary = fmt.Sprintf("%s: the waiting points at the link between %s and %s", what, named[0].Name(), named[1].Name())
	default:
		f.Summary = what + ": the waits point at no single rank or link; suspect the network or a GPU"
		for _, m := range g.Members {
			named = append(named, m.Proc)
		}
	}
	for _, p := range named {
		f.culpritKeys = append(f.culpritKeys, p.Key())
		f.Culprits = append(f.Culprits, p.Culprit())
	}
	for _, m := range g.Members {
		waits := waitsText(m, j.Now)
		if waits == "" {
			waits = "; no network transfer open (its part is on the GPU or over NVLink/shared memory)"
		}
		f.addEvidence("%s: on its GPU since %s%s", m.Proc.Name(), fmtTime(onGPU(m).GPUStart.Time()), waits)
	}
	if anyone && len(named) <= 2 { // a view's root is described by rootFinding
		for _, p := range named {
			processEvidence(j, p, &f)
		}
	}
	return f
}

// p2pFinding: the root posted fewer sends or receives than its peers posted to it.
func p2pFinding(r *Proc, ws []Wait, finished bool) Finding {
	f := rankFinding(incident.KindP2PMismatch, r, ws[0].Comm)
	f.Cause = incident.CauseMismatch
	f.Summary = fmt.Sprintf("point-to-point mismatch on communicator %s: %s; culprit %s", shortComm(ws[0].Comm), ws[0].Why, r.Name())
	if finished {
		f.Severity = incident.SeverityWarning
		f.Summary += "; the job finished (every rank destroyed the communicator), so the unmatched operation completed into NCCL's buffers and its data was never received"
	}
	for _, w := range ws {
		// Dated by the unmatched op: a rank killed for it much later (PyTorch's timeout)
		// then stays the p2p culprit, not a crash.
		if !w.Since.IsZero() && (f.FaultAt.IsZero() || w.Since.Before(f.FaultAt)) {
			f.FaultAt = w.Since
		}
		f.Victims++
		f.addEvidence("communicator %s: %s (peer %s)", shortComm(w.Comm), w.Why, w.Waiter.Name())
	}
	return f
}

// finishedP2P are the point-to-point ops a finished job left unmatched: closed waits.
func finishedP2P(edges []Wait) []Finding {
	var closed []Wait
	for _, w := range edges {
		if w.Seen == blame.SeenP2P && !w.Open {
			closed = append(closed, w)
		}
	}
	var out []Finding
	for _, c := range byFirst(closed, func(w Wait) *Proc { return w.Awaited }) {
		out = append(out, p2pFinding(c[0].Awaited, c, true))
	}
	return out
}

func inversionOn(invs []Finding, comm string) *Finding {
	for i := range invs {
		for _, c := range invs[i].comms {
			if c == comm {
				return &invs[i]
			}
		}
	}
	return nil
}

// waitsText says on whom a member's open network transfers wait: "; waits on rank 1 (recv,
// channel 0: RecvWait for 3.1 s, 12/16 steps)".
func waitsText(m Member, now time.Time) string {
	var parts []string
	for _, pp := range openPeers(m) {
		verb := "waits on"
		switch {
		case pp.State.WaitsOnNetwork():
			verb = "sends over the network to"
		case !pp.State.WaitsOnPeer() && pp.State != snapshot.ProxyNone:
			verb = "waits on its own GPU for"
		}
		s := fmt.Sprintf("%s rank %d (%s, channel %d", verb, pp.Peer, pp.Dir, pp.Channel)
		if pp.State != snapshot.ProxyNone {
			s += ": " + string(pp.State)
			if pp.StateAt != 0 {
				s += " for " + now.Sub(pp.StateAt.Time()).Round(100*time.Millisecond).String()
			}
		}
		parts = append(parts, s+fmt.Sprintf(", %d/%d steps)", pp.StepsDone, pp.Steps))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}
