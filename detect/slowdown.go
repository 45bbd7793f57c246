package detect

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// SlowdownConfig: a root (a rank, its GPU, a link) slows the job when the waiting it causes
// is at least SlowdownShare of the job's wall time over the last SlowdownSteps training
// steps, and recurs (a steady lag, or stalls that come back): never by an absolute number of
// milliseconds, since 20 ms late in a 20 ms step halves the job's speed and is nothing in a
// 10 s one. A step is the communicator's repeating op pattern; the first SlowdownWarmupSteps
// steps are not judged (ranks reach their first collectives after different start-up work).
//
// With the profiler plugin, lateness is also measured on the GPUs (a late rank's kernels run
// shortest: its peers wait inside theirs), over at least MeasuredMinOps collectives; and a
// link is slow when its send steps spend SlowLinkFactor times the other links' time on the
// network, over at least SlowLinkMinSteps steps.
type SlowdownConfig struct {
	SlowdownShare       float64 `yaml:"slowdown_share"`
	SlowdownSteps       int     `yaml:"slowdown_steps"`
	SlowdownWarmupSteps int     `yaml:"slowdown_warmup_steps"`
	MeasuredMinOps      int     `yaml:"measured_min_ops"`
	SlowLinkFactor      float64 `yaml:"slow_link_factor"`
	SlowLinkMinSteps    int     `yaml:"slow_link_min_steps"`
}

// Timing says whether arrival times can be trusted for lag claims.
type Timing int

const (
	// TimingOK: NCCL timestamps with sub-second digits, or live read times.
	TimingOK Timing = iota
	// TimingNone: offline logs without NCCL timestamps: no lag can be measured.
	TimingNone
	// TimingCoarse: NCCL timestamps with whole seconds only.
	TimingCoarse
)

// TimestampHint tells the user how to make lag measurable.
const TimestampHint = "set NCCL_DEBUG_TIMESTAMP_LEVELS=INFO (or ALL) and NCCL_DEBUG_TIMESTAMP_FORMAT='[%F %T.%6f] ' (NCCL 2.26+; on 2.26.3+ '[%F_%T.%6f]_' avoids spaces in the value)"

// JobTiming judges the job's timing source. Live jobs are timed by the sidecar's read time
// when NCCL prints no timestamp, which is good to ~10 ms.
func JobTiming(j *Job) Timing {
	if !j.Offline {
		return TimingOK
	}
	worst := TimingOK
	for _, p := range j.Procs {
		if !p.Timestamps {
			return TimingNone
		}
		if p.TSDigits == 0 {
			worst = TimingCoarse
		}
	}
	return worst
}

// Slowdowns runs the time accounting: it books the job's new positions into its ledger (the
// live detector's, kept across evaluations, or a fresh one holding this job's history), then
// names each root whose cost reached the share: ranks the others waited for (host side, or
// on their GPUs with the plugin), and slow links. Offline, every episode is a finding, with
// its onset and end; live, the one still going.
func Slowdowns(j *Job, cfg Config, timing Timing) []Finding {
	led := j.Ledger
	if led == nil {
		led = NewLedger()
	}
	sc := cfg.SlowdownConfig
	if timing == TimingOK {
		led.Observe(j, sc)
	} else {
		led.observeMeasured(j, sc)
	}
	links := led.slowLinks(j, sc)
	// What a slow link adds to each op of its communicator (µs): lateness on the GPUs up to
	// about that much is the link's doing, not a rank's.
	onLinks := map[string]int64{}
	for _, r := range links {
		for _, l := range r.links {
			onLinks[l.group] = max(onLinks[l.group], l.excessPerOp)
		}
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	procs := make(map[string]*Proc, len(j.Procs))
	for _, p := range j.Procs {
		procs[p.Key()] = p
	}
	groups := make(map[string]*Group, len(j.Groups))
	for _, g := range j.Groups {
		groups[g.ID] = g
	}
	var out []Finding
	if timing == TimingOK {
		out = append(out, led.rankEpisodes(j, sc, procs, groups)...)
	}
	if j.Offline && timing == TimingOK {
		out = append(out, led.resolvedStalls(j, cfg.HangFloor, procs, out)...)
	}
	out = append(out, led.measuredRoots(j, sc, procs, groups, onLinks, out)...)
	for _, l := range links {
		out = append(out, l.finding(j))
	}
	if timing == TimingOK {
		if f, ok := led.unattributed(j, sc, groups, out); ok {
			out = append(out, f)
		}
	}
	return out
}

// unattributedQuiet is how long after a named root no unattributed slowdown is said.
const unattributedQuiet = 30 * time.Second

// unattributed finds the job slower than its own baseline with no root booked for most of
// it: every rank arrives on time and waits in its collectives (a slow link seen only from
// logs, a GPU slower than its peers while the hosts wait for it). The root is then the one
// member whose own evidence shows a cause (its GPU shared, throttled or faulted); else the
// finding says what is known and how to see more.
func (l *Ledger) unattributed(j *Job, sc SlowdownConfig, groups map[string]*Group, named []Finding) (Finding, bool) {
	var best struct {
		g         *Group
		share     float64
		now, base int64
		since     snapshot.Micros
	}
	for _, f := range named {
		if f.Episode != nil || f.Kind == incident.KindLink {
			// A named root slows every communicator of the job: the job's slowdown is
			// its, whatever share each communicator shows.
			l.lastNamed = j.Now
			return Finding{}, false
		}
	}
	if !l.lastNamed.IsZero() && j.Now.Sub(l.lastNamed) < unattributedQuiet {
		// The steps a root slowed are still in the window after its episode ended.
		return Finding{}, false
	}
	ids := make([]string, 0, len(l.groups))
	for id := range l.groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		g := groups[id]
		gl := l.groups[id]
		share, now, base, since := gl.slowedSteps(sc)
		if g == nil || share < sc.SlowdownShare || share <= best.share || gl.lateShare(since, sc) >= sc.SlowdownShare/2 {
			continue // not slower, or someone arrives late: the accounting names them
		}
		best.g, best.share, best.now, best.base, best.since = g, share, now, base, since
	}
	if best.g == nil {
		return Finding{}, false
	}
	g := best.g
	f := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Comm: g.ID, Key: "slowdown:" + j.Name,
		Victims: len(g.Members), FaultAt: best.since.Time(),
		Episode: &incident.Episode{Onset: best.since.Time(), LostShare: best.share}}
	what := fmt.Sprintf("the job's steps take %s, %.0f%% of their time more than its own baseline of %s (communicator %s), since %s",
		micros(best.now), 100*best.share/(1-best.share), micros(best.base), shortComm(g.ID), fmtTime(best.since.Time()))
	// The members whose own evidence names a cause.
	var suspects []*Proc
	var why []string
	for _, m := range g.Members {
		e := episode{}
		// NVML's word only: the plugin's timings are what the slowdown distorts.
		if c, w := slowCause(j, m.Proc, e, nil); c == incident.CauseGPUBusy || c == incident.CauseGPUThrottled || c == incident.CauseGPUFault {
			suspects = append(suspects, m.Proc)
			why = append(why, w)
			f.Cause = c
		}
	}
	if gpu, on := oneGPU(j, suspects); gpu != nil && len(suspects) > 1 {
		// The ranks that show a cause share one GPU (ranks of one job on one GPU, or a
		// foreign process on it): the GPU is the root.
		p := suspects[0]
		c := p.Culprit()
		// The GPU as NVML names it: a rank's own line may not say its device (WARN logs).
		c.Rank, c.PID, c.GPU = -1, 0, fmt.Sprintf("%d (bus %s)", gpu.Index, gpu.BusID)
		f.Culprits, f.Victims = []incident.Culprit{c}, len(g.Members)-len(suspects)
		for _, q := range suspects {
			f.culpritKeys = append(f.culpritKeys, q.Key())
		}
		// The job's slowdown is one incident whoever the evidence names at each moment
		// (Key stays "slowdown:<job>").
		f.Summary = fmt.Sprintf("GPU %d of %s (bus %s, serving %s) slows the job: %s; no rank arrives late, so every rank waits on the GPUs, and %s",
			gpu.Index, p.Host, gpu.BusID, procNames(on), what, why[0])
		processEvidence(j, p, &f)
		return f, true
	}
	if len(suspects) == 1 {
		p := suspects[0]
		f.Culprits, f.culpritKeys, f.Victims = []incident.Culprit{p.Culprit()}, []string{p.Key()}, len(g.Members)-1
		f.Summary = fmt.Sprintf("%s slows the job: %s; no rank arrives late, so every rank waits on the GPUs, and %s: %s",
			p.Name(), what, p.Name(), why[0])
		processEvidence(j, p, &f)
		return f, true
	}
	f.Cause = ""
	f.Summary = fmt.Sprintf("the job slowed down: %s; no rank arrives late at its collectives, so the time goes inside them: a slow link or NIC, or a GPU slower than its peers; the logs cannot say which (the NCCL profiler plugin measures both)", what)
	if len(suspects) > 1 {
		f.Summary += fmt.Sprintf("; %d ranks' GPUs show a cause", len(suspects))
		for i, p := range suspects {
			f.addEvidence("%s: %s", p.Name(), why[i])
		}
	}
	return f, true
}

// oneGPU is the GPU all of ps run on, with the job's ranks on it; nil when they use several
// or it is not known.
func oneGPU(j *Job, ps []*Proc) (*snapshot.GPU, []*Proc) {
	var gpu *snapshot.GPU
	for _, p := range ps {
		g := gpuOf(j, p)
		if g == nil || gpu != nil && g != gpu {
			return nil, nil
		}
		gpu = g
	}
	if gpu == nil {
		return nil, nil
	}
	if _, on := ranksOnGPU(j, ps[0], gpu); len(on) > 0 {
		return gpu, on
	}
	return gpu, ps // the ranks exited since: the suspects are what is known
}

// rankEpisodes turns each communicator's episodes into findings, one per root and episode:
// the communicator where the root cost the job most.
func (l *Ledger) rankEpisodes(j *Job, sc SlowdownConfig, procs map[string]*Proc, groups map[string]*Group) []Finding {
	var all []episode
	for id, gl := range l.groups {
		all = append(all, gl.episodes(id, sc)...)
	}
	// One finding per root and overlapping span: its costliest communicator.
	sort.Slice(all, func(a, b int) bool {
		if all[a].root != all[b].root {
			return all[a].root < all[b].root
		}
		if all[a].lost != all[b].lost {
			return all[a].lost > all[b].lost
		}
		return all[a].group < all[b].group
	})
	var kept []episode
	for _, e := range all {
		dup := false
		for i := range kept {
			if k := &kept[i]; k.root == e.root && overlaps(*k, e) {
				dup = true
				break
			}
		}
		if !dup {
			kept = append(kept, e)
		}
	}
	for k, end := range l.episodeEnded {
		if j.Now.Sub(end.Time()) > time.Minute {
			delete(l.episodeEnded, k)
		}
	}
	sort.Slice(kept, func(a, b int) bool { return kept[a].onset < kept[b].onset })
	var out []Finding
	n := map[string]int{}
	lead := map[string]int{}
	for _, e := range kept {
		p := procs[e.root]
		if !j.Offline && e.end != 0 {
			// Live, an episode that ended is over: its incident resolves.
			l.episodeEnded[e.root] = max(l.episodeEnded[e.root], e.end)
			continue
		}
		if p == nil {
			continue
		}
		n[e.root]++
		f := l.episodeFinding(j, e, p, groups[e.group], n[e.root])
		if first, ok := lead[e.root]; ok {
			// A root that comes back is one finding, with its episodes listed.
			out[first].Episodes = append(out[first].Episodes, *f.Episode)
			out[first].addEvidence("again from %s: %s", fmtTime(f.Episode.Onset), f.Summary)
			continue
		}
		lead[e.root] = len(out)
		out = append(out, f)
	}
	return out
}

func overlaps(a, b episode) bool {
	aEnd, bEnd := a.end, b.end
	if aEnd == 0 {
		aEnd = 1 << 62
	}
	if bEnd == 0 {
		bEnd = 1 << 62
	}
	return a.onset <= bEnd && b.onset <= aEnd
}

// episodeFinding names a rank the job waited for, what it cost and why, from its evidence.
func (l *Ledger) episodeFinding(j *Job, e episode, p *Proc, g *Group, nth int) Finding {
	key := "rank:" + p.Key()
	if nth > 1 {
		key += fmt.Sprintf("#%d", nth)
	}
	victims := 0
	if g != nil {
		victims = len(g.Members) - 1
	}
	f := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Comm: e.group, Seq: e.seq,
		Culprits: []incident.Culprit{p.Culprit()}, culpritKeys: []string{p.Key()}, Key: key, Victims: victims,
		LagSeconds: e.share * float64(e.period) / 1e6, FaultAt: e.onset.Time()}
	if e.intermittent {
		f.LagSeconds = float64(e.longestLate) / 1e6
	}
	steps := 0
	if e.period > 0 {
		to := e.end
		if to == 0 {
			to = snapshot.MicrosOf(j.Now)
		}
		steps = int(int64(to-e.onset) / e.period)
	}
	f.Episode = &incident.Episode{Onset: e.onset.Time(), End: e.end.Time(), LostShare: e.share,
		Lost: time.Duration(e.lost) * time.Microsecond, Steps: steps}
	m := l.latestMeasured(p.Key(), j.Now)
	cause, why := slowCause(j, p, e, m)
	f.Cause = cause
	if nth == 1 {
		f.Key = rootKey(j, p, cause)
	}
	pattern := fmt.Sprintf("the others waited for it about %s a step", micros(int64(e.share*float64(e.period))))
	if e.intermittent {
		pattern = fmt.Sprintf("it stalled %d times, for up to %s", e.bursts, micros(e.longestLate))
	}
	since := "since " + fmtTime(e.onset.Time())
	if e.end != 0 {
		since = fmt.Sprintf("from %s to %s", fmtTime(e.onset.Time()), fmtTime(e.end.Time()))
	}
	f.Summary = fmt.Sprintf("%s is a straggler: it slows the job, costing %.0f%% of its time (%s lost, steps of %s), %s; %s: %s",
		p.Name(), 100*e.share, micros(e.lost), micros(e.period), since, pattern, why)
	f.addEvidence("communicator %s: the step takes %s; the job waited for %s %s in all over %d step(s) since its onset",
		shortComm(e.group), micros(e.period), p.Name(), micros(e.lost), steps)
	if m != nil {
		f.addEvidence("measured on the GPUs by the NCCL profiler plugin: its collectives start %s late per op, its kernels %s after issue beyond its peers'",
			micros(m.late), micros(m.queue))
	}
	processEvidence(j, p, &f)
	return f
}

// slowCause names why a rank is late, from its own evidence: its GPU shared with another
// process or throttled or faulted (NVML), its kernels queued behind others (the plugin), or
// else its host: late at every step (input pipeline, CPU), or stalling now and then.
func slowCause(j *Job, p *Proc, e episode, m *measuredSample) (incident.Cause, string) {
	if g := gpuOf(j, p); g != nil {
		if n, mine := gpuShared(j, p, g); n > 0 {
			return incident.CauseGPUBusy, fmt.Sprintf("its GPU %d is shared with %d other process(es) (NVML lists %d on it, %d of them this job's)",
				g.Index, n, len(g.Procs), mine)
		}
		if r := throttled(g); r != "" {
			return incident.CauseGPUThrottled, fmt.Sprintf("its GPU %d is throttled (%s, SM at %d of %d MHz)", g.Index, r, g.SMClockMHz, g.SMMaxMHz)
		}
		if len(g.XIDs) > 0 {
			return incident.CauseGPUFault, fmt.Sprintf("its GPU %d reported XID %d", g.Index, g.XIDs[len(g.XIDs)-1].Code)
		}
	}
	if m != nil && m.late > 0 && m.queue*2 >= m.late {
		return incident.CauseGPUBusy, "its GPU starts its collectives late after the host issued them: the GPU is busy with its own work (longer kernels, slower compute)"
	}
	host := "its host issues its collectives late every step (input pipeline, CPU, Python)"
	if e.intermittent {
		host = "its host stalls now and then before issuing its collectives (checkpoints, garbage collection, I/O, data loading)"
	}
	switch p.Stat {
	case "D":
		host += "; the process is in uninterruptible I/O (state D)"
	case "R":
		if p.CPUPct > 0 {
			host += fmt.Sprintf("; the process burns %.0f%% CPU", p.CPUPct)
		}
	case "S":
		host += "; the process sleeps"
	}
	if e.intermittent {
		return incident.CauseHostStalled, host
	}
	return incident.CauseHostSlow, host
}

// gpuShared counts the processes on a rank's GPU beyond the job's ranks using it, and those
// ranks. NVML may list host PIDs the sidecar's namespace does not share, so counts decide.
func gpuShared(j *Job, p *Proc, g *snapshot.GPU) (others, mine int) {
	if !g.Has("procs") || len(g.Procs) == 0 {
		return 0, 0
	}
	for _, q := range j.Procs {
		// Exited ranks too: NVML lists a process's context for a while after it exits, and
		// a job's own ranks that ended are no foreign process.
		if q.Node == p.Node && gpuOf(j, q) == g {
			mine++
		}
	}
	return max(len(g.Procs)-mine, 0), mine
}

// rootKey is the key of a slowdown's root: the GPU where another process shares it (every
// rank on that GPU, and the job's own slowdown seen from its steps, are one root then),
// else the rank, whose hang, slowdown and death are one incident.
func rootKey(j *Job, p *Proc, cause incident.Cause) string {
	if g := gpuOf(j, p); g != nil && cause == incident.CauseGPUBusy {
		if n, _ := gpuShared(j, p, g); n > 0 {
			return gpuKey(p, g)
		}
	}
	return "rank:" + p.Key()
}

func gpuKey(p *Proc, g *snapshot.GPU) string { return "gpu:" + p.Node + ":" + g.BusID }

// ranksOnGPU counts the job's live ranks on p's node that use GPU g.
func ranksOnGPU(j *Job, p *Proc, g *snapshot.GPU) (n int, ranks []*Proc) {
	for _, q := range j.Procs {
		if q.Node == p.Node && q.State != snapshot.ProcExited && gpuOf(j, q) == g {
			n++
			ranks = append(ranks, q)
		}
	}
	return n, ranks
}

// throttled names the clock-event reasons that slow a busy GPU. Idle and application-clock
// settings do not; a software power cap is what every busy GPU at its power limit reports,
// so it counts only where the SM clock fell well below its maximum.
func throttled(g *snapshot.GPU) string {
	slowed := g.SMMaxMHz > 0 && g.SMClockMHz > 0 && g.SMClockMHz*100 < g.SMMaxMHz*85
	var r []string
	for _, x := range g.Reasons {
		switch strings.ToLower(strings.ReplaceAll(x, "_", "")) {
		case "gpuidle", "applicationsclockssetting", "none", "":
		case "swpowercap", "syncboost":
			if slowed {
				r = append(r, x)
			}
		default:
			r = append(r, x)
		}
	}
	return strings.Join(r, "+")
}

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
				share: float64(self.t.N*late) / float64(self.t.Window), spread: slices.Max(busy) - slices.Min(busy),
				waited: waitedBehind(self.m.Proc, g.ID, j)}
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
func waitedBehind(p *Proc, except string, j *Job) int64 {
	var most int64
	for i := range p.Comms {
		c := &p.Comms[i]
		if c.ID == except || c.Done == nil || c.Done.Timing == nil || c.Done.Timing.N == 0 {
			continue
		}
		var peers []int64
		for _, g := range j.Groups {
			if g.ID != c.ID {
				continue
			}
			for _, m := range g.Members {
				if d := m.Comm.Done; m.Proc != p && d != nil && d.Timing != nil && d.Timing.N > 0 {
					peers = append(peers, d.Timing.Busy)
				}
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
		if 2*m.waited >= m.late {
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

func micros(v int64) string {
	return (time.Duration(v) * time.Microsecond).Round(time.Microsecond).String()
}
