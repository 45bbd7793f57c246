package detect

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// DurationConfig judges per-op durations measured by the profiler plugin.
//
// A collective ends on every rank at about the same time, when the last rank's data has
// gone round; each rank's kernel runs from its own arrival to that end. So the rank that
// arrives late has the shortest busy time (kernel start to completion), by as much as it is
// late: MeasuredStragglers names the rank whose mean busy time is below its peers' median by
// max(MeasuredLagMin, MeasuredLagFraction × that median), over at least MeasuredMinOps ops.
// That is the lag on the GPUs themselves, where log timestamps only show when the host
// issued the op.
//
// A network step's time from being handed to the network to its end depends on the link
// alone: SlowLinks names the rank pair whose send steps take SlowLinkFactor times the
// communicator's other links (median), and at least SlowLinkMinStep more, over at least
// SlowLinkMinSteps steps.
type DurationConfig struct {
	MeasuredLagMin      time.Duration `yaml:"measured_lag_min"`
	MeasuredLagFraction float64       `yaml:"measured_lag_fraction"`
	MeasuredMinOps      int           `yaml:"measured_min_ops"`
	SlowLinkFactor      float64       `yaml:"slow_link_factor"`
	SlowLinkMinStep     time.Duration `yaml:"slow_link_min_step"`
	SlowLinkMinSteps    int           `yaml:"slow_link_min_steps"`
}

func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]int64(nil), v...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

type timed struct {
	m Member
	t *snapshot.Timing
}

// MeasuredStragglers finds ranks that arrive late at their collectives, by the busy times
// the plugin measured. One finding per process: the communicator where it lags most.
func MeasuredStragglers(j *Job, cfg Config) []Finding {
	type verdict struct {
		g                  *Group
		self               timed
		lag, peers, pQueue int64
		n                  int
	}
	best := map[string]verdict{}
	var order []string
	for _, g := range j.Groups {
		var ts []timed
		for _, m := range g.Members {
			if d := m.Comm.Done; d != nil && d.Timing != nil && d.Timing.N >= int64(cfg.MeasuredMinOps) &&
				m.Proc.State != snapshot.ProcExited {
				ts = append(ts, timed{m, d.Timing})
			}
		}
		if len(ts) < 2 {
			continue
		}
		for i, self := range ts {
			var busy, queue []int64
			for k, o := range ts {
				if k != i {
					busy, queue = append(busy, o.t.Busy), append(queue, o.t.Queue)
				}
			}
			peers := median(busy)
			lag := peers - self.t.Busy
			if lag < max(cfg.MeasuredLagMin.Microseconds(), int64(cfg.MeasuredLagFraction*float64(peers))) {
				continue
			}
			k := self.m.Proc.Key()
			have, seen := best[k]
			if !seen {
				order = append(order, k)
			}
			if !seen || lag > have.lag {
				best[k] = verdict{g: g, self: self, lag: lag, peers: peers, pQueue: median(queue), n: len(ts)}
			}
		}
	}
	var out []Finding
	for _, k := range order {
		v := best[k]
		p := v.self.m.Proc
		lag := time.Duration(v.lag) * time.Microsecond
		f := Finding{Kind: incident.KindStraggler, Severity: incident.SeverityWarning, Comm: v.g.ID,
			Culprits: []incident.Culprit{p.Culprit()}, culpritKeys: []string{k}, LagSeconds: lag.Seconds(),
			Key: "straggler:" + k, Victims: v.n - 1, measured: true}
		f.Summary = fmt.Sprintf("%s is a straggler: it arrives %s late at the collectives of communicator %s, measured on the GPUs: its collectives run %s from its kernel's start to completion, its %d peers' %s (median) while they wait for it",
			p.Name(), lag.Round(time.Millisecond/10), shortComm(v.g.ID), micros(v.self.t.Busy), v.n-1, micros(v.peers))
		f.addEvidence("over its last %d collectives (%s) as the NCCL profiler plugin timed them", v.self.t.N,
			(time.Duration(v.self.t.Window) * time.Microsecond).Round(time.Second))
		switch q := v.self.t.Queue; {
		case q-v.pQueue >= v.lag/2:
			f.addEvidence("its kernels start %s after the host issued them, its peers' %s: its GPU is busy before each collective (slower compute, throttling)",
				micros(q), micros(v.pQueue))
		default:
			f.addEvidence("its kernels start %s after the host issued them, like its peers' (%s): its host issues them late (input pipeline, CPU, Python)",
				micros(q), micros(v.pQueue))
		}
		if g := gpuOf(j, p); g != nil {
			f.addEvidence("its GPU %d: %s", g.Index, describeGPU(g))
		}
		out = append(out, f)
	}
	return out
}

func micros(v int64) string {
	return (time.Duration(v) * time.Microsecond).Round(time.Microsecond).String()
}

// SlowLinks finds rank pairs whose network is slow, by the time their send steps spend on
// the network as the plugin measured it. One finding per pair of processes.
func SlowLinks(j *Job, cfg Config) []Finding {
	type link struct {
		from   Member
		to     *Member
		peer   int
		us     int64
		steps  int64
		others int64
		n      int
		g      *Group
	}
	seen := map[string]bool{}
	var out []Finding
	for _, g := range j.Groups {
		byRank := map[int]*Member{}
		for i := range g.Members {
			byRank[g.Members[i].Comm.Rank] = &g.Members[i]
		}
		var links []link
		for _, m := range g.Members {
			if m.Comm.Done == nil || m.Proc.State == snapshot.ProcExited {
				continue
			}
			for _, pp := range m.Comm.Done.Peers {
				if pp.Dir == snapshot.DirSend && pp.NetSteps >= int64(cfg.SlowLinkMinSteps) && pp.NetUs > 0 {
					links = append(links, link{from: m, to: byRank[pp.Peer], peer: pp.Peer, us: pp.NetUs, steps: pp.NetSteps, g: g})
				}
			}
		}
		for i, l := range links {
			// The pair's own reverse direction is no witness: a send step also waits on a
			// receiver that posts late (its GPU busy, a two-rank communicator whose peer
			// lags), which slows one direction of a healthy link. Another link must say it.
			var rest []int64
			for k, o := range links {
				if k != i && (o.to == nil || o.to.Proc != l.from.Proc || o.from.Proc != toProc(l.to)) {
					rest = append(rest, o.us)
				}
			}
			if len(rest) == 0 {
				continue
			}
			l.others, l.n = median(rest), len(rest)
			if float64(l.us) < cfg.SlowLinkFactor*float64(l.others) || l.us-l.others < cfg.SlowLinkMinStep.Microseconds() {
				continue
			}
			key := "link:pair:" + l.from.Proc.Key() + "->" + fmt.Sprint(l.peer)
			if l.to != nil {
				key = "link:pair:" + l.from.Proc.Key() + "->" + l.to.Proc.Key()
			}
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, slowLinkFinding(j, l.g, l.from, l.to, l.peer, l.us, l.others, l.steps, l.n, key))
		}
	}
	return out
}

func slowLinkFinding(j *Job, g *Group, from Member, to *Member, peer int, stepUs, others, steps int64, n int, key string) Finding {
	f := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Comm: g.ID, Key: key, measured: true,
		Culprits: []incident.Culprit{from.Proc.Culprit()}, culpritKeys: []string{from.Proc.Key()}}
	dest := fmt.Sprintf("rank %d of the communicator", peer)
	if to != nil {
		dest = to.Proc.Name()
		f.Culprits = append(f.Culprits, to.Proc.Culprit())
		f.culpritKeys = append(f.culpritKeys, to.Proc.Key())
	}
	f.Summary = fmt.Sprintf("the network from %s to %s is slow: a send step spends %s on the network, the communicator's %d other link(s) %s (median)",
		from.Proc.Name(), dest, micros(stepUs), n, micros(others))
	f.addEvidence("measured by the NCCL profiler plugin over %d send steps on communicator %s", steps, shortComm(g.ID))
	for _, m := range []*Member{&from, to} {
		if m == nil {
			continue
		}
		if hca := hcaOf(m.Proc); hca != "" {
			f.addEvidence("%s on %s: %s", m.Proc.Name(), m.Proc.Host, hca)
		}
	}
	return f
}

// hcaOf says which network devices a process's NCCL uses, when its log named them.
func hcaOf(p *Proc) string {
	switch {
	case len(p.NetDevs) == 1:
		return "its NIC " + p.NetDevs[0]
	case len(p.NetDevs) > 1:
		return "one of its NICs " + strings.Join(p.NetDevs, " ")
	}
	return ""
}

func toProc(m *Member) *Proc {
	if m == nil {
		return nil
	}
	return m.Proc
}
