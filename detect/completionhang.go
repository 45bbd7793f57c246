package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// CompletionConfig sets how long an op may sit on the GPUs, where the profiler plugin shows
// it: max(CompletionFloor, CompletionK × the communicator's observed op time, the mean busy
// time of its completed collectives on its slowest rank). A log only says an op was issued,
// so the log rules wait for a communicator to stop moving (HangConfig); the plugin says the
// op is on the GPU and has not finished, so the wait can be short and still be sure.
// CompletionHang and StuckWaits use this window; OrderInversion too where the plugin runs.
type CompletionConfig struct {
	CompletionFloor time.Duration `yaml:"completion_floor"`
	CompletionK     float64       `yaml:"completion_k"`
}

// CompletionWindow is the window of a communicator, from its ranks' observed op times.
func (c CompletionConfig) CompletionWindow(g *Group) time.Duration {
	w := c.CompletionFloor
	for _, m := range g.Members {
		if d := m.Comm.Done; d != nil && d.Timing != nil && d.Timing.N > 0 {
			w = max(w, time.Duration(c.CompletionK*float64(d.Timing.Busy))*time.Microsecond)
		}
	}
	return w
}

// onGPU is the collective a member has in flight on its GPU, nil when none. A process
// that exited shows its last state for ever: it runs nothing.
func onGPU(m Member) *snapshot.Flight {
	d := m.Comm.Done
	if d == nil || d.InFlight == nil || d.InFlight.P2P || d.InFlight.GPUStart == 0 || m.Proc.State == snapshot.ProcExited {
		return nil
	}
	return d.InFlight
}

// queuedColl is the collective a completion state shows issued but not started on the GPU
// (busy with something else first), nil when none.
func queuedColl(d *snapshot.Completion) *snapshot.Flight {
	if d == nil || d.InFlight == nil || d.InFlight.P2P || d.InFlight.GPUStart != 0 {
		return nil
	}
	return d.InFlight
}

// idle says whether a member has completed everything it issued on the communicator.
func idle(m Member) bool {
	d := m.Comm.Done
	return d != nil && d.InFlight == nil && d.Done >= d.Issued
}

type notIssued struct {
	group   *Group
	member  Member
	waiting []Member
	op      *snapshot.Flight
	waited  time.Duration
	since   time.Time
	// queued: the rank issued the op but its GPU has not started it (busy elsewhere).
	queued bool
}

// CompletionHang finds, with the profiler plugin's completion state, the rank that has not
// issued a communicator's next collective while its peers have it running on their GPUs:
// they can only be waiting for it. A rank that issued it but whose GPU has not started it
// (busy with something else: another communicator's collective, a kernel that does not end)
// holds them up as well. One finding per culprit process, as Hang.
func CompletionHang(j *Job, cfg Config) []Finding {
	if j.Offline {
		return nil
	}
	byProc := map[string][]notIssued{}
	var order []string
	for _, g := range j.Groups {
		if len(g.Members) < 2 {
			continue
		}
		var waiting []Member
		k := int64(-1)
		for _, m := range g.Members {
			if f := onGPU(m); f != nil {
				waiting = append(waiting, m)
				if k < 0 || f.Seq < k {
					k = f.Seq
				}
			}
		}
		if len(waiting) == 0 {
			continue
		}
		// Only those in the earliest op wait on the ranks that never issued it.
		in := waiting[:0:0]
		var waited time.Duration = -1
		var since time.Time
		for _, m := range waiting {
			if f := onGPU(m); f.Seq == k {
				in = append(in, m)
				w := j.Now.Sub(f.GPUStart.Time())
				if waited < 0 || w < waited {
					waited = w
				}
				if since.IsZero() || f.GPUStart.Time().Before(since) {
					since = f.GPUStart.Time()
				}
			}
		}
		if waited < cfg.CompletionWindow(g) {
			continue
		}
		for _, m := range g.Members {
			d := m.Comm.Done
			if d == nil {
				continue
			}
			q := queuedColl(d)
			queued := q != nil && q.Seq == k
			if !queued && (d.Issued >= k || !idle(m)) {
				continue
			}
			key := m.Proc.Key()
			if _, seen := byProc[key]; !seen {
				order = append(order, key)
			}
			byProc[key] = append(byProc[key], notIssued{group: g, member: m, waiting: in, op: onGPU(in[0]),
				waited: waited, since: since, queued: queued})
		}
	}
	var out []Finding
	for _, k := range order {
		out = append(out, completionHangFinding(j, byProc[k]))
	}
	return out
}

func completionHangFinding(j *Job, ns []notIssued) Finding {
	first := ns[0]
	p := first.member.Proc
	victims := map[string]bool{}
	for _, n := range ns {
		for _, m := range n.waiting {
			victims[m.Proc.Key()] = true
		}
	}
	op := &first.op.Op
	f := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Comm: first.group.ID, Seq: op.Seq,
		Culprits: []incident.Culprit{p.Culprit()}, Victims: len(victims), culpritKeys: []string{p.Key()},
		Key: "rank:" + p.Key(), FaultAt: first.since, measured: true,
		Ops: map[string]incident.Op{fmt.Sprint(first.waiting[0].Comm.Rank): Op(op)}}
	more := ""
	if len(ns) > 1 {
		more = fmt.Sprintf("; it stalled %d communicators", len(ns))
	}
	did := "has not issued"
	if first.queued {
		did = "issued but its GPU has not started"
	}
	f.queued = true
	for _, n := range ns {
		f.queued = f.queued && n.queued
	}
	f.Summary = fmt.Sprintf("%s %s collective %d of communicator %s, which %s %s had running on the GPU for %s, waiting for it (%d rank(s) waiting)%s",
		p.Name(), did, op.Seq, shortComm(first.group.ID), names(first.waiting), describeOp(op), first.waited.Round(100*time.Millisecond),
		len(victims), more)
	for _, n := range ns {
		d := n.member.Comm.Done
		if n.queued {
			f.addEvidence("communicator %s (%d ranks): %s issued collective %d at %s; its GPU has not started it: it is busy with something else (another communicator's collective, a kernel that does not end)",
				shortComm(n.group.ID), n.group.NRanks, p.Name(), d.InFlight.Seq, fmtTime(d.InFlight.T.Time()))
		} else {
			f.addEvidence("communicator %s (%d ranks): %s issued %d collectives and completed them all; nothing of it is in flight",
				shortComm(n.group.ID), n.group.NRanks, p.Name(), d.Issued)
		}
		for _, m := range n.waiting {
			fl := onGPU(m)
			f.addEvidence("%s: collective %d %s on its GPU since %s%s", m.Proc.Name(), fl.Seq, describeOp(&fl.Op),
				fmtTime(fl.GPUStart.Time()), waitsText(m, j.Now))
		}
	}
	processEvidence(j, p, &f)
	return f
}

// names lists members' processes for a sentence: "rank 0 (vm pid 12)", "ranks 0, 2 and 3".
func names(ms []Member) string {
	ps := make([]*Proc, len(ms))
	for i, m := range ms {
		ps[i] = m.Proc
	}
	return procNames(ps)
}

// waitsText says on whom a member's open network transfers wait: "; waits on rank 1 (recv,
// channel 0: RecvWait for 3.1 s, 12/16 steps)".
func waitsText(m Member, now time.Time) string {
	var parts []string
	for _, pp := range openPeers(m) {
		parts = append(parts, describeProgress(pp, now))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// openPeers are the member's peer directions with network transfers still running.
func openPeers(m Member) []snapshot.PeerProgress {
	d := m.Comm.Done
	if d == nil {
		return nil
	}
	var out []snapshot.PeerProgress
	for _, pp := range d.Peers {
		if pp.Open > 0 {
			out = append(out, pp)
		}
	}
	return out
}

func describeProgress(pp snapshot.PeerProgress, now time.Time) string {
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
	return s + fmt.Sprintf(", %d/%d steps)", pp.StepsDone, pp.Steps)
}
