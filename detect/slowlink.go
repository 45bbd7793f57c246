package detect

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// A link is a root when its transfers lag while the ranks are in the op: with the profiler
// plugin, a send step's time on the network (handed over until done) depends on the link
// alone. Slow pairs that share one endpoint are that endpoint's NIC or host, not several
// faults.

// slowLink is one direction of one rank pair whose send steps are slow.
type slowLink struct {
	group      string
	from, to   *Proc // to is nil when the peer's process is not known
	peer       int
	us, others int64 // µs per send step: this link, the communicator's other links (median)
	steps      int64
	n          int
	share      float64 // of the job's time, when the sender's timing says how busy it is
	// excessPerOp is the time the link adds to each of the sender's collectives (µs).
	excessPerOp int64
	// own: judged against its own speed before (a pair has no other link to compare with).
	own bool
}

// slowLinks finds the slow directions of every communicator, then folds those that share an
// endpoint into one root at that endpoint.
func (led *Ledger) slowLinks(j *Job, sc SlowdownConfig) []linkRoot {
	led.mu.Lock()
	defer led.mu.Unlock()
	var all []slowLink
	for _, g := range j.Groups {
		all = append(all, led.groupSlowLinks(g, sc)...)
	}
	return linkRoots(all)
}

// maxLinkBaselines bounds the link speeds the ledger remembers.
const maxLinkBaselines = 1 << 16

// groupSlowLinks judges each send direction against the communicator's other links, and
// where there are none (a pair: its reverse direction is no witness, a send step also waits
// on a receiver that posts late) against its own speed before, when the reverse direction
// did not slow alike.
func (led *Ledger) groupSlowLinks(g *Group, sc SlowdownConfig) []slowLink {
	type sendDir struct {
		from   Member
		to     *Member
		peer   int
		us     int64
		steps  int64
		timing *snapshot.Timing
	}
	byRank := map[int]*Member{}
	for i := range g.Members {
		byRank[g.Members[i].Comm.Rank] = &g.Members[i]
	}
	var dirs []sendDir
	for _, m := range g.Members {
		if m.Comm.Done == nil || m.Proc.State == snapshot.ProcExited {
			continue
		}
		for _, pp := range m.Comm.Done.Peers {
			if pp.Dir == snapshot.DirSend && pp.NetSteps >= int64(sc.SlowLinkMinSteps) && pp.NetUs > 0 {
				dirs = append(dirs, sendDir{from: m, to: byRank[pp.Peer], peer: pp.Peer, us: pp.NetUs, steps: pp.NetSteps, timing: m.Comm.Done.Timing})
			}
		}
	}
	var out []slowLink
	for i, d := range dirs {
		// The pair's own reverse direction is no witness: a send step also waits on a
		// receiver that posts late, which slows one direction of a healthy link.
		var rest []int64
		for k, o := range dirs {
			if k != i && (o.to == nil || o.to.Proc != d.from.Proc || o.from.Proc != memberProc(d.to)) {
				rest = append(rest, o.us)
			}
		}
		key := g.ID + "|" + d.from.Proc.Key() + "|" + fmt.Sprint(d.peer)
		base, known := led.linkBase[key]
		if !known || d.us < base {
			if known || len(led.linkBase) < maxLinkBaselines {
				led.linkBase[key] = d.us
			}
		}
		var reverse int64
		for _, o := range dirs {
			if o.to != nil && o.to.Proc == d.from.Proc && o.from.Proc == memberProc(d.to) {
				reverse = o.us
			}
		}
		f := sc.SlowLinkFactor
		var others int64
		switch {
		case len(rest) > 0:
			others = median(rest)
		case known && float64(d.us) >= f*float64(base) && float64(d.us) >= f*float64(reverse):
			others = max(base, reverse)
		default:
			continue
		}
		if float64(d.us) < f*float64(others) {
			continue
		}
		l := slowLink{group: g.ID, from: d.from.Proc, to: memberProc(d.to), peer: d.peer, us: d.us, others: others, steps: d.steps, n: len(rest), own: len(rest) == 0}
		if t := d.timing; t != nil && t.N > 0 {
			l.excessPerOp = (d.us - others) * d.steps / t.N
		}
		if t := d.timing; t != nil && t.Window > 0 {
			busy := float64(t.N*t.Busy) / float64(t.Window)
			l.share = min(busy, 1) * (1 - float64(others)/float64(d.us))
			if l.share < sc.SlowdownShare {
				continue
			}
		}
		out = append(out, l)
	}
	return out
}

func memberProc(m *Member) *Proc {
	if m == nil {
		return nil
	}
	return m.Proc
}

// linkRoot is a root the slow links point at: one pair, or one endpoint several share.
type linkRoot struct {
	links    []slowLink
	endpoint *Proc // the rank whose NIC all links share (nil: one pair)
	sends    bool  // the endpoint is the links' sender
	group    string
}

// linkRoots folds slow links into roots: an endpoint in two or more slow links with
// different peers is the root of all of them (its NIC or host); the rest are pairs.
func linkRoots(all []slowLink) []linkRoot {
	if len(all) == 0 {
		return nil
	}
	used := make([]bool, len(all))
	var out []linkRoot
	for _, sends := range []bool{true, false} {
		byEnd := map[*Proc][]int{}
		var ends []*Proc
		for i, l := range all {
			end := l.to
			if sends {
				end = l.from
			}
			if end == nil || used[i] {
				continue
			}
			if byEnd[end] == nil {
				ends = append(ends, end)
			}
			byEnd[end] = append(byEnd[end], i)
		}
		sort.Slice(ends, func(a, b int) bool { return ends[a].Rank < ends[b].Rank })
		for _, end := range ends {
			ids := byEnd[end]
			peers := map[string]bool{}
			for _, i := range ids {
				other := all[i].from
				if sends {
					other = all[i].to
				}
				if other != nil {
					peers[other.Key()] = true
				} else {
					peers[fmt.Sprint(all[i].group, all[i].peer)] = true
				}
			}
			if len(peers) < 2 {
				continue
			}
			r := linkRoot{endpoint: end, sends: sends, group: all[ids[0]].group}
			for _, i := range ids {
				used[i] = true
				r.links = append(r.links, all[i])
			}
			out = append(out, r)
		}
	}
	for i, l := range all {
		if !used[i] {
			out = append(out, linkRoot{links: []slowLink{l}, group: l.group})
		}
	}
	return out
}

// finding names the root, what it costs and the links it spans.
func (r linkRoot) finding(j *Job) Finding {
	worst := r.links[0]
	for _, l := range r.links {
		if l.share > worst.share || (l.share == worst.share && l.us > worst.us) {
			worst = l
		}
	}
	f := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Comm: worst.group, measured: true, Cause: incident.CauseLink}
	if worst.share > 0 {
		f.Episode = &incident.Episode{LostShare: worst.share}
	}
	cost := ""
	if worst.share > 0 {
		cost = fmt.Sprintf(", costing about %.0f%% of the job's time", 100*worst.share)
	}
	if r.endpoint != nil {
		p := r.endpoint
		f.Key, f.origin = "link:nic:"+p.Key(), knowledge.NIC
		f.Culprits = []incident.Culprit{p.Culprit()}
		f.culpritKeys = []string{p.Key()}
		if hca := hcaOf(p); hca != "" {
			f.Culprits[0].Port = strings.TrimPrefix(strings.TrimPrefix(hca, "its NIC "), "one of its NICs ")
		}
		dir, with := "sends from", "to"
		if !r.sends {
			dir, with = "sends to", "from"
		}
		var peers []string
		for _, l := range r.links {
			other := l.to
			if !r.sends {
				other = l.from
			}
			name := fmt.Sprintf("rank %d of %s", l.peer, shortComm(l.group))
			if other != nil {
				name = other.Name()
			}
			peers = append(peers, fmt.Sprintf("%s %s (%s per step, others %s)", with, name, micros(l.us), micros(l.others)))
		}
		f.Summary = fmt.Sprintf("the network of %s is slow: every slow link has it as its endpoint (%s it are slow on %d links)%s; its NIC, cable or switch port is the common cause",
			p.Name(), dir, len(r.links), cost)
		for _, s := range peers {
			f.addEvidence("slow %s", s)
		}
		if hca := hcaOf(p); hca != "" {
			f.addEvidence("%s on %s: %s", p.Name(), p.Host, hca)
		}
		return f
	}
	l := worst
	f.Key = "link:pair:" + l.from.Key() + "->" + fmt.Sprint(l.peer)
	f.Culprits = []incident.Culprit{l.from.Culprit()}
	f.culpritKeys = []string{l.from.Key()}
	dest := fmt.Sprintf("rank %d of the communicator", l.peer)
	if l.to != nil {
		f.Key = "link:pair:" + l.from.Key() + "->" + l.to.Key()
		dest = l.to.Name()
		f.Culprits = append(f.Culprits, l.to.Culprit())
		f.culpritKeys = append(f.culpritKeys, l.to.Key())
	}
	f.Summary = fmt.Sprintf("the network from %s to %s is slow: a send step spends %s on the network, the communicator's %d other link(s) %s (median)%s",
		l.from.Name(), dest, micros(l.us), l.n, micros(l.others), cost)
	if l.own {
		f.Summary = fmt.Sprintf("the network from %s to %s is slow: a send step spends %s on the network, %s before and in the other direction%s",
			l.from.Name(), dest, micros(l.us), micros(l.others), cost)
	}
	f.addEvidence("measured by the NCCL profiler plugin over %d send steps on communicator %s", l.steps, shortComm(l.group))
	for _, p := range []*Proc{l.from, l.to} {
		if p != nil {
			if hca := hcaOf(p); hca != "" {
				f.addEvidence("%s on %s: %s", p.Name(), p.Host, hca)
			}
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
