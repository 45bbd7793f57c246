package detect

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
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
		if f, ok := lostNode(j, cfg, n); ok {
			out = append(out, f)
		}
	}
	return out
}

// lostProofOps is how far past a silent node's last reported position its ranks' peers on
// other nodes must have issued, after that report, to prove those ranks alive: a collective
// needs every rank, and a peer may run ahead of a dead one by an op or two, not by this many.
const lostProofOps = 4

// lostNode judges one node whose lease expired. A silent sidecar is not a dead node: the
// node's ranks are gone only with proof, either their peers on other nodes stopped too (a
// shared communicator still for its hang window) or a second source says so (NCCL RAS
// on another node calls them dead, or the node's last report shows them exited). Peers that
// keep completing collectives prove the ranks alive: then only the watchdog is blind there,
// a monitoring warning. Without either proof yet, nothing is said (the peers' hang window
// decides soon); with no peer to ask and no second source, a warning says what cannot be
// judged.
func lostNode(j *Job, cfg Config, n *snapshot.Node) (Finding, bool) {
	var ranks []string
	var culprits []incident.Culprit
	for _, p := range n.Processes {
		culprits = append(culprits, incident.Culprit{Rank: p.Rank, Host: p.Host, PID: p.PID})
		ranks = append(ranks, fmt.Sprint(p.Rank))
	}
	if len(culprits) == 0 {
		culprits = []incident.Culprit{{Rank: -1, Host: n.Node}}
	}
	last := n.Time.Time().UTC().Format(time.RFC3339)
	lost := func(why string) (Finding, bool) {
		f := Finding{Kind: incident.KindLostNode, Severity: incident.SeverityCritical, Key: "node:" + n.Node, Culprits: culprits,
			FaultAt: n.Time.Time()}
		f.Summary = fmt.Sprintf("node %s stopped reporting and its ranks %s are gone with it: %s", n.Node, strings.Join(ranks, ","), why)
		f.Evidence = []string{fmt.Sprintf("last snapshot at %s", last), why}
		return f, true
	}
	blind := func(summary string, evidence ...string) (Finding, bool) {
		f := Finding{Kind: incident.KindMonitoring, Severity: incident.MonitoringSeverity, Key: "monitoring:sidecar-silent:" + j.Name + ":" + n.Node,
			Culprits: []incident.Culprit{{Rank: -1, Host: n.Node}}, FaultAt: n.Time.Time(), Summary: summary}
		f.Evidence = append([]string{fmt.Sprintf("last snapshot at %s; its lease expired", last)}, evidence...)
		return f, true
	}
	if why := secondSource(j, n); why != "" {
		return lost(why)
	}
	shared, stopped := false, ""
	for _, p := range n.Processes {
		for _, c := range p.Comms {
			if c.ID == "" || c.Rank < 0 {
				continue
			}
			g := j.group(c.ID)
			if g == nil || len(g.Members) == 0 {
				continue
			}
			shared = true
			if why := peersProgress(g, c, n); why != "" {
				return blind(fmt.Sprintf("node %s's sidecar is silent; its ranks keep completing collectives (%s): the watchdog is blind on that node, the job is not hurt",
					n.Node, why), why)
			}
			if ok, still := stalled(j, g, cfg.HangConfig); ok && stopped == "" {
				stopped = fmt.Sprintf("their peers on communicator %s have not moved for %s either", c.ID, still.Round(time.Second))
			}
		}
	}
	switch {
	case stopped != "":
		return lost(stopped)
	case shared:
		return Finding{}, false // the peers' hang window decides
	}
	return blind(fmt.Sprintf("node %s's sidecar stopped reporting; whether its ranks %s live cannot be judged: no rank on another node shares a communicator with them and no second source says they are gone",
		n.Node, strings.Join(ranks, ",")))
}

// group returns the live communicator with this id, nil when none.
func (j *Job) group(id string) *Group {
	for _, g := range j.Groups {
		if g.ID == id {
			return g
		}
	}
	return nil
}

// peersProgress says how live members of g show that the lost node's member c took part in
// collectives after n's last report ("" when they do not): completions past its position
// (the profiler plugin), or issues well past it made after the report.
func peersProgress(g *Group, c snapshot.Comm, n *snapshot.Node) string {
	for _, m := range g.Members {
		if m.Proc.Node == n.Node {
			continue
		}
		if d := m.Comm.Done; d != nil && d.Done > c.Count {
			return fmt.Sprintf("rank %d completed collective #%d on communicator %s, past #%d where the silent node's rank %d was last seen",
				m.Proc.Rank, d.Done, g.ID, c.Count, c.Rank)
		}
		if m.Comm.Count >= c.Count+lostProofOps && m.Comm.Last != nil && m.Comm.Last.T > n.Time {
			return fmt.Sprintf("rank %d issued collective #%d on communicator %s after the node's last report, %d past where its rank %d was",
				m.Proc.Rank, m.Comm.Count, g.ID, m.Comm.Count-c.Count, c.Rank)
		}
	}
	return ""
}

// secondSource says why, besides the silence, the lost node's ranks are gone: NCCL RAS on
// another node considers one of them dead, or the node's last report shows them all exited
// ("" when nothing says so).
func secondSource(j *Job, n *snapshot.Node) string {
	exited := len(n.Processes) > 0
	for _, p := range n.Processes {
		exited = exited && p.State == snapshot.ProcExited
	}
	if exited {
		return "its last report shows every rank exited"
	}
	names := slices.Sorted(maps.Keys(j.Nodes))
	for _, p := range n.Processes {
		for _, c := range p.Comms {
			for _, name := range names {
				other := j.Nodes[name]
				if other.RAS == nil || name == n.Node {
					continue
				}
				for _, rc := range other.RAS.Comms {
					if rc.Hash == c.ID && slices.Contains(rc.Dead, c.Rank) {
						return fmt.Sprintf("NCCL RAS on %s considers rank %d of communicator %s dead", name, c.Rank, c.ID)
					}
				}
			}
		}
	}
	return ""
}
