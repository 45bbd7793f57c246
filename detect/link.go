package detect

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// LinkConfig sets what a healthy IB port looks like.
type LinkConfig struct {
	// ExpectedIBGbps, when set, is the rate every IB port must run at; otherwise a port is
	// judged against the job's usual rate.
	ExpectedIBGbps float64 `yaml:"expected_ib_gbps"`
	// XmitWaitPerSecond above which a port is called congested.
	XmitWaitPerSecond float64 `yaml:"xmit_wait_per_second"`
}

// errorCounters are the IB port counters whose growth means a sick link.
var errorCounters = []string{"symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
	"local_link_integrity_errors", "excessive_buffer_overrun_errors", "port_xmit_discards"}

// Link finds network trouble: a rank that fell back to NET/Socket where its peers use IB,
// fewer IB devices than its peers, IB completion errors and port events from NCCL's log,
// and (live) ports below the job's usual rate, not ACTIVE, with error counters or
// xmit_wait rising. Findings name node, HCA and port and the ranks whose traffic uses it.
func Link(j *Job, cfg Config) []Finding {
	var out []Finding
	out = append(out, networkFallback(j)...)
	events, qp := ibEvents(j, cfg)
	comps, byPeer := ibCompletions(j, cfg, qp)
	out = append(out, qpErrorsExplainCompletions(events, qp, comps, byPeer)...)
	out = append(out, netPluginErrors(j, cfg)...)
	out = append(out, portFindings(j, cfg)...)
	return out
}

func networkFallback(j *Job) []Finding {
	nets := map[string]int{}
	devs := map[int]int{}
	for _, p := range j.Procs {
		if p.Network != "" {
			nets[p.Network]++
		}
		if p.Network == "IB" && len(p.NetDevs) > 0 {
			// A log without its "NET/IB : Using [0]mlx5_0:1/IB ..." line (cut, or joined
			// late) says nothing of the devices.
			devs[len(p.NetDevs)]++
		}
	}
	var out []Finding
	if nets["Socket"] > 0 && len(nets) > 1 {
		usual := ""
		for n, c := range nets {
			if n != "Socket" && (usual == "" || c > nets[usual]) {
				usual = n
			}
		}
		for _, p := range j.Procs {
			if p.Network != "Socket" {
				continue
			}
			f := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning,
				Culprits: []incident.Culprit{p.Culprit()}, culpritKeys: []string{p.Key()}, Key: "link:" + p.Key() + ":socket"}
			f.Summary = fmt.Sprintf("%s uses NET/Socket while %d other rank(s) use %s: its InfiniBand path is missing, traffic crawls over TCP",
				p.Name(), nets[usual], usual)
			f.addEvidence("NCCL on %s printed \"Using network Socket\"", p.Host)
			if len(p.NetDevs) > 0 {
				f.addEvidence("its network devices: %s", strings.Join(p.NetDevs, " "))
			}
			out = append(out, f)
		}
	}
	if len(devs) > 1 {
		usual, most := 0, 0
		for n, c := range devs {
			if c > most || (c == most && n > usual) {
				usual, most = n, c
			}
		}
		for _, p := range j.Procs {
			if p.Network == "IB" && len(p.NetDevs) > 0 && len(p.NetDevs) < usual {
				f := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning,
					Culprits: []incident.Culprit{p.Culprit()}, culpritKeys: []string{p.Key()}, Key: "link:" + p.Key() + ":devices"}
				f.Summary = fmt.Sprintf("%s sees %d IB devices where its peers see %d: an HCA or port is missing on %s",
					p.Name(), len(p.NetDevs), usual, p.Host)
				f.addEvidence("its devices: %s", strings.Join(p.NetDevs, " "))
				out = append(out, f)
			}
		}
	}
	return out
}

// ibEvents turns NCCL's IB async events into findings, one per (host, HCA port), each
// named for what it is about: a port, a queue pair, a completion queue, the device.
// Completion errors are the IBCompletion rule's (ib.go). qp maps the hosts whose HCA put a
// queue pair in error to the index of that finding.
func ibEvents(j *Job, cfg Config) (out []Finding, qp map[string]int) {
	type key struct{ host, dev string }
	found := map[key]*Finding{}
	var order []key
	qpHost := map[key]bool{}
	for _, p := range j.Procs {
		for _, e := range p.Events {
			if e.Kind != snapshot.EventIBAsync || !recentEvent(j, cfg.EventConfig, int64(e.T)) {
				continue
			}
			if !e.Fatal && !strings.Contains(e.Detail, "err") {
				// "port active", "GID table change", "LID change", "SM change": the
				// fabric's housekeeping, not a fault.
				continue
			}
			dev := e.Dev
			if e.Port > 0 {
				dev = e.Dev + ":" + strconv.Itoa(e.Port)
			}
			k := key{p.Host, dev}
			f := found[k]
			if f == nil {
				f = &Finding{Kind: incident.KindLink, Severity: incident.SeverityCritical,
					Culprits: []incident.Culprit{{Rank: -1, Host: p.Host, Port: dev}}, Key: "link:" + p.Host + ":" + dev}
				found[k] = f
				order = append(order, k)
			}
			// NCCL before 2.20 names no HCA: said so rather than an empty port.
			where, on := "an HCA NCCL does not name", p.Host+" (NCCL does not name the HCA)"
			if e.Dev != "" {
				where = fmt.Sprintf("%s port %d", e.Dev, e.Port)
				on = p.Host + " " + where
			}
			f.addEvidence("%s: NCCL got IB async event %q on %s", p.Name(), e.Detail, where)
			if f.Summary == "" {
				target := ibAsyncTarget(e)
				f.Summary = fmt.Sprintf("IB %s event %q on %s%s", target.name, e.Detail, on, target.why(e.Detail))
				if !strings.Contains(e.Detail, "error") && !strings.Contains(e.Msg, "fatal") {
					f.Severity = incident.SeverityWarning
				}
				qpHost[k] = target.queue && f.Severity == incident.SeverityCritical
			}
			f.culpritKeys = appendUnique(f.culpritKeys, p.Key())
		}
	}
	qp = map[string]int{}
	for i, k := range order {
		out = append(out, *found[k])
		if _, seen := qp[k.host]; qpHost[k] && !seen {
			qp[k.host] = i
		}
	}
	return out, qp
}

// asyncTarget is what an IB async event is about.
type asyncTarget struct {
	name  string
	queue bool // a queue pair or queue of one connection, not the port or the device
}

// ibAsyncTarget tells an event of a queue pair, completion queue or shared receive queue
// (ibv_event_type_str's words, or NCCL 2.23+'s "async fatal event on QP (0x..)") from a
// port's (active, error, LID, P_Key, SM, GID, client reregistration) and the device's.
func ibAsyncTarget(e snapshot.Event) asyncTarget {
	d, m := strings.ToLower(e.Detail), e.Msg
	switch {
	case strings.Contains(m, " on QP") || strings.Contains(d, "work queue") || strings.Contains(d, "last wqe") ||
		strings.Contains(d, "communication established") || strings.Contains(d, "send queue drained") ||
		strings.Contains(d, "path migration"):
		return asyncTarget{name: "queue pair (QP)", queue: true}
	case strings.Contains(m, " on CQ") || strings.Contains(d, "cq error"):
		return asyncTarget{name: "completion queue (CQ)", queue: true}
	case strings.Contains(m, " on SRQ") || strings.Contains(d, "srq"):
		return asyncTarget{name: "shared receive queue (SRQ)", queue: true}
	case strings.Contains(d, "catastrophic") || strings.Contains(d, "device fatal"):
		return asyncTarget{name: "device"}
	}
	return asyncTarget{name: "port"}
}

// why says what a queue's error means for the job; a port's event speaks for itself.
func (t asyncTarget) why(detail string) string {
	switch {
	case !t.queue:
		return ""
	case strings.Contains(detail, "access violation"):
		return ": the HCA was refused access to memory a request named (a registration that is no longer valid: GPUDirect RDMA or the peer-memory module, or a buffer freed while NCCL used it); its queue pair is in error and its peers' requests fail next"
	}
	return ": a queue pair of this HCA went into error; its peers' requests on it fail next"
}

// qpErrorsExplainCompletions: a host whose queue pair failed breaks its connections, so
// its peers' completion errors with it are its consequences (byPeer: evidence by that
// host), and its own completion error on the failed queue is one fault with the event.
func qpErrorsExplainCompletions(events []Finding, qp map[string]int, comps []Finding, byPeer map[string][]string) []Finding {
	absorbed := map[int]bool{}
	for host, lines := range byPeer {
		f := &events[qp[host]]
		for _, l := range lines {
			f.Victims++
			f.addEvidence("%s", l)
		}
	}
	for i := range comps {
		for host, k := range qp {
			if absorbed[k] || len(byPeer[host]) > 0 || !hasHost(comps[i].Culprits, host) {
				continue
			}
			for _, l := range events[k].Evidence {
				comps[i].addEvidence("%s", l)
			}
			absorbed[k] = true
		}
	}
	var out []Finding
	for k, f := range events {
		if !absorbed[k] {
			out = append(out, f)
		}
	}
	return append(out, comps...)
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// portFindings judges the sampled ports of every node (live).
func portFindings(j *Job, cfg Config) []Finding {
	usual := cfg.ExpectedIBGbps
	if usual == 0 {
		usual = usualRate(j)
	}
	var nodes []string
	for n := range j.Nodes {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var out []Finding
	for _, name := range nodes {
		n := j.Nodes[name]
		for i := range n.Ports {
			pt := &n.Ports[i]
			if pt.Kind != snapshot.PortIB {
				continue
			}
			var problems []string
			sev := incident.SeverityWarning
			if pt.State != "" && pt.State != snapshot.PortActive {
				problems = append(problems, fmt.Sprintf("port state %s (%s)", pt.State, pt.PhysState))
				sev = incident.SeverityCritical
			} else if usual > 0 && pt.RateGbps > 0 && pt.RateGbps < usual*0.99 {
				problems = append(problems, fmt.Sprintf("runs at %.0f of %.0f Gb/s (%s %s)", pt.RateGbps, usual, pt.Width, pt.Speed))
				sev = incident.SeverityCritical
			}
			for _, c := range errorCounters {
				if d := pt.Deltas[c]; d > 0 {
					problems = append(problems, fmt.Sprintf("%s +%d in %.0f s", c, d, pt.IntervalS))
				}
			}
			if cfg.XmitWaitPerSecond > 0 && pt.XmitWaitPerS > cfg.XmitWaitPerSecond {
				problems = append(problems, fmt.Sprintf("port_xmit_wait growing at %.3g/s (congestion or a slow peer)", pt.XmitWaitPerS))
			}
			if len(problems) == 0 {
				continue
			}
			port := pt.Device + ":" + strconv.Itoa(pt.Port)
			f := Finding{Kind: incident.KindLink, Severity: sev, Key: "link:" + name + ":" + port}
			ranks := ranksUsing(j, name, pt.Device, pt.Port)
			f.Culprits = []incident.Culprit{{Rank: -1, Host: name, Port: port}}
			for _, p := range ranks {
				c := p.Culprit()
				c.Port = port
				f.Culprits = append(f.Culprits, c)
				f.culpritKeys = append(f.culpritKeys, p.Key())
			}
			f.Summary = fmt.Sprintf("%s %s port %d %s", name, pt.Device, pt.Port, strings.Join(problems, "; "))
			if len(ranks) > 0 {
				var rs []string
				for _, p := range ranks {
					rs = append(rs, strconv.Itoa(p.Rank))
				}
				f.Summary += "; used by rank(s) " + strings.Join(rs, ",")
			}
			for _, pr := range problems {
				f.addEvidence("%s", pr)
			}
			if pt.XmitGbps > 0 || pt.RecvGbps > 0 {
				f.addEvidence("traffic: %.1f Gb/s out, %.1f Gb/s in", pt.XmitGbps, pt.RecvGbps)
			}
			if pt.T != 0 {
				f.FaultAt = pt.T.Time()
			}
			out = append(out, f)
		}
	}
	return out
}

// usualRate is the most common rate of the job's ACTIVE IB ports.
func usualRate(j *Job) float64 {
	counts := map[float64]int{}
	for _, n := range j.Nodes {
		for _, pt := range n.Ports {
			if pt.Kind == snapshot.PortIB && pt.State == snapshot.PortActive && pt.RateGbps > 0 {
				counts[pt.RateGbps]++
			}
		}
	}
	best, most := 0.0, 0
	for r, c := range counts {
		if c > most || (c == most && r > best) {
			best, most = r, c
		}
	}
	return best
}

// ranksUsing lists the processes on a node whose NCCL uses the given HCA port.
func ranksUsing(j *Job, node, dev string, port int) []*Proc {
	want := dev + ":" + strconv.Itoa(port)
	var out []*Proc
	for _, p := range j.Procs {
		if p.Node != node {
			continue
		}
		for _, d := range p.NetDevs {
			if strings.HasPrefix(d, want) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}
