package detect

import (
	"fmt"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// StragglerConfig: a rank is a straggler when its median arrival lag over the last
// StragglerWindow positions (at least StragglerMinSamples of them) exceeds
// max(StragglerMinLag, StragglerFraction × step period), and so does its median over the
// last StragglerMinSamples positions: the lag still holds now, it is not the tail of one
// that ended. The fraction keeps slow steps from making normal jitter look like lag; the
// floor keeps fast steps from paging on noise.
//
// The first StragglerWarmupSteps steps of each communicator are not judged. Their arrival
// times measure the job's start, not a rank's speed: ranks reach their first collectives
// after different start-up work (imports, data loader workers, compilation and autotuning,
// NCCL's lazy connection setup, DDP rebuilding its buckets after the first iteration), and
// one that started late issues the whole first step late before a synchronisation at the
// step's end levels it. Three steps cover the op before the training loop and the first
// two steps (the skew the GPU harness's dry run replays, issue 16 item 7) with one step of
// margin; a real straggler lags at every step, so it is found three step periods later.
type StragglerConfig struct {
	StragglerMinLag      time.Duration `yaml:"straggler_min_lag"`
	StragglerFraction    float64       `yaml:"straggler_fraction"`
	StragglerWindow      int           `yaml:"straggler_window"`
	StragglerMinSamples  int           `yaml:"straggler_min_samples"`
	StragglerWarmupSteps int           `yaml:"straggler_warmup_steps"`
}

// warmup is the last position of a communicator's warm-up: StragglerWarmupSteps steps of
// the op pattern its most advanced member repeats. Where no pattern shows among that
// member's n recent ops, a step is longer than the n/3 positions Period looks for, so the
// warm-up is taken at that lower bound.
func (c StragglerConfig) warmup(g *Group) int64 {
	var leader *snapshot.Comm
	for _, m := range g.Members {
		if leader == nil || m.Comm.Count > leader.Count {
			leader = m.Comm
		}
	}
	if leader == nil || c.StragglerWarmupSteps <= 0 {
		return 0
	}
	step := Period(leader, leader.Count+1)
	if step == 0 {
		step = int64(len(leader.Recent)/3 + 1)
	}
	return int64(c.StragglerWarmupSteps) * step
}

// pluginOnly: every member's ops come from the profiler plugin alone (no log). The plugin
// times each rank's collectives on its GPU, which MeasuredStragglers judges; arrival lag
// inferred from issue times would be a second, weaker verdict on the same question.
func pluginOnly(g *Group) bool {
	for _, m := range g.Members {
		if m.Proc.Source != snapshot.SourcePlugin {
			return false
		}
	}
	return true
}

// afterWarmup drops the samples at positions up to last.
func afterWarmup(s []lagSample, last int64) []lagSample {
	i := sort.Search(len(s), func(i int) bool { return s[i].seq > last })
	return s[i:]
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

type lagSample struct {
	seq int64
	lag int64 // µs behind the first rank to arrive
}

// Straggler measures, per communicator and position, each rank's arrival lag behind the
// first rank; a rank whose median lag after the warm-up, over the window and over the most
// recent positions, exceeds max(StragglerMinLag, StragglerFraction × step period) is a
// straggler, with the position where it began (warm-up included: a rank slow from the
// start is slow since position 1).
func Straggler(j *Job, cfg Config, timing Timing) []Finding {
	if timing != TimingOK {
		return nil
	}
	type verdict struct {
		proc      *Proc
		group     *Group
		median    int64
		threshold int64
		onset     lagSample
		samples   int
		period    time.Duration
	}
	// Per communicator in parallel, then per process: the communicator where it lags most.
	perGroup := make([][]*verdict, len(j.Groups))
	j.eachGroup(func(gi int, g *Group) {
		if len(g.Members) < 2 || pluginOnly(g) {
			return
		}
		series, firstArrival := lagSeries(g)
		warm, need := cfg.warmup(g), max(cfg.StragglerMinSamples, 1)
		if len(afterWarmup(series[0], warm)) < need {
			return
		}
		period := stepPeriod(g, firstArrival)
		threshold := max(cfg.StragglerMinLag.Microseconds(), int64(cfg.StragglerFraction*float64(period.Microseconds())))
		for i, m := range g.Members {
			s := afterWarmup(series[i], warm)
			if len(s) > cfg.StragglerWindow && cfg.StragglerWindow > 0 {
				s = s[len(s)-cfg.StragglerWindow:]
			}
			if med := medianLag(s); med > threshold && medianLag(s[len(s)-need:]) > threshold {
				perGroup[gi] = append(perGroup[gi], &verdict{proc: m.Proc, group: g, median: med, threshold: threshold,
					onset: onset(series[i], threshold), samples: len(s), period: period})
			}
		}
	})
	best := map[string]*verdict{}
	var order []string
	for _, vs := range perGroup {
		for _, v := range vs {
			k := v.proc.Key()
			if have := best[k]; have == nil {
				order = append(order, k)
			} else if have.median >= v.median {
				continue
			}
			best[k] = v
		}
	}
	var out []Finding
	for _, k := range order {
		v := best[k]
		p := v.proc
		f := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Comm: v.group.ID,
			Seq: v.onset.seq, Culprits: []incident.Culprit{p.Culprit()}, culpritKeys: []string{k},
			LagSeconds: float64(v.median) / 1e6, Key: "straggler:" + k, Victims: len(v.group.Members) - 1}
		f.Summary = fmt.Sprintf("%s is a straggler: it arrives %s late at the collectives of communicator %s (median over %d positions), since position %d",
			p.Name(), time.Duration(v.median)*time.Microsecond, shortComm(v.group.ID), v.samples, v.onset.seq)
		f.addEvidence("median arrival lag %s behind the first rank, threshold %s", time.Duration(v.median)*time.Microsecond, time.Duration(v.threshold)*time.Microsecond)
		if v.period > 0 {
			f.addEvidence("step period %s", v.period.Round(time.Millisecond))
		}
		if o := opAt(memberOf(v.group, p).Comm, v.onset.seq); o != nil && o.T != 0 {
			f.FaultAt = o.T.Time()
			f.addEvidence("onset at position %d (%s), lag %s", v.onset.seq, fmtTime(o.T.Time()), time.Duration(v.onset.lag)*time.Microsecond)
		}
		if g := gpuOf(j, p); g != nil {
			f.addEvidence("its GPU %d: %s", g.Index, describeGPU(g))
			for _, x := range g.XIDs {
				f.addEvidence("XID %d on its GPU at %s", x.Code, fmtTime(x.T.Time()))
			}
		}
		out = append(out, f)
	}
	return out
}

func memberOf(g *Group, p *Proc) Member {
	for _, m := range g.Members {
		if m.Proc == p {
			return m
		}
	}
	return Member{}
}

// lagSeries returns, per member, lags at the positions every member has a time for, and
// the first arrival time per such position. Members' ops and marks are sorted by position:
// the common positions are an intersection of sorted lists, then each member's lags are
// read off its own list, members in parallel (a large job's one world communicator has
// hundreds).
func lagSeries(g *Group) ([][]lagSample, map[int64]int64) {
	n := len(g.Members)
	lines := make([][]lagSample, n) // per member: (seq, arrival time)
	parallel(n, 16, func(i int) { lines[i] = timeline(g.Members[i].Comm) })
	// Positions every member has a time for.
	var common []int64
	if n > 0 {
		for _, x := range lines[0] {
			common = append(common, x.seq)
		}
	}
	for _, l := range lines[1:] {
		kept, k := common[:0], 0
		for _, seq := range common {
			for k < len(l) && l[k].seq < seq {
				k++
			}
			if k < len(l) && l[k].seq == seq {
				kept = append(kept, seq)
			}
		}
		common = kept
	}
	// Each member's arrival times at the common positions, then the first per position.
	times := make([][]int64, n)
	parallel(n, 16, func(i int) {
		t := make([]int64, len(common))
		l, k := lines[i], 0
		for c, seq := range common {
			for l[k].seq < seq {
				k++
			}
			t[c] = l[k].lag
		}
		times[i] = t
	})
	firstAt := make([]int64, len(common))
	for c := range common {
		lo := int64(1 << 62)
		for i := range times {
			lo = min(lo, times[i][c])
		}
		firstAt[c] = lo
	}
	series := make([][]lagSample, n)
	parallel(n, 16, func(i int) {
		s := make([]lagSample, len(common))
		for c, seq := range common {
			s[c] = lagSample{seq: seq, lag: times[i][c] - firstAt[c]}
		}
		series[i] = s
	})
	first := make(map[int64]int64, len(common))
	for c, seq := range common {
		first[seq] = firstAt[c]
	}
	return series, first
}

// timeline merges a member's timed ops and marks into (position, time) sorted by position;
// lagSample.lag holds the absolute time here.
func timeline(c *snapshot.Comm) []lagSample {
	out := make([]lagSample, 0, len(c.Recent)+len(c.Marks))
	r, m := c.Recent, c.Marks
	for len(r) > 0 || len(m) > 0 {
		switch {
		case len(m) == 0 || (len(r) > 0 && r[0].Seq <= m[0].Seq):
			if len(m) > 0 && m[0].Seq == r[0].Seq {
				m = m[1:]
			}
			if r[0].T != 0 && (len(out) == 0 || out[len(out)-1].seq < r[0].Seq) {
				out = append(out, lagSample{seq: r[0].Seq, lag: int64(r[0].T)})
			}
			r = r[1:]
		default:
			if m[0].T != 0 && (len(out) == 0 || out[len(out)-1].seq < m[0].Seq) {
				out = append(out, lagSample{seq: m[0].Seq, lag: int64(m[0].T)})
			}
			m = m[1:]
		}
	}
	return out
}

// stepPeriod estimates the training step time from the repeating op pattern.
func stepPeriod(g *Group, first map[int64]int64) time.Duration {
	var leader *snapshot.Comm
	for _, m := range g.Members {
		if leader == nil || m.Comm.Count > leader.Count {
			leader = m.Comm
		}
	}
	p := Period(leader, leader.Count+1)
	if p == 0 {
		return 0
	}
	var d []int64
	for s, t := range first {
		if t0, ok := first[s-p]; ok && t > t0 {
			d = append(d, t-t0)
		}
	}
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
	return time.Duration(d[len(d)/2]) * time.Microsecond
}

func medianLag(s []lagSample) int64 {
	v := make([]int64, len(s))
	for i, x := range s {
		v[i] = x.lag
	}
	sort.Slice(v, func(a, b int) bool { return v[a] < v[b] })
	return v[len(v)/2]
}

// onset is the first position from which at least 80% of the lags exceed the threshold.
func onset(s []lagSample, threshold int64) lagSample {
	above := 0
	for _, x := range s {
		if x.lag > threshold {
			above++
		}
	}
	// Walk forward; suffix counts shrink as we pass samples.
	suffixAbove, suffixLen := above, len(s)
	for _, x := range s {
		if x.lag > threshold && suffixAbove*5 >= suffixLen*4 {
			return x
		}
		if x.lag > threshold {
			suffixAbove--
		}
		suffixLen--
	}
	if len(s) > 0 {
		return s[len(s)-1]
	}
	return lagSample{}
}
