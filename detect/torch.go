package detect

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TorchConfig sets how PyTorch's watchdog lines are read.
type TorchConfig struct {
	// TorchQuoted caps the PyTorch lines quoted in a finding.
	TorchQuoted int `yaml:"-"`
}

// torchRank is what PyTorch's watchdog said about one rank of one process group.
type torchRank struct {
	proc      *Proc
	timedOut  int64 // SeqNum of the work that timed out, -1 when none
	completed int64 // last completed work, -1 when not said
	enqueued  int64
	pg        string
	lines     []string
}

// torchTimeouts is the finding of PyTorch's watchdog lines when no NCCL line shows which
// rank stopped. The ranks that time out only waited; but each says its last completed
// work, and in one process group the ranks whose last completed work is lowest stopped
// first: they are the suspects. When every rank stopped at the same work, the ranks that
// logged nothing are the ones to look at.
func torchTimeouts(j *Job, cfg Config) []Finding {
	groups := map[string]map[int]*torchRank{}
	var timeouts []string
	failed := map[int]string{}    // rank: the watchdog's failure line
	timedOut := map[int]bool{}    // ranks with a timeout line
	signalled := map[int]string{} // ranks another rank's dump signal says timed out
	var first snapshot.Micros     // the first of these lines
	for _, p := range j.Procs {
		if p.Rank < 0 {
			continue
		}
		for _, e := range p.Events {
			if e.Kind != snapshot.EventTorchTimeout && e.Kind != snapshot.EventTorchWorkStatus {
				continue
			}
			g := groups[e.Comm]
			if g == nil {
				g = map[int]*torchRank{}
				groups[e.Comm] = g
			}
			tr := g[p.Rank]
			if tr == nil {
				tr = &torchRank{proc: p, timedOut: -1, completed: -1, enqueued: -1}
				g[p.Rank] = tr
			}
			switch e.Kind {
			case snapshot.EventTorchTimeout:
				timedOut[p.Rank] = true
				if tr.timedOut < 0 {
					tr.timedOut = int64(e.Code)
					timeouts = append(timeouts, fmt.Sprintf("%s timed out at its SeqNum %d: %s", p.Name(), e.Code, e.Msg))
				}
			case snapshot.EventTorchWorkStatus:
				for _, r := range e.Ranks {
					if _, ok := signalled[r]; !ok {
						signalled[r] = fmt.Sprintf("rank %d timed out (%s's dump signal says so; the collective is not named): %s", r, p.Name(), e.Msg)
					}
				}
				if e.Code >= 0 && (tr.completed < 0 || int64(e.Code) < tr.completed) {
					tr.completed, tr.enqueued = int64(e.Code), e.Enqueued
				}
				// The watchdog caught a failed or timed-out work: where the timeout line
				// itself was not kept (2.6+ prints both), this says the same.
				if _, ok := failed[p.Rank]; e.Fatal && !ok {
					failed[p.Rank] = fmt.Sprintf("%s: %s", p.Name(), e.Msg)
				}
			}
			tr.lines = append(tr.lines, e.Msg)
			if e.T != 0 && (first == 0 || e.T < first) {
				first = e.T
			}
		}
	}
	for r, line := range signalled {
		if !timedOut[r] {
			timedOut[r] = true
			timeouts = append(timeouts, line)
		}
	}
	var failures []string
	for r, line := range failed {
		if !timedOut[r] {
			failures = append(failures, line)
		}
	}
	if len(timeouts) == 0 && len(failures) == 0 {
		return nil
	}
	sort.Strings(timeouts)
	sort.Strings(failures)
	timeouts = append(timeouts, failures...)
	quote := max(cfg.TorchQuoted, 1)
	// Suspects: in a process group where ranks report different last completed work, the
	// ranks at the lowest.
	var pgs []string
	for pg := range groups {
		pgs = append(pgs, pg)
	}
	sort.Strings(pgs)
	for _, pg := range pgs {
		g := groups[pg]
		lo, hi := int64(-1), int64(-1)
		for _, tr := range g {
			if tr.completed < 0 {
				continue
			}
			if lo < 0 || tr.completed < lo {
				lo = tr.completed
			}
			hi = max(hi, tr.completed)
		}
		if lo < 0 || lo == hi {
			continue
		}
		var suspects, waiting []*torchRank
		for _, tr := range g {
			if tr.completed == lo {
				suspects = append(suspects, tr)
			} else if tr.completed > lo {
				waiting = append(waiting, tr)
			}
		}
		sort.Slice(suspects, func(a, b int) bool { return suspects[a].proc.Rank < suspects[b].proc.Rank })
		sort.Slice(waiting, func(a, b int) bool { return waiting[a].proc.Rank < waiting[b].proc.Rank })
		f := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{}, witness: true,
			FaultAt: timeOf(first),
			Victims: len(waiting), Key: "torch-suspects:" + pg, Seq: lo + 1}
		for _, s := range suspects {
			f.Culprits = append(f.Culprits, s.proc.Culprit())
			f.culpritKeys = append(f.culpritKeys, s.proc.Key())
		}
		f.Summary = fmt.Sprintf("PyTorch's watchdog lines%s: %s completed work only up to %d while %s got to %d: %s the suspect%s (stopped first; the NCCL lines here do not show why), the others were waiting",
			pgWords(pg), torchRanks(suspects), lo, torchRanks(waiting), hi, map[bool]string{true: "they are", false: "it is"}[len(suspects) > 1],
			map[bool]string{true: "s", false: ""}[len(suspects) > 1])
		for _, s := range append(suspects, waiting...) {
			f.addEvidence("%s: last completed work %d, last enqueued %d", s.proc.Name(), s.completed, s.enqueued)
		}
		for i, t := range timeouts {
			if i >= quote {
				break
			}
			f.addEvidence("%s", t)
		}
		return []Finding{f}
	}
	n := len(timedOut) + len(failures)
	f := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{}, witness: true,
		FaultAt: timeOf(first),
		Victims: n, Key: "torch-timeout"}
	what := "timed out %d rank(s) waiting in a collective; those ranks were only waiting"
	if len(failures) == len(timeouts) {
		what = "caught a failed or timed-out collective on %d rank(s); a rank that times out was only waiting"
	}
	f.Summary = fmt.Sprintf("PyTorch's watchdog "+what+", and the NCCL lines here do not show which rank stopped (%s)",
		n, "run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL and keep every rank's log")
	if silent := silentRanks(j, groups); silent != "" {
		f.Summary += "; " + silent
	}
	if len(signalled) > 0 {
		// The rank that sent the dump signal was the first to time out.
		f.Summary += fmt.Sprintf("; %s timed out first, as another rank's dump signal says", rankList(slices.Sorted(maps.Keys(signalled))))
	}
	for i, t := range timeouts {
		if i >= quote {
			break
		}
		f.addEvidence("%s", t)
	}
	for _, tr := range sortedRanks(groups) {
		if tr.completed >= 0 && len(f.Evidence) < quote+4 {
			f.addEvidence("%s: last completed work %d, last enqueued %d", tr.proc.Name(), tr.completed, tr.enqueued)
		}
	}
	return []Finding{f}
}

// sortedRanks lists the ranks of every process group, by group and rank.
func sortedRanks(groups map[string]map[int]*torchRank) []*torchRank {
	var out []*torchRank
	for pg, g := range groups {
		for _, tr := range g {
			tr.pg = pg
			out = append(out, tr)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].pg != out[b].pg {
			return out[a].pg < out[b].pg
		}
		return out[a].proc.Rank < out[b].proc.Rank
	})
	return out
}

// silentRanks names the ranks below the highest that timed out which logged no timeout:
// when the others all wait at one work, a rank that did not time out never enqueued it.
func silentRanks(j *Job, groups map[string]map[int]*torchRank) string {
	if len(groups) != 1 {
		return ""
	}
	var g map[int]*torchRank
	for _, v := range groups {
		g = v
	}
	top := -1
	for r := range g {
		top = max(top, r)
	}
	end := top
	if w := jobOneHostWorld(j); w > top+1 {
		// The job is one node whose every local rank is known: ranks above the highest
		// that timed out logged none either.
		end = w
	}
	var missing []string
	for r := 0; r < end; r++ {
		if g[r] == nil {
			missing = append(missing, strconv.Itoa(r))
		}
	}
	if len(missing) == 0 || len(missing) > end/2 {
		return ""
	}
	return fmt.Sprintf("rank(s) %s logged no timeout while the others did: if their logs are complete, they never reached that collective", strings.Join(missing, ","))
}

func torchRanks(trs []*torchRank) string {
	ranks := make([]int, len(trs))
	for i, t := range trs {
		ranks[i] = t.proc.Rank
	}
	return rankList(ranks)
}

// rankList names up to eight ranks ("rank 3", "ranks 0,1,2"; "?" for one PyTorch did not number).
func rankList(ranks []int) string {
	var rs []string
	for i, r := range ranks {
		if i == 8 {
			rs = append(rs, fmt.Sprintf("and %d more", len(ranks)-8))
			break
		}
		if r < 0 {
			rs = append(rs, "?")
			continue
		}
		rs = append(rs, strconv.Itoa(r))
	}
	if len(ranks) == 1 {
		return "rank " + rs[0]
	}
	return "ranks " + strings.Join(rs, ",")
}

func pgWords(pg string) string {
	if pg == "" {
		return ""
	}
	return " (process group " + pg + ")"
}

// timeOf is a line's time, zero when it had none.
func timeOf(t snapshot.Micros) time.Time {
	if t == 0 {
		return time.Time{}
	}
	return t.Time()
}
