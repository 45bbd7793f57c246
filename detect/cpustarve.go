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

// starvation says how starved of CPU a running process is: its run-queue wait and the
// median of the job's other running ranks (percent of one core); ok when it is at least
// cpu_starved_pct and three times that median.
func starvation(j *Job, sc SlowdownConfig, p *Proc) (pct, others float64, ok bool) {
	if sc.CPUStarvedPct <= 0 || p.RunqPct < sc.CPUStarvedPct || p.Stat == "" {
		return 0, 0, false
	}
	var rest []float64
	for _, q := range j.Procs {
		if q != p && q.Stat != "" {
			rest = append(rest, q.RunqPct)
		}
	}
	if len(rest) > 0 {
		sort.Float64s(rest)
		others = rest[len(rest)/2]
	}
	return p.RunqPct, others, p.RunqPct >= 3*others
}

// starvedMember says whether a member of a communicator is starved of CPU.
func starvedMember(j *Job, sc SlowdownConfig, g *Group) bool {
	for _, m := range g.Members {
		if _, _, ok := starvation(j, sc, m.Proc); ok {
			return true
		}
	}
	return false
}

// starvedWords says a process's starvation in evidence words.
func starvedWords(pct, others float64) string {
	return fmt.Sprintf("its threads waited %.0f%% of a core for a CPU (the job's other ranks %.0f%%): its host starves it of CPU (other processes on its cores, a CPU limit)", pct, others)
}

// starvedEnd is the one end of a slow link root that is starved of CPU, nil when none or
// both: the link is then its host's, not its network's.
func (r linkRoot) starvedEnd(j *Job, sc SlowdownConfig) *Proc {
	ends := []*Proc{r.endpoint}
	if r.endpoint == nil {
		ends = []*Proc{r.links[0].from, r.links[0].to}
	}
	var found *Proc
	for _, p := range ends {
		if p == nil {
			continue
		}
		if _, _, ok := starvation(j, sc, p); ok {
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
func (r linkRoot) starvedHost(j *Job, sc SlowdownConfig) (Finding, bool) {
	p := r.starvedEnd(j, sc)
	if p == nil {
		return Finding{}, false
	}
	link := r.finding(j)
	pct, others, _ := starvation(j, sc, p)
	f := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Comm: link.Comm, measured: true,
		Cause: incident.CauseHostSlow, Key: "rank:" + p.Key(), Culprits: []incident.Culprit{p.Culprit()},
		culpritKeys: []string{p.Key()}, Episode: link.Episode}
	f.Summary = fmt.Sprintf("%s is starved of CPU and slows the job: %s; its network proxy runs late, so its transfers look slow (%s)",
		p.Name(), starvedWords(pct, others), link.Summary)
	f.Evidence = link.Evidence
	processEvidence(j, p, &f)
	return f, true
}
