package detect

import (
	"fmt"
	"sort"
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
	// CPUStarvedPct: a rank whose threads wait this much of a core for a CPU (and three
	// times the job's median) is starved of CPU by its host (cpustarve.go); 0 turns it off.
	CPUStarvedPct float64 `yaml:"cpu_starved_pct"`
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
	starved := findStarved(j, sc)
	slowPairs := map[string]time.Time{}
	for _, l := range links {
		if f, ok := l.starvedHost(j, starved); ok {
			out = append(out, f)
			continue
		}
		f := l.finding(j)
		if l.endpoint == nil && !j.Offline {
			since, ok := led.pairSince[f.Key]
			if !ok {
				since = j.Now
			}
			slowPairs[f.Key] = since
			if led.pairsSeen && j.Now.Sub(since) < pairHold {
				continue
			}
		}
		out = append(out, f)
	}
	led.pairSince, led.pairsSeen = slowPairs, true
	if timing == TimingOK {
		if f, ok := led.unattributed(j, sc, groups, out, starved); ok {
			out = append(out, f)
		}
	}
	return out
}

// pairHold is how long a slow pair stays slow, live, before it is named: a NIC shows as
// several slow pairs within a second or two of its first, and is named as the NIC, not
// first as the pair of it seen first (whose far end is only its peer).
const pairHold = 3 * time.Second

// unattributedQuiet is how long after a named root no unattributed slowdown is said.
const unattributedQuiet = 30 * time.Second

// unattributed finds the job slower than its own baseline with no root booked for most of
// it: every rank arrives on time and waits in its collectives (a slow link seen only from
// logs, a GPU slower than its peers while the hosts wait for it). The root is then the one
// member whose own evidence shows a cause (its GPU shared, throttled or faulted); else the
// finding says what is known and how to see more.
func (l *Ledger) unattributed(j *Job, sc SlowdownConfig, groups map[string]*Group, named []Finding, starved cpuStarved) (Finding, bool) {
	var best struct {
		g         *Group
		share     float64
		now, base int64
		since     snapshot.Micros
		late      bool // late arrivals are most of it
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
		if g == nil || share < sc.SlowdownShare || share <= best.share {
			continue
		}
		late := gl.lateShare(since, sc) >= share/2
		if late && !starved.inGroup(g) {
			continue // late arrivals are most of it: the accounting names them
		}
		best.g, best.share, best.now, best.base, best.since, best.late = g, share, now, base, since, late
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
		if c, w := slowCause(j, m.Proc, e, nil); !best.late && (c == incident.CauseGPUBusy || c == incident.CauseGPUThrottled || c == incident.CauseGPUFault) {
			suspects = append(suspects, m.Proc)
			why = append(why, w)
			f.Cause = c
		} else if s, ok := starved[m.Proc]; ok {
			suspects = append(suspects, m.Proc)
			why = append(why, s.words())
			f.Cause = incident.CauseHostSlow
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
		// One rank is one incident, whatever view names it (its lateness, its starved
		// links, the job's slowdown): its key.
		f.Culprits, f.culpritKeys, f.Victims = []incident.Culprit{p.Culprit()}, []string{p.Key()}, len(g.Members)-1
		f.Key = "rank:" + p.Key()
		how := "no rank arrives late, so every rank waits on the GPUs"
		if best.late { // lateness that stands out in no single rank: the starved rank's
			how = "the ranks arrive late at their collectives"
		}
		f.Summary = fmt.Sprintf("%s slows the job: %s; %s, and %s: %s", p.Name(), what, how, p.Name(), why[0])
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

func micros(v int64) string {
	return (time.Duration(v) * time.Microsecond).Round(time.Microsecond).String()
}
