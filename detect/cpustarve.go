package detect

import (
	"fmt"
	"sort"

	"github.com/ncclwatch/watchdog/incident"
)

// CPU starvation as a slowdown's cause, from /proc: a rank whose threads wait on a run queue
// for a CPU (other processes on its cores, a CPU limit) issues late and runs its network
// proxy late, so its sends and receives look like a slow link. The run-queue wait says which
// end of a slow link is starved, where the plugin's timings alone cannot.

// starvedBy is a starved rank's run-queue wait and the median of the job's other running
// ranks' (percent of one core).
type starvedBy struct{ pct, others float64 }

// cpuStarved are the job's ranks starved of CPU, found once per evaluation: a running rank
// whose wait is at least cpu_starved_pct and three times the others' median.
type cpuStarved map[*Proc]starvedBy

func findStarved(j *Job, sc SlowdownConfig) cpuStarved {
	var runq []float64
	for _, p := range j.Procs {
		if p.Stat != "" {
			runq = append(runq, p.RunqPct)
		}
	}
	sort.Float64s(runq)
	out := cpuStarved{}
	for _, p := range j.Procs {
		if p.Stat == "" || sc.CPUStarvedPct <= 0 || p.RunqPct < sc.CPUStarvedPct {
			continue
		}
		if others := medianWithout(runq, p.RunqPct); p.RunqPct >= 3*others {
			out[p] = starvedBy{p.RunqPct, others}
		}
	}
	return out
}

// medianWithout is the upper median of sorted values less one occurrence of v (one of them):
// a rank's wait against the others'.
func medianWithout(sorted []float64, v float64) float64 {
	n := len(sorted)
	if n <= 1 {
		return 0
	}
	k := (n - 1) / 2
	if k < sort.SearchFloat64s(sorted, v) {
		return sorted[k]
	}
	return sorted[k+1]
}

// inGroup says whether a member of a communicator is starved of CPU.
func (s cpuStarved) inGroup(g *Group) bool {
	for _, m := range g.Members {
		if _, ok := s[m.Proc]; ok {
			return true
		}
	}
	return false
}

// words says a process's starvation in evidence words.
func (s starvedBy) words() string {
	return fmt.Sprintf("its threads waited %.0f%% of a core for a CPU (the job's other ranks %.0f%%): its host starves it of CPU (other processes on its cores, a CPU limit)", s.pct, s.others)
}

// starvedEnd is the one end of a slow link root that is starved of CPU, nil when none or
// both: the link is then its host's, not its network's.
func (r linkRoot) starvedEnd(starved cpuStarved) *Proc {
	ends := []*Proc{r.endpoint}
	if r.endpoint == nil {
		ends = []*Proc{r.links[0].from, r.links[0].to}
	}
	var found *Proc
	for _, p := range ends {
		if _, ok := starved[p]; ok && p != nil {
			if found != nil {
				return nil
			}
			found = p
		}
	}
	return found
}

// starvedHost turns a slow link root whose one starved end explains it into that rank's
// finding: its host is slow, and the link's measurements are its evidence.
func (r linkRoot) starvedHost(j *Job, starved cpuStarved) (Finding, bool) {
	p := r.starvedEnd(starved)
	if p == nil {
		return Finding{}, false
	}
	link := r.finding(j)
	f := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Comm: link.Comm, measured: true,
		Cause: incident.CauseHostSlow, Key: "rank:" + p.Key(), Culprits: []incident.Culprit{p.Culprit()},
		culpritKeys: []string{p.Key()}, Episode: link.Episode}
	f.Summary = fmt.Sprintf("%s is starved of CPU and slows the job: %s; its network proxy runs late, so its transfers look slow (%s)",
		p.Name(), starved[p].words(), link.Summary)
	f.Evidence = link.Evidence
	processEvidence(j, p, &f)
	return f, true
}
