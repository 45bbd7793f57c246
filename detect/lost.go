package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// LostConfig tells a lost node from a monitoring failure. Its fields are no YAML keys (the
// detector's keys are documented and checked against docs/configuration.md); code sets them.
type LostConfig struct {
	// MassLossNodes and MassLossFraction: at least this many nodes, and this fraction of a
	// job's nodes, losing their lease within MassLossWindow is a monitoring failure (etcd, a
	// network partition, the sidecars), not that many lost nodes.
	MassLossNodes    int           `yaml:"-"`
	MassLossFraction float64       `yaml:"-"`
	MassLossWindow   time.Duration `yaml:"-"`
}

// RecentLosses keeps the lease losses that fall inside MassLossWindow before now; the live
// detector uses it too, to forget older ones.
func (c LostConfig) RecentLosses(losses []time.Time, now time.Time) []time.Time {
	var out []time.Time
	for _, t := range losses {
		if now.Sub(t) <= c.MassLossWindow {
			out = append(out, t)
		}
	}
	return out
}

// LostNodes finds the nodes whose watchdog lease expired (j.Lost): one lost_node finding
// each, unless many went at once (j.LeaseLosses inside the window), which is one monitoring
// finding: a partition that cuts a rack off is one fault, and a page per node would bury it.
func LostNodes(j *Job, cfg Config) []Finding {
	if len(j.Lost) == 0 {
		return nil
	}
	recent := cfg.RecentLosses(j.LeaseLosses, j.Now)
	total := len(j.Lost) + len(j.Nodes)
	if len(recent) >= cfg.MassLossNodes && float64(len(recent)) >= cfg.MassLossFraction*float64(total) {
		f := Finding{Kind: incident.KindMonitoring, Severity: incident.SeverityWarning, Key: "monitoring:mass-loss:" + j.Name,
			Culprits: []incident.Culprit{}}
		f.Summary = fmt.Sprintf("%d of %d nodes of job %s lost their watchdog lease within %s: a monitoring failure (etcd, network partition or sidecars), not %d node faults",
			len(recent), total, j.Name, cfg.MassLossWindow, len(recent))
		for _, n := range j.Lost {
			f.Evidence = append(f.Evidence, "node "+n.Node+" stopped reporting")
			if len(f.Evidence) >= 20 {
				break
			}
		}
		return []Finding{f}
	}
	var out []Finding
	for _, n := range j.Lost {
		f := Finding{Kind: incident.KindLostNode, Severity: incident.SeverityCritical, Key: "node:" + n.Node}
		var ranks []string
		for _, p := range n.Processes {
			f.Culprits = append(f.Culprits, incident.Culprit{Rank: p.Rank, Host: p.Host, PID: p.PID})
			ranks = append(ranks, fmt.Sprint(p.Rank))
		}
		if len(f.Culprits) == 0 {
			f.Culprits = []incident.Culprit{{Rank: -1, Host: n.Node}}
		}
		f.Summary = fmt.Sprintf("node %s stopped reporting: its watchdog lease expired (node down, sidecar killed or network cut); ranks %s are gone with it",
			n.Node, strings.Join(ranks, ","))
		f.Evidence = append(f.Evidence, fmt.Sprintf("last snapshot at %s", n.Time.Time().UTC().Format(time.RFC3339)))
		f.FaultAt = n.Time.Time()
		out = append(out, f)
	}
	return out
}
