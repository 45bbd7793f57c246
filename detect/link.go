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
// fewer IB devices than its peers, and (live) ports below the job's usual rate, not ACTIVE,
// with error counters or xmit_wait rising. Findings name node, HCA and port and the ranks
// whose traffic uses it. What NCCL logs about the network (IB completion errors and async
// events, a network plugin's failures) is the knowledge table's (messages.go).
func Link(j *Job, cfg Config) []Finding {
	return append(networkFallback(j), portFindings(j, cfg)...)
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
