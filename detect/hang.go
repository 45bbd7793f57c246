package detect

import (
	"fmt"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// HangConfig sets the hang window. P2PMismatch and StuckInFlight wait for the same window:
// a communicator that still moves may yet catch up.
type HangConfig struct {
	// HangFloor and HangK set the hang window: max(HangFloor, HangK × the communicator's
	// recent p99 gap between ops).
	HangFloor time.Duration `yaml:"hang_floor"`
	HangK     float64       `yaml:"hang_k"`
}

// HangWindow is how long a communicator may sit still, given its recent pace.
func (c HangConfig) HangWindow(g *Group) time.Duration {
	return max(c.HangFloor, time.Duration(c.HangK*float64(p99Gap(recentGaps(g)))))
}

// p99Gap is the 99th percentile of gaps (µs) between ops, 0 with fewer than 4 of them.
func p99Gap(gaps []int64) time.Duration {
	if len(gaps) < 4 {
		return 0
	}
	sort.Slice(gaps, func(a, b int) bool { return gaps[a] < gaps[b] })
	return time.Duration(gaps[min(len(gaps)-1, len(gaps)*99/100)]) * time.Microsecond
}

// opGaps are the µs between a communicator's recent ops at consecutive positions.
func opGaps(c *snapshot.Comm) []int64 {
	var gaps []int64
	r := c.Recent
	for i := 1; i < len(r); i++ {
		if r[i].Seq == r[i-1].Seq+1 && r[i].T > 0 && r[i-1].T > 0 && r[i].T >= r[i-1].T {
			gaps = append(gaps, int64(r[i].T-r[i-1].T))
		}
	}
	return gaps
}

// recentGaps are the µs between successive ops of the most advanced member.
func recentGaps(g *Group) []int64 {
	var best *snapshot.Comm
	for _, m := range g.Members {
		if best == nil || m.Comm.Count > best.Count {
			best = m.Comm
		}
	}
	if best == nil {
		return nil
	}
	return opGaps(best)
}

// lastProgress is the newest op time of any member on the communicator.
func lastProgress(g *Group) snapshot.Micros {
	var t snapshot.Micros
	for _, m := range g.Members {
		if m.Comm.Last != nil && m.Comm.Last.T > t {
			t = m.Comm.Last.T
		}
		for _, p := range m.Comm.P2P {
			t = max(t, p.LastSend, p.LastRecv)
		}
	}
	return t
}

// stalled says whether a communicator has not moved for its hang window (live), or is in
// its final state (offline: a communicator destroyed by every member is not stalled). Live,
// once every member has exited, the first death ends what can be observed: a communicator
// that was moving until its job was killed did not hang, however long ago that was.
func stalled(j *Job, g *Group, cfg HangConfig) (bool, time.Duration) {
	if j.Offline {
		for _, m := range g.Members {
			if m.Comm.State != snapshot.CommDestroyed {
				return true, 0
			}
		}
		return false, 0
	}
	last := lastProgress(g)
	if last == 0 {
		return false, 0
	}
	end := j.Now
	if died, ok := allExited(g); ok && died.Before(end) {
		end = died
	}
	still := end.Sub(last.Time())
	return still >= cfg.HangWindow(g), still
}

// allExited says whether every member's process has exited, and when the first did.
func allExited(g *Group) (time.Time, bool) {
	var first snapshot.Micros
	for _, m := range g.Members {
		p := m.Proc
		if p.State != snapshot.ProcExited || p.ExitedAt == 0 {
			return time.Time{}, false
		}
		if first == 0 || p.ExitedAt < first {
			first = p.ExitedAt
		}
	}
	return first.Time(), first != 0
}

type behind struct {
	group   *Group
	member  Member
	leader  Member // the most advanced member
	awaited *snapshot.Op
	still   time.Duration
}

// Hang finds ranks whose collective count on a communicator is below the others' while the
// communicator does not move: they are the culprits, the others only wait. One finding per
// culprit process, however many communicators it stalled.
func Hang(j *Job, cfg Config) []Finding {
	byProc := map[string][]behind{}
	var order []string
	for _, g := range j.Groups {
		if len(g.Members) < 2 {
			continue
		}
		lo, hi := int64(1<<62), int64(-1)
		var leader Member
		for _, m := range g.Members {
			lo = min(lo, m.Comm.Count)
			if m.Comm.Count > hi {
				hi, leader = m.Comm.Count, m
			}
		}
		if lo == hi {
			continue
		}
		ok, still := stalled(j, g, cfg.HangConfig)
		if !ok {
			continue
		}
		for _, m := range g.Members {
			if m.Comm.Count != lo {
				continue
			}
			k := m.Proc.Key()
			if _, seen := byProc[k]; !seen {
				order = append(order, k)
			}
			byProc[k] = append(byProc[k], behind{group: g, member: m, leader: leader,
				awaited: opAt(leader.Comm, lo+1), still: still})
		}
	}
	var out []Finding
	for _, k := range order {
		out = append(out, hangFinding(j, byProc[k]))
	}
	return out
}

func hangFinding(j *Job, bs []behind) Finding {
	first := bs[0]
	p := first.member.Proc
	victims := map[string]bool{}
	for _, b := range bs {
		for _, m := range b.group.Members {
			if m.Comm.Count > b.member.Comm.Count {
				victims[m.Proc.Key()] = true
			}
		}
	}
	f := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Comm: first.group.ID,
		Seq: first.member.Comm.Count + 1, Culprits: []incident.Culprit{p.Culprit()}, Victims: len(victims),
		culpritKeys: []string{p.Key()}, Key: "rank:" + p.Key()}
	waitIn := ""
	if first.awaited != nil {
		waitIn = " " + describeOp(first.awaited)
		f.Ops = map[string]incident.Op{fmt.Sprint(first.leader.Comm.Rank): Op(first.awaited)}
	}
	more := ""
	if len(bs) > 1 {
		more = fmt.Sprintf("; it stalled %d communicators", len(bs))
	}
	f.Summary = fmt.Sprintf("%s stopped issuing collectives after position %d of communicator %s; %s reached position %d and waits in op %d%s (%d rank(s) waiting)%s",
		p.Name(), first.member.Comm.Count, shortComm(first.group.ID), first.leader.Proc.Name(),
		first.leader.Comm.Count, first.member.Comm.Count+1, waitIn, len(victims), more)
	for _, b := range bs {
		m := b.member
		last := "no op yet"
		if m.Comm.Last != nil {
			last = "its last op was " + describeOp(m.Comm.Last)
		}
		f.addEvidence("communicator %s (%d ranks): %s is at %d, %s; %s is at %d", shortComm(b.group.ID), b.group.NRanks,
			p.Name(), m.Comm.Count, last, b.leader.Proc.Name(), b.leader.Comm.Count)
		if b.still > 0 {
			f.addEvidence("communicator %s has not moved for %s", shortComm(b.group.ID), b.still.Round(100*time.Millisecond))
		}
	}
	if first.member.Comm.Last != nil && first.member.Comm.Last.T != 0 {
		f.FaultAt = first.member.Comm.Last.T.Time()
	}
	processEvidence(j, p, &f)
	return f
}
