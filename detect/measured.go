package detect

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// What the profiler plugin measures on the GPUs: per rank, how much shorter its kernels run
// than its peers' (it arrives that late on the GPU), over the sidecar's timing window; and the
// ranks it names, where their hosts arrived on time and their GPUs did not wait elsewhere first.

// observeMeasured books what the plugin's timing windows say now: per rank, how much
// shorter its kernels run than its peers' (it arrives that late on the GPU), as a share of
// the window.
func (l *Ledger) observeMeasured(j *Job, sc SlowdownConfig) {
	type timed struct {
		m Member
		t *snapshot.Timing
	}
	for _, g := range j.Groups {
		var ts []timed
		for _, m := range g.Members {
			if d := m.Comm.Done; d != nil && d.Timing != nil && d.Timing.N >= int64(max(sc.MeasuredMinOps, 1)) &&
				d.Timing.Window > 0 && m.Proc.State != snapshot.ProcExited {
				ts = append(ts, timed{m, d.Timing})
			}
		}
		if len(ts) < 2 {
			continue
		}
		for i, self := range ts {
			var busy, queue []int64
			for k, o := range ts {
				if k != i {
					busy, queue = append(busy, o.t.Busy), append(queue, o.t.Queue)
				}
			}
			late := median(busy) - self.t.Busy
			if late <= 0 {
				continue
			}
			s := measuredSample{at: j.Now, group: g.ID, late: late, queue: self.t.Queue - median(queue),
				share: float64(self.t.N*late) / float64(self.t.Window), spread: slices.Max(busy) - slices.Min(busy)}
			k := self.m.Proc.Key()
			h := l.measured[k]
			if n := len(h); n > 0 && h[n-1].at.Equal(j.Now) {
				if s.share > h[n-1].share {
					h[n-1] = s
				}
				continue
			}
			if len(h) >= 8 {
				h = h[1:]
			}
			l.measured[k] = append(h, s)
		}
	}
	for k, h := range l.measured {
		if len(h) > 0 && j.Now.Sub(h[len(h)-1].at) > time.Minute {
			delete(l.measured, k)
		}
	}
}

// stallEcho is how long after a stall the plugin's timing window (10 s) still averages it
// in, and how long a wait must be to be a stall rather than lateness.
const stallEcho = 15 * time.Second

// arrivedLate says whether the arrival ledger holds, within `within` of now, waits for the
// process (each of a step's share or more) that cost half the share of that time or more:
// its host issued late, which the arrival ledger judges (an episode, or a stall the hang
// side saw); the plugin's timing window averages those waits over its ops as if its GPU
// were late at each. Measured lateness names a rank only where its host arrived on time.
func (l *Ledger) arrivedLate(key string, now time.Time, within time.Duration, sc SlowdownConfig) bool {
	since := snapshot.MicrosOf(now.Add(-within))
	var lost int64
	for _, gl := range l.groups {
		r, ok := gl.keyIndex[key]
		if !ok || gl.period <= 0 {
			continue
		}
		lateAt := snapshot.Micros(sc.SlowdownShare * float64(gl.period))
		for i := len(gl.spans) - 1; i >= 0 && gl.spans[i].end >= since; i-- {
			if sp := gl.spans[i]; sp.root == r && sp.end-sp.start >= lateAt {
				lost += int64(sp.end - max(sp.start, since))
			}
		}
	}
	return float64(lost) >= sc.SlowdownShare/2*float64(within.Microseconds())
}

// endedWithin says whether an arrival episode of the process ended live within `within`
// of now.
func (l *Ledger) endedWithin(key string, now time.Time, within time.Duration) bool {
	end, ok := l.episodeEnded[key]
	return ok && now.Sub(end.Time()) <= within
}

// waitedBehind is how much longer (µs per op) p's own kernels ran than its peers' in the
// communicator of p where that excess is largest, other than `except`: there its GPU waited
// for someone. The GPU runs a process's collectives in stream order, so a rank whose kernel
// of another communicator waited starts this one late: it looks late here only because it
// waited there, and is a waiter, never a root.
func waitedBehind(p *Proc, except string, groups map[string]*Group) int64 {
	var most int64
	for i := range p.Comms {
		c := &p.Comms[i]
		g := groups[c.ID]
		if c.ID == except || g == nil || c.Done == nil || c.Done.Timing == nil || c.Done.Timing.N == 0 {
			continue
		}
		var peers []int64
		for _, m := range g.Members {
			if d := m.Comm.Done; m.Proc != p && d != nil && d.Timing != nil && d.Timing.N > 0 {
				peers = append(peers, d.Timing.Busy)
			}
		}
		if len(peers) > 0 {
			most = max(most, c.Done.Timing.Busy-median(peers))
		}
	}
	return most
}

// latestMeasured is a rank's plugin measurement at this evaluation, nil when none.
func (l *Ledger) latestMeasured(key string, now time.Time) *measuredSample {
	h := l.measured[key]
	if len(h) == 0 || !h[len(h)-1].at.Equal(now) {
		return nil
	}
	return &h[len(h)-1]
}

// measuredRoots names the ranks the plugin measured late by at least the share at this and
// the previous evaluation (then while above half of it), which the arrival ledger did not
// already name, whose host arrived on time, whose GPU did not wait in another communicator
// first, and whose lateness a slow link of their communicator does not explain.
func (l *Ledger) measuredRoots(j *Job, sc SlowdownConfig, procs map[string]*Proc, groups map[string]*Group, onLinks map[string]int64, named []Finding) []Finding {
	done := map[string]bool{}
	for _, f := range named {
		done[f.culpritKeys[0]] = true
	}
	var out []Finding
	nowNamed := map[string]bool{}
	defer func() { l.measuredNamed = nowNamed }()
	keys := make([]string, 0, len(l.measured))
	for k := range l.measured {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h := l.measured[k]
		m := l.latestMeasured(k, j.Now)
		p := procs[k]
		if m == nil || p == nil || done[k] || 2*m.late <= 3*onLinks[m.group] || m.share < sc.SlowdownShare/2 {
			continue
		}
		if !l.measuredNamed[k] && (m.share < sc.SlowdownShare || len(h) >= 2 && h[len(h)-2].share < sc.SlowdownShare || m.late < 2*m.spread) {
			// Hysteresis: named once it stands at the share (at the previous evaluation
			// too, where there was one), beyond twice the spread of its peers' own timings
			// (jitter at the threshold is nobody's); then kept while above half the share.
			continue
		}
		if 2*waitedBehind(p, m.group, groups) >= m.late {
			continue // its GPU reached this op late because it waited in another communicator's op first
		}
		if l.arrivedLate(k, j.Now, stallEcho, sc) || l.endedWithin(k, j.Now, stallEcho) {
			continue // its host was late: the arrival ledger judges it, and the window echoes it
		}
		nowNamed[k] = true
		e := episode{group: m.group, root: k, share: m.share, longestLate: m.late, bursts: 1}
		cause, why := slowCause(j, p, e, m)
		g := groups[m.group]
		f := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Comm: m.group,
			Culprits: []incident.Culprit{p.Culprit()}, culpritKeys: []string{k}, Key: rootKey(j, p, cause),
			LagSeconds: float64(m.late) / 1e6, measured: true, Cause: cause,
			Episode: &incident.Episode{Onset: h[0].at, LostShare: m.share}}
		if g != nil {
			f.Victims = len(g.Members) - 1
		}
		f.Summary = fmt.Sprintf("%s is a straggler: it slows the job, costing %.0f%% of its time; measured on the GPUs, it reaches the collectives of communicator %s %s late per op while its peers wait in theirs: %s",
			p.Name(), 100*m.share, shortComm(m.group), micros(m.late), why)
		f.addEvidence("measured by the NCCL profiler plugin over its recent collectives: kernels %s shorter than its peers' (median), starting %s after issue beyond theirs",
			micros(m.late), micros(m.queue))
		processEvidence(j, p, &f)
		out = append(out, f)
	}
	return out
}
