package fleet

import (
	"fmt"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// A part's evidence per job and how a node incident tells it: whether it qualifies, since
// when, its cause, its culprit and its words.

// qualifies: enough independent evidence. Roots in MinJobs jobs, or RepeatInJob roots in
// one job where the cause does not depend on the job; a node's links must have failed
// with two peers at least (else the peer may be the bad end).
func qualifies(p Part, jobs []JobEvidence, cfg Config) bool {
	if len(jobs) == 0 {
		return false
	}
	if p.Kind == PartLink {
		peers := map[string]bool{}
		for _, j := range jobs {
			for _, pe := range j.Peers {
				peers[pe] = true
			}
		}
		if len(peers) < 2 {
			return false
		}
	}
	if len(jobs) >= cfg.MinJobs {
		return true
	}
	for _, j := range jobs {
		if j.sameJob && j.Roots >= cfg.RepeatInJob {
			return true
		}
	}
	return false
}

func evidenceSince(jobs []JobEvidence, since time.Time) []JobEvidence {
	var out []JobEvidence
	for _, j := range jobs {
		if since.IsZero() || j.Last.After(since) {
			out = append(out, j)
		}
	}
	return out
}

func rootsOf(jobs []JobEvidence) int {
	n := 0
	for _, j := range jobs {
		n += j.Roots
	}
	return n
}

func causeOf(jobs []JobEvidence) incident.Cause {
	counts := map[incident.Cause]int{}
	best := incident.CauseUnknown
	for _, j := range jobs {
		for _, c := range j.Causes {
			counts[c]++
			if counts[c] > counts[best] || (counts[c] == counts[best] && c < best) {
				best = c
			}
		}
	}
	return best
}

func culpritOf(p Part) incident.Culprit {
	c := incident.Culprit{Rank: -1, Host: p.Node}
	switch p.Kind {
	case PartGPU:
		c.GPU = p.ID
	case PartNIC:
		c.Port = p.ID
	}
	return c
}

// describe fills an incident's summary and evidence from the part's evidence per job.
func describe(inc incident.Incident, pv *PartView, jobs []JobEvidence, now time.Time) incident.Incident {
	var lost time.Duration
	for _, j := range jobs {
		lost += j.Lost
	}
	share := ""
	if pv.Expected > 0 {
		share = fmt.Sprintf(", %.0f× its share of the fleet's roots", float64(pv.Roots)/pv.Expected)
	}
	inc.Summary = fmt.Sprintf("%s was the root in %d job(s) (%d incidents, %s of job time lost)%s",
		pv.Part, len(jobs), rootsOf(jobs), lost.Round(time.Second), share)
	inc.Evidence = inc.Evidence[:0:0]
	for i, j := range jobs {
		if i == 8 {
			inc.Evidence = append(inc.Evidence, fmt.Sprintf("... and %d more job(s)", len(jobs)-i))
			break
		}
		line := fmt.Sprintf("job %s: %d root(s), %s lost, %s to %s, incidents %s", j.Job, j.Roots, j.Lost.Round(time.Second),
			j.First.UTC().Format(time.RFC3339), j.Last.UTC().Format(time.RFC3339), strings.Join(j.Incidents, ", "))
		if len(j.Causes) > 0 {
			cs := make([]string, len(j.Causes))
			for k, c := range j.Causes {
				cs[k] = string(c)
			}
			line += " (" + strings.Join(cs, ", ") + ")"
		}
		if len(j.Peers) > 0 {
			line += "; peers " + strings.Join(j.Peers, ", ")
		}
		inc.Evidence = append(inc.Evidence, line)
	}
	inc.LastSeen = now
	inc.Victims = len(jobs)
	return inc
}

func shortHash(s string) string {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return fmt.Sprintf("%08x", h)
}
