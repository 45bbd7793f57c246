package detect

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
)

// duplicateHostnames finds two processes that print one host name but use addresses no
// other process of that name uses: two machines (containers, cloned images) under one name.
// NCCL before 2.4 told hosts apart by their name alone, so it joins such machines into one
// host and connects them through P2P or shared memory, which fails or hangs. Later NCCL
// adds the boot id, and a posted prefix cuts the name at its first dot, so the finding
// needs NCCL's intra-host transports in those processes and no version that rules it out.
func duplicateHostnames(j *Job) []Finding {
	byHost := map[string][]*Proc{}
	var hosts []string
	for _, p := range j.Procs {
		if p.Host == "" || p.Host == "?" || p.PID <= 0 || len(p.Addrs) == 0 {
			continue
		}
		if byHost[p.Host] == nil {
			hosts = append(hosts, p.Host)
		}
		byHost[p.Host] = append(byHost[p.Host], p)
	}
	var out []Finding
	for _, h := range hosts {
		ps := byHost[h]
		if a, b := apartPair(ps); a != nil && !hostHashed(ps) && intraHost(ps) {
			out = append(out, duplicateHostFinding(h, a, b, ps))
		}
	}
	return out
}

// apartPair is the first two processes whose addresses have none in common.
func apartPair(ps []*Proc) (*Proc, *Proc) {
	for i, a := range ps {
		for _, b := range ps[i+1:] {
			if !shareAddr(a.Addrs, b.Addrs) {
				return a, b
			}
		}
	}
	return nil, nil
}

func shareAddr(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// hostHashed reports a process that runs NCCL 2.4 or later, which hashes the boot id with
// the host name: its processes are not joined by name alone.
func hostHashed(ps []*Proc) bool {
	for _, p := range ps {
		major, rest, _ := strings.Cut(p.NCCL, ".")
		minor, _, _ := strings.Cut(rest, ".")
		ma, err1 := strconv.Atoi(major)
		mi, err2 := strconv.Atoi(minor)
		if err1 == nil && err2 == nil && (ma > 2 || ma == 2 && mi >= 4) {
			return true
		}
	}
	return false
}

// intraHost reports a process that set up a P2P or shared-memory path: NCCL put it with
// peers it took for local.
func intraHost(ps []*Proc) bool {
	for _, p := range ps {
		for _, t := range p.Transports {
			if strings.HasPrefix(t, "P2P") || strings.HasPrefix(t, "SHM") {
				return true
			}
		}
	}
	return false
}

func duplicateHostFinding(host string, a, b *Proc, ps []*Proc) Finding {
	f := Finding{Kind: incident.KindConfig, Severity: incident.SeverityWarning, Key: "config:hostname:" + host,
		Culprits: []incident.Culprit{a.Culprit(), b.Culprit()}, culpritKeys: []string{a.Key(), b.Key()}}
	f.Summary = fmt.Sprintf("%s and %s both call their host %s but use different addresses (%s and %s): they seem to run on two machines that share one host name (containers, cloned images); NCCL before 2.4 tells hosts apart by name alone, so it may treat them as one and connect them through P2P or shared memory, which fails or hangs; give every machine its own host name (or use a newer NCCL)",
		a.Name(), b.Name(), host, strings.Join(a.Addrs, ", "), strings.Join(b.Addrs, ", "))
	f.addEvidence("%s: uses address %s", a.Name(), strings.Join(a.Addrs, ", "))
	f.addEvidence("%s: uses address %s", b.Name(), strings.Join(b.Addrs, ", "))
	for _, p := range ps {
		for _, t := range p.Transports {
			if strings.HasPrefix(t, "P2P") || strings.HasPrefix(t, "SHM") {
				f.addEvidence("%s: connects a peer via %s", p.Name(), t)
				break
			}
		}
	}
	return f
}
