package detect

import (
	"math"
	"slices"
	"sort"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Episodes: the spans of time over which one root cost the job at least the slowdown share,
// judged from a communicator's ledger over a sliding window of steps, with significance (above
// the job's own noise), recurrence (over the long window) and hysteresis.

// episode is a span of time over which one root cost the job at least the share.
type episode struct {
	group        string
	root         string
	onset, end   snapshot.Micros // end 0: still going at the newest arrival
	share        float64         // over the window where it peaked
	lost         int64           // µs of job time in all
	bursts       int             // separate bursts of waiting: 1 is a steady lag, more a stall that recurs
	longestQuiet int64           // µs between two of its bursts, at the longest: how often it recurs
	intermittent bool            // stalls in a minority of its steps, not a lag at every step
	lateSteps    int
	longestLate  int64
	lateShare    float64 // of a step, for a wait to be one of the episode's
	period       int64
	seq          int64 // a position where the job waited for it
}

// window is the wall time a share is judged over: cfg.SlowdownSteps steps, and never less
// than minWindow (a step mistaken for a burst of back-to-back ops is a few µs long).
func (gl *groupLedger) window(cfg SlowdownConfig) int64 {
	return max(int64(max(cfg.SlowdownSteps, 2))*gl.period, minWindow)
}

// minWindow: 5 s.
const minWindow = 5_000_000

// episodes reads the ledger of one communicator: per root, the spans of time where the
// waiting it caused was at least cfg.SlowdownShare of the wall time over the window, and
// recurred (a steady lag, or stalls that came back). A single burst that ended is one
// stall, not a slowdown; the hang rules judge stalls. Nothing is judged before the window
// has passed after the warm-up.
func (gl *groupLedger) episodes(id string, cfg SlowdownConfig) []episode {
	if gl.period <= 0 || len(gl.spans) == 0 {
		return nil
	}
	w := gl.window(cfg)
	warm := gl.first + snapshot.Micros(int64(cfg.SlowdownWarmupSteps)*gl.period)
	if int64(gl.last-warm) < w {
		return nil
	}
	gap := 2 * gl.period // waits closer than this are one burst
	// Only waits of a step's tenth or more count: the jitter of every rank's arrivals is
	// nobody's doing.
	lateAt := snapshot.Micros(cfg.SlowdownShare * float64(gl.period))
	byRoot := map[int32][]lateSpan{}
	for _, sp := range gl.spans {
		if sp.end > warm && sp.end-max(sp.start, warm) >= lateAt {
			sp.start = max(sp.start, warm)
			byRoot[sp.root] = append(byRoot[sp.root], sp)
		}
	}
	var out []episode
	for r, spans := range byRoot {
		// Judge at each wait's end, at each step's start (so that an episode ends while
		// nobody is late) and at the newest arrival, in time order.
		var ends []snapshot.Micros
		for _, sp := range spans {
			if int64(sp.end-warm) >= w {
				ends = append(ends, sp.end)
			}
		}
		for _, st := range gl.steps {
			if int64(st.t-warm) >= w {
				ends = append(ends, st.t)
			}
		}
		ends = append(ends, gl.last)
		slices.Sort(ends)
		var cur *episode
		var held snapshot.Micros // since when the opening condition has held (0: it does not)
		var heldFrom snapshot.Micros
		for _, b := range ends {
			a := b - snapshot.Micros(w)
			lost, _, _, lastEnd := spansIn(spans, a, b, gap)
			share := float64(lost) / float64(w)
			// One stall (a step or two), or one burst that is over, is no slowdown; bursts
			// that recur are counted over the longer window, so that a pause every window or
			// so (an evaluation every few steps) is one.
			_, stepsLong, bursts, _ := spansIn(spans, b-snapshot.Micros(longWindow(w)), b, gap)
			oneOff := stepsLong < minLateSteps || (bursts == 1 && int64(b-lastEnd) > gap)
			opens := cur == nil && share >= cfg.SlowdownShare && !oneOff &&
				standsAboveNoise(spans, a, b, gl.period, int64(lateAt), share, cfg.SlowdownShare+gl.noise(a, b), gl.stepsIn(a, b))
			switch {
			case cur == nil && !opens:
				held = 0
			case opens && held == 0:
				held, heldFrom = b, a
			}
			switch {
			case opens && int64(b-held) >= minHeldSteps*gl.period:
				// Held over two steps at least: a burst of jitter that sums to the share for
				// a moment is nobody's.
				cur = &episode{group: id, root: gl.keys[r], period: gl.period, share: share, lateShare: cfg.SlowdownShare}
				for _, sp := range spans {
					if sp.end > heldFrom {
						cur.onset, cur.seq = max(sp.start, heldFrom), sp.seq
						break
					}
				}
				held = 0
			case cur != nil && exitShare(spans, b, w, gap) < cfg.SlowdownShare/2:
				out = append(out, cur.close(spans, b, gap, gl.stepsIn))
				cur = nil
			case cur != nil:
				cur.share = max(cur.share, share)
			}
		}
		if cur != nil {
			e := cur.close(spans, gl.last, gap, gl.stepsIn)
			if e.going(gl.last, gap) {
				e.end = 0
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].onset < out[b].onset })
	return out
}

// exitShare is the share over a longer window (twice the window, at most 10 s more): an
// episode ends only once that is low, so that stalls which come back every window or so
// stay one episode.
func exitShare(spans []lateSpan, b snapshot.Micros, w, gap int64) float64 {
	x := longWindow(w)
	lost, _, _, _ := spansIn(spans, b-snapshot.Micros(x), b, gap)
	return float64(lost) / float64(x)
}

// longWindow is the window recurrence and an episode's end are judged over: twice the
// window, at most 10 s more.
func longWindow(w int64) int64 { return min(2*w, w+10_000_000) }

// minLateSteps: a slowdown is late at two steps of a window at least (one is a stall).
const minLateSteps = 2

// minHeldSteps: an episode opens once its condition has held this many steps.
const minHeldSteps = 2

// standsAboveNoise: a root's lateness counts only where it stands above the job's own
// step-to-step noise: the lower confidence bound (two standard errors over the window's
// steps) of its share clears the threshold raised by that noise (need), so that jitter at
// the threshold (a rank 7 ms late in 65 ms steps that vary by as much) is nobody's. Waits
// of several times the threshold (stalls) are no jitter: they count as they are.
func standsAboveNoise(spans []lateSpan, a, b snapshot.Micros, period, lateAt int64, share, need float64, steps int) bool {
	var sq float64
	for _, sp := range spans {
		s, e := max(sp.start, a), min(sp.end, b)
		if e <= s {
			continue
		}
		if int64(e-s) >= 3*lateAt {
			return true
		}
		x := float64(e-s) / float64(period)
		sq += x * x
	}
	n := float64(max(steps, 1))
	v := max(sq/n-share*share, 0)
	return share-2*math.Sqrt(v/n) >= need
}

// spansIn sums the waiting within [a, b], counts its late steps and bursts (waits closer
// than gap are one) and says when the last one ended.
func spansIn(spans []lateSpan, a, b snapshot.Micros, gap int64) (lost int64, steps, bursts int, lastEnd snapshot.Micros) {
	for _, sp := range spans {
		s, e := max(sp.start, a), min(sp.end, b)
		if e <= s {
			continue
		}
		lost += int64(e - s)
		steps++
		if bursts == 0 || int64(s-lastEnd) > gap {
			bursts++
		}
		lastEnd = e
	}
	return lost, steps, bursts, lastEnd
}

// going says whether an open episode still goes on at `last`, the newest arrival: a lag
// until it has missed two steps; stalls that recur until the next one is overdue by half
// their longest quiet spell, so that an incident stays open between its stalls instead of
// resolving and paging again at each.
func (e *episode) going(last snapshot.Micros, gap int64) bool {
	quiet := int64(last - e.end)
	return quiet <= gap || (e.bursts > 1 && 2*quiet <= 3*e.longestQuiet)
}

// close sums what the root cost from the episode's onset to `to`, and how it came.
func (e *episode) close(spans []lateSpan, to snapshot.Micros, gap int64, stepsIn func(a, b snapshot.Micros) int) episode {
	// Only waits of a step's tenth or more make the episode's steps and its end: jitter
	// after a lag ended is not the lag.
	lateAt := int64(e.lateShare * float64(e.period))
	var prevEnd snapshot.Micros
	for _, sp := range spans {
		if sp.end <= e.onset || sp.start > to || int64(sp.end-sp.start) < lateAt {
			continue
		}
		s := max(sp.start, e.onset)
		e.lost += int64(sp.end - s)
		e.longestLate = max(e.longestLate, int64(sp.end-s))
		if e.bursts == 0 || int64(s-prevEnd) > gap {
			if e.bursts > 0 {
				e.longestQuiet = max(e.longestQuiet, int64(s-prevEnd))
			}
			e.bursts++
		}
		e.lateSteps++
		prevEnd = sp.end
		e.end = sp.end
	}
	if steps := stepsIn(e.onset, e.end); e.bursts > 1 {
		e.intermittent = e.lateSteps*2 < steps
	}
	return *e
}
