package detect

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// The ledger is the engine's time accounting: per communicator and training step, which
// member the step waited for and how long, so that the job time each root costs can be read
// over a sliding window of steps. Live, the detector keeps one ledger per job across
// evaluations (each snapshot holds only the newest ops); offline, one is filled from the
// whole history at once. Either way it holds a bounded number of steps per communicator.

// ledgerWindows bounds what a communicator keeps: its waits of the last few judged windows,
// and at most maxSpans of them.
const (
	ledgerWindows   = 4
	maxSpans        = 2048
	maxSpansOffline = 1 << 16
)

// Ledger is the time accounting of one job. Safe for use by one evaluation at a time.
type Ledger struct {
	mu     sync.Mutex
	groups map[string]*groupLedger
	// measured holds what the profiler plugin's timing windows said at recent evaluations.
	measured map[string][]measuredSample
	// lastNamed is when an evaluation last named a slowdown's root.
	lastNamed time.Time
	// episodeEnded is, per root, when its newest arrival episode that ended live ended:
	// the plugin's timing window averages that episode's waits in for a while after. Kept
	// apart from the spans, which may be cut (or too few left to make an episode) before
	// that echo fades.
	episodeEnded map[string]snapshot.Micros
	// linkBase is each send direction's fastest network time per step seen (µs), by
	// communicator, sender and peer: a pair's own speed before.
	linkBase map[string]int64
	// measuredNamed are the ranks the last evaluation named from the plugin's timings.
	measuredNamed map[string]bool
	// longestPause is the longest wait booked (µs): the longest pause the job recovered
	// from, which an open wait must outlast to page while its root is alive (certainty.go).
	longestPause int64
	// pairSince is when each slow pair (by its finding's key) was first seen slow, live,
	// from the second evaluation on (pairsSeen): see pairHold.
	pairSince map[string]time.Time
	pairsSeen bool
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{groups: map[string]*groupLedger{}, measured: map[string][]measuredSample{}, linkBase: map[string]int64{},
		episodeEnded: map[string]snapshot.Micros{}}
}

// groupLedger is one communicator's waits: per training step, the span of wall time its
// members waited for one of them. Within a step a late rank's lag counts once, at its
// longest: the others' hosts issue the step's ops ahead of their GPUs, so a rank late by d
// at every op of a step holds the job up by d, not by d per op; the hosts that wait for the
// step to finish (a synchronize, a loss read back) start the next step that much later.
type groupLedger struct {
	done      int64 // the last position accounted
	positions int64 // positions per step (0: not known yet)
	period    int64 // µs per step, median
	first     snapshot.Micros
	last      snapshot.Micros // the newest arrival booked
	spans     []lateSpan
	// steps are the start times of the newest steps (their first arrival), for the step
	// period over time; baseline is the shortest median period of a whole window seen.
	steps    []stepStart
	baseline int64
	keys     []string // proc keys, indexed by lateSpan.root
	keyIndex map[string]int32
}

// stepStart is when step k's first arrival came.
type stepStart struct {
	k int64
	t snapshot.Micros
}

// lateSpan is wall time the members waited for root in one step: from the second-last
// arrival at a position to root's own (or to that of whom root itself waited for).
type lateSpan struct {
	root       int32
	step       int64
	start, end snapshot.Micros
	seq        int64 // the position where it waited longest
}

// measuredSample is one evaluation's plugin-measured lateness of a rank on a communicator.
type measuredSample struct {
	at    time.Time
	group string
	share float64
	late  int64 // µs per op
	queue int64 // µs its kernels start after issue, beyond its peers'
	// spread is how far its peers' own kernel times lie apart (µs): their jitter.
	spread int64
}

func (gl *groupLedger) keyOf(k string) int32 {
	if i, ok := gl.keyIndex[k]; ok {
		return i
	}
	i := int32(len(gl.keys))
	gl.keys = append(gl.keys, k)
	gl.keyIndex[k] = i
	return i
}

// Observe accounts the positions every member of each communicator issued since the last
// call. Positions one member has not reported yet wait for a later call. A member that
// arrived late because it had been waiting in another communicator's op for someone else is
// not booked: the wait is followed to that one (follow).
func (l *Ledger) Observe(j *Job, cfg SlowdownConfig) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(map[string]bool, len(j.Groups))
	gls := make([]*groupLedger, len(j.Groups))
	for i, g := range j.Groups {
		if len(g.Members) < 2 {
			continue
		}
		gl := l.groups[g.ID]
		if gl == nil {
			gl = &groupLedger{keyIndex: map[string]int32{}}
			l.groups[g.ID] = gl
		}
		gls[i], seen[g.ID] = gl, true
	}
	for id := range l.groups {
		if !seen[id] {
			delete(l.groups, id)
		}
	}
	fresh := make([][]arrival, len(j.Groups))
	j.eachGroup(func(i int, g *Group) {
		if gls[i] != nil {
			fresh[i] = groupArrivals(g, gls[i].done, 0)
		}
	})
	fw := newFollower(j)
	for i, g := range j.Groups {
		if gls[i] == nil || len(fresh[i]) == 0 {
			continue
		}
		gl := gls[i]
		gl.shape(g, fresh[i])
		for k := range fresh[i] {
			a := &fresh[i][k]
			if gl.ranAhead(g, a) {
				a.delay = 0
			}
			if gl.period > 0 && a.delay*10 >= gl.period {
				a.root = fw.follow(g, a)
			}
		}
		keep, most, steps := ledgerWindows*gl.window(cfg), maxSpans, maxSteps
		if j.Offline {
			keep, most, steps = 1<<62, maxSpansOffline, maxSpansOffline // a whole log is judged at once
		}
		l.longestPause = max(l.longestPause, gl.book(g, fresh[i], keep, most, steps))
	}
	l.observeMeasured(j, cfg)
}

func (gl *groupLedger) shape(g *Group, arr []arrival) {
	if sh := shapeOf(g, arr); sh.positions > 0 && (gl.positions == 0 || sh.period > 0) {
		gl.positions = sh.positions
		if sh.period > 0 {
			gl.period = sh.period
		}
	}
}

// ranAhead says whether the member that arrived second-last had already issued the next
// step's first op of the communicator when the last one arrived: then it never waited for
// it (hosts that run ahead of their GPUs issue with a steady offset that costs nothing). A
// host that waits for the step's collectives before its next step (a synchronize, a loss
// read back) issues the next step only after the last rank's arrival.
func (gl *groupLedger) ranAhead(g *Group, a *arrival) bool {
	if a.delay <= 0 || a.prev < 0 || gl.positions == 0 {
		return false
	}
	next := ((a.seq-1)/gl.positions+1)*gl.positions + 1
	o := opAt(g.Members[a.prev].Comm, next)
	return o != nil && o.T != 0 && o.T < a.at
}

// book records each position's wait as a span of wall time; a root's waits of one step are
// one span, as long as the longest. It returns the longest wait booked (µs).
func (gl *groupLedger) book(g *Group, arr []arrival, keep int64, most, mostSteps int) (longest int64) {
	if gl.positions == 0 {
		return 0
	}
	for _, a := range arr {
		if gl.first == 0 || a.first < gl.first {
			gl.first = a.first
		}
		gl.last = max(gl.last, a.at)
		k := (a.seq - 1) / gl.positions
		if n := len(gl.steps); n == 0 || gl.steps[n-1].k < k {
			gl.steps = append(gl.steps, stepStart{k: k, t: a.first})
		} else if gl.steps[n-1].k == k {
			gl.steps[n-1].t = min(gl.steps[n-1].t, a.first)
		}
		if a.delay <= 0 {
			continue
		}
		root := a.root
		if root == nil {
			root = g.Members[a.last].Proc
		}
		sp := lateSpan{root: gl.keyOf(root.Key()), step: (a.seq - 1) / gl.positions, start: a.at - snapshot.Micros(a.delay), end: a.at, seq: a.seq}
		longest = max(longest, a.delay)
		if n := len(gl.spans); n > 0 && gl.spans[n-1].root == sp.root && gl.spans[n-1].step == sp.step {
			if prev := &gl.spans[n-1]; sp.end-sp.start > prev.end-prev.start {
				*prev = sp
			}
			continue
		}
		gl.spans = append(gl.spans, sp)
	}
	gl.done = arr[len(arr)-1].seq
	cut := 0
	for cut < len(gl.spans) && (len(gl.spans)-cut > most || int64(gl.last-gl.spans[cut].end) > keep) {
		cut++
	}
	if cut > 0 {
		gl.spans = append(gl.spans[:0], gl.spans[cut:]...)
	}
	if n := len(gl.steps); n > mostSteps {
		gl.steps = append(gl.steps[:0], gl.steps[n-mostSteps:]...)
	}
	return longest
}

// lateShare is the share of the wall time since `since` that the members waited for any of
// them by a step's tenth or more.
func (gl *groupLedger) lateShare(since snapshot.Micros, cfg SlowdownConfig) float64 {
	if gl.last <= since {
		return 0
	}
	lateAt := snapshot.Micros(cfg.SlowdownShare * float64(gl.period))
	var lost int64
	for _, sp := range gl.spans {
		if sp.end > since && sp.end-sp.start >= lateAt {
			lost += int64(sp.end - max(sp.start, since))
		}
	}
	return float64(lost) / float64(gl.last-since)
}

// noise is the job's step-to-step noise over [a, b], as a share of its step: the standard
// deviation of its step periods over their mean, without the longest tenth (the stalls
// being judged are not the noise they must stand above).
func (gl *groupLedger) noise(a, b snapshot.Micros) float64 {
	var d []float64
	for i := 1; i < len(gl.steps); i++ {
		p, q := gl.steps[i-1], gl.steps[i]
		if q.k == p.k+1 && p.t >= a && q.t <= b && q.t > p.t {
			d = append(d, float64(q.t-p.t))
		}
	}
	if len(d) < 4 {
		return 0
	}
	slices.Sort(d)
	d = d[:len(d)-len(d)/10]
	var sum, sq float64
	for _, x := range d {
		sum += x
		sq += x * x
	}
	n := float64(len(d))
	mean := sum / n
	return math.Sqrt(max(sq/n-mean*mean, 0)) / mean
}

// stepsIn counts the steps that began in [a, b].
func (gl *groupLedger) stepsIn(a, b snapshot.Micros) int {
	lo := sort.Search(len(gl.steps), func(i int) bool { return gl.steps[i].t >= a })
	hi := sort.Search(len(gl.steps), func(i int) bool { return gl.steps[i].t > b })
	return max(hi-lo, 1)
}

// maxSteps bounds the step times kept per communicator.
const maxSteps = 512

// minWindowSteps is the fewest steps a window of the job's pace holds: a median of fewer
// follows the noise.
const minWindowSteps = 8

// slowedSteps compares the step period over the newest window of steps with the job's own
// baseline (the shortest window median seen after the warm-up): the share of wall time the
// job now loses, whoever causes it; 0 when there is no baseline yet.
func (gl *groupLedger) slowedSteps(cfg SlowdownConfig) (share float64, now, base int64, since snapshot.Micros) {
	var d []int64
	var at []snapshot.Micros
	for i := 1; i < len(gl.steps); i++ {
		a, b := gl.steps[i-1], gl.steps[i]
		if b.k == a.k+1 && b.t > a.t && a.k >= int64(cfg.SlowdownWarmupSteps) {
			d, at = append(d, int64(b.t-a.t)), append(at, a.t)
		}
	}
	// A window of slowdown_steps, or half the steps there are (a short job, or slow steps:
	// 30 steps of a second), but never fewer than minWindowSteps.
	win := max(min(cfg.SlowdownSteps, len(d)/2), minWindowSteps)
	if len(d) < 2*win {
		return 0, 0, 0, 0
	}
	for i := win; i <= len(d)-win; i += win / 2 {
		if m := median(d[i-win : i]); gl.baseline == 0 || m < gl.baseline {
			gl.baseline = m
		}
	}
	now = median(d[len(d)-win:])
	if gl.baseline <= 0 || now <= gl.baseline {
		return 0, now, gl.baseline, 0
	}
	// The onset: the first step of the newest run of steps slower than halfway there.
	since = at[len(at)-1]
	for i := len(d) - 1; i >= 0 && 2*d[i] >= now+gl.baseline; i-- {
		since = at[i]
	}
	return 1 - float64(gl.baseline)/float64(now), now, gl.baseline, since
}
