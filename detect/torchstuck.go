package detect

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// stuckRank is what PyTorch's heartbeat monitor said about one rank.
type stuckRank struct {
	proc   *Proc
	queued int // workMetaList_.size(): works enqueued and not yet completed; -1 unknown
	line   string
}

// torchStuck is the finding of PyTorch's heartbeat monitor ("Heartbeat monitor timed out!",
// "watchdog got stuck for N seconds"): ProcessGroupNCCL's watchdog thread made no progress,
// which it does when a CUDA or NCCL call it makes never returns, so the job hung. Each rank
// also says how many works it still had queued: a rank with clearly fewer than all its peers
// stopped enqueuing collectives first, and is the suspect; the lines cannot prove why.
func torchStuck(j *Job, cfg Config) []Finding {
	groups := map[string][]*stuckRank{}
	var all []*stuckRank
	for _, p := range j.Procs {
		var sr *stuckRank
		for _, e := range p.Events {
			if e.Kind != snapshot.EventTorchStuck {
				continue
			}
			if sr == nil {
				sr = &stuckRank{proc: p, queued: -1, line: e.Msg}
				all = append(all, sr)
				if p.Rank >= 0 {
					groups[e.Comm] = append(groups[e.Comm], sr)
				}
			}
			sr.queued = max(sr.queued, e.Code)
		}
	}
	if len(all) == 0 {
		return nil
	}
	sort.Slice(all, func(a, b int) bool { return all[a].proc.Rank < all[b].proc.Rank })
	f := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{},
		Victims: len(all), Key: "torch-stuck"}
	f.Summary = fmt.Sprintf("PyTorch's heartbeat monitor found the NCCL watchdog thread stuck on %s: the job hung, the watchdog blocked in a call that never returned (usually a CUDA or NCCL call behind a collective that never completes)",
		stuckNames(all))
	suspects, lo, others := fewestQueued(groups)
	if len(suspects) > 0 {
		for _, s := range suspects {
			f.Culprits = append(f.Culprits, s.proc.Culprit())
			f.culpritKeys = append(f.culpritKeys, s.proc.Key())
		}
		f.Victims = len(all) - len(suspects)
		f.Summary += fmt.Sprintf("; %s had %d queued work(s) while the others had %s: %s stopped enqueuing collectives first and %s the suspect (why, these lines do not show: its own code, data loading, or a call that hung)",
			stuckNames(suspects), lo, others, map[bool]string{true: "they", false: "it"}[len(suspects) > 1],
			map[bool]string{true: "are", false: "is"}[len(suspects) > 1])
	} else {
		f.Summary += "; these lines do not show which rank stopped first (set TORCH_NCCL_TRACE_BUFFER_SIZE for PyTorch's flight recorder, and NCCL_DEBUG=INFO)"
	}
	quote := max(cfg.TorchQuoted, 1)
	for i, s := range all {
		if i >= quote {
			break
		}
		if s.queued >= 0 {
			f.addEvidence("%s: %d queued work(s) (workMetaList_.size()): %s", s.proc.Name(), s.queued, s.line)
		} else {
			f.addEvidence("%s: %s", s.proc.Name(), s.line)
		}
	}
	return []Finding{f}
}

// fewestQueued finds, in the process group where the ranks' queues differ, the ranks with
// clearly fewer queued works than every other: at least two fewer and a tenth fewer than the
// next, and fewer ranks than the rest. others says what the rest had.
func fewestQueued(groups map[string][]*stuckRank) (suspects []*stuckRank, lo int, others string) {
	var pgs []string
	for pg := range groups {
		pgs = append(pgs, pg)
	}
	sort.Strings(pgs)
	for _, pg := range pgs {
		var known []*stuckRank
		for _, s := range groups[pg] {
			if s.queued >= 0 {
				known = append(known, s)
			}
		}
		sort.Slice(known, func(a, b int) bool {
			if known[a].queued != known[b].queued {
				return known[a].queued < known[b].queued
			}
			return known[a].proc.Rank < known[b].proc.Rank
		})
		if len(known) < 2 {
			continue
		}
		lo = known[0].queued
		n := 1
		for n < len(known) && known[n].queued == lo {
			n++
		}
		if n == len(known) || 2*n >= len(known) {
			continue
		}
		next, hi := known[n].queued, known[len(known)-1].queued
		if next-lo < 2 || lo*10 > next*9 {
			continue
		}
		others = strconv.Itoa(next)
		if hi != next {
			others += "-" + strconv.Itoa(hi)
		}
		return known[:n], lo, others
	}
	return nil, 0, ""
}

func stuckNames(ss []*stuckRank) string {
	ranks := make([]int, len(ss))
	for i, s := range ss {
		ranks[i] = s.proc.Rank
	}
	return rankList(ranks)
}
