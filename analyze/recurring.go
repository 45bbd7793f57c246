package analyze

import (
	"slices"
	"sort"
	"strconv"

	"github.com/ncclwatch/watchdog/detect/fleet"
	"github.com/ncclwatch/watchdog/incident"
)

// Run is one job's analysis among several (watchdog analyze --runs).
type Run struct {
	Name   string  `json:"name"` // the folder or file it was read from
	Report *Report `json:"report"`
}

// RecurringPart is a node part (host, GPU by bus id, NIC port, a node's links) that was a
// root in more than one run: the cross-job view of detect/fleet, offline.
type RecurringPart struct {
	Part     fleet.Part       `json:"part"`
	Name     string           `json:"name"`
	Runs     []string         `json:"runs"`
	Findings int              `json:"findings"`
	Causes   []incident.Cause `json:"causes,omitempty"`
}

// Recurring names the parts that were roots in more than one run, most runs first. A
// finding blames parts as the live fleet ledger books them (fleet.PartsOf): causes that
// are the job's own (a mismatch, the application, rank 0's slowness) blame none; a GPU is
// named by the bus id its rank's log gave.
func Recurring(runs []Run) []RecurringPart {
	byKey := map[string]*RecurringPart{}
	for _, r := range runs {
		if r.Report == nil {
			continue
		}
		gpus := map[string]string{}
		for _, k := range r.Report.Ranks {
			if k.BusID != "" {
				gpus[k.Host+":"+strconv.Itoa(k.PID)] = k.BusID
			}
		}
		for _, f := range r.Report.Findings {
			inc := incident.Incident{Kind: f.Kind, Cause: f.Cause, Culprits: f.Culprits}
			parts, _ := fleet.PartsOf(&inc, fleet.Places{GPUs: gpus})
			for _, p := range parts {
				if p.Kind == fleet.PartLink {
					p = fleet.Part{Kind: fleet.PartLink, Node: p.Node} // a node's links, whichever peer
				}
				rp := byKey[p.Key()]
				if rp == nil {
					rp = &RecurringPart{Part: p, Name: p.String()}
					byKey[p.Key()] = rp
				}
				rp.Findings++
				if !slices.Contains(rp.Runs, r.Name) {
					rp.Runs = append(rp.Runs, r.Name)
				}
				if f.Cause != "" && !slices.Contains(rp.Causes, f.Cause) {
					rp.Causes = append(rp.Causes, f.Cause)
				}
			}
		}
	}
	out := []RecurringPart{}
	for _, rp := range byKey {
		if len(rp.Runs) > 1 {
			out = append(out, *rp)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if len(out[a].Runs) != len(out[b].Runs) {
			return len(out[a].Runs) > len(out[b].Runs)
		}
		return out[a].Part.Key() < out[b].Part.Key()
	})
	return out
}
