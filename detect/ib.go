package detect

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// IBConfig sets how completion errors are judged.
type IBConfig struct {
	// IBPeerReporters is how many hosts must report completion errors with one peer before
	// the peer, not the reporters' links, is the suspect.
	IBPeerReporters int `yaml:"-"`
}

// ibCause is what NCCL's maintainers say a completion status means, and where to look.
type ibCause struct {
	what string // the status in words
	why  string // the usual cause and how to confirm it
	// remote is set when the fault is on the peer's side of the connection.
	remote bool
}

func ibCauseOf(status int, stage snapshot.Stage) ibCause {
	switch status {
	case snapshot.IBRetryExc:
		if stage == snapshot.StageUnknown {
			return ibCause{what: "transport retries exhausted (the peer did not answer)",
				why: "the link, the fabric or the peer's node failed (NCCL_IB_TIMEOUT too short makes a congested fabric look the same); if it came as the job started, the NICs cannot reach each other over RDMA at all (on RoCE check NCCL_IB_GID_INDEX and NCCL_IB_TC; test with ib_write_bw between the two hosts)"}
		}
		if stage == snapshot.StageInit || stage == snapshot.StageReady || stage == snapshot.StageFirst {
			// Before any op: the queue pairs connected over sockets, but no RDMA packet
			// ever got through.
			return ibCause{what: "transport retries exhausted before any operation completed",
				why: "the NICs cannot reach each other over RDMA at all: check the fabric and, on RoCE, NCCL_IB_GID_INDEX and the traffic class (NCCL_IB_TC), or rails that do not cross (NCCL_CROSS_NIC=0); test with ib_write_bw between the two hosts"}
		}
		return ibCause{what: "transport retries exhausted (the peer stopped answering)",
			why: "the link or the fabric between them failed, or the peer's node went away; NCCL_IB_TIMEOUT too short makes a congested fabric look the same"}
	case snapshot.IBRNRRetryExc:
		return ibCause{what: "receiver-not-ready retries exhausted", remote: true,
			why: "the peer posted no receive in time: it stalled or died"}
	case snapshot.IBLocProtErr:
		return locProtCause(stage)
	case ibRemInvReq:
		return ibCause{what: "remote invalid request", remote: true,
			why: "the peer's HCA rejected the request: its queue pair was in error or the request did not fit what it had posted"}
	case snapshot.IBRemAccess:
		return ibCause{what: "remote access error", remote: true,
			why: "the peer's HCA refused the RDMA access: GPUDirect RDMA or memory registration is broken on the peer (ACS, the peer-memory module)"}
	case snapshot.IBWRFlushErr:
		return ibCause{what: "work request flushed",
			why: "a consequence: the queue pair was already in error after an earlier failure on it"}
	}
	return ibCause{what: "completion error", why: "the connection failed on the HCA"}
}

// ibRemInvReq is IBV_WC_REM_INV_REQ_ERR: the peer's HCA refused the request.
const ibRemInvReq = 9

// locProtCause: PCIe ACS or an IOMMU that keeps the HCA from GPU memory fails the very
// first transfer, so a job that had run for a while lost access to memory it used before.
func locProtCause(stage snapshot.Stage) ibCause {
	const acs = "GPUDirect RDMA is broken on this host: the HCA cannot reach GPU memory, most often because PCIe ACS (or the IOMMU) redirects peer-to-peer traffic; confirm with NCCL_NET_GDR_LEVEL=0 (works, slower), then disable ACS"
	switch stage {
	case snapshot.StageRun:
		return ibCause{what: "local protection error after the job had run for a while",
			why: "the HCA could no longer access memory it had used: ACS or IOMMU settings would have failed the first transfer, so look at the memory registration (a buffer the application freed or remapped while NCCL used it, user buffer registration), the peer-memory/DMA-BUF driver and the HCA's firmware and driver; NCCL_NET_GDR_LEVEL=0 tells whether GPU memory is involved"}
	case snapshot.StageUnknown:
		return ibCause{what: "local protection error",
			why: acs + " (that fails the very first transfer: if the job had run for a while before this, look instead at the memory registration, a buffer freed while NCCL used it, or the HCA's driver)"}
	}
	return ibCause{what: "local protection error", why: acs}
}

// IBCompletion turns NCCL's IB completion errors into findings by status, with the cause
// NCCL's maintainers give: 12 (retries exhausted: link or peer lost, or RDMA unusable when
// it happens before any op), 13 (receiver not ready), 4 (GPUDirect RDMA broken, usually
// ACS), 10 (the peer refused access). 5 (flushed) follows an earlier error on the queue
// pair: it is evidence of that error and names a culprit only when nothing else is logged.
// A finding names host, HCA and port, the rank of the reporting process, and the peer
// (with its host when one of the job's processes logged that address).
func IBCompletion(j *Job, cfg Config) []Finding {
	out, _ := ibCompletions(j, cfg, nil)
	return out
}

// ibCompletions is IBCompletion, where a completion error with a peer whose host put a
// queue pair in error (qp, from ibEvents) is that host's doing: it becomes a line of
// evidence for that host (byPeer) instead of a finding.
func ibCompletions(j *Job, cfg Config, qp map[string]int) (out []Finding, byPeer map[string][]string) {
	book := newPeerBook(j)
	byPeer = map[string][]string{}
	type report struct {
		p *Proc
		e snapshot.Event
	}
	var causes, flushes []report
	for _, p := range j.Procs {
		for _, e := range p.Events {
			if e.Kind != snapshot.EventIBCompletion || !recentEvent(j, cfg.EventConfig, int64(e.T)) || echoed(j, p, e) {
				continue
			}
			if e.Code == snapshot.IBWRFlushErr {
				flushes = append(flushes, report{p, e})
			} else {
				causes = append(causes, report{p, e})
			}
		}
	}
	if len(causes) == 0 && len(flushes) == 0 {
		return nil, byPeer
	}
	minReporters := max(cfg.IBPeerReporters, 2)
	// Hosts reporting errors with each peer host: several reporters and one peer make
	// the peer the suspect.
	reporters := map[string]map[string]bool{}
	for _, r := range causes {
		if h := book.host(r.e.Peer); h != "" {
			if reporters[h] == nil {
				reporters[h] = map[string]bool{}
			}
			reporters[h][r.p.Host] = true
		}
	}
	found := map[string]*Finding{}
	var order []string
	opsLogged := anyOpLogged(j)
	for _, r := range causes {
		p, e := r.p, r.e
		c := ibCauseOf(e.Code, knownStage(opsLogged, p, e))
		peerHost := book.host(e.Peer)
		if h, sure := qpPeer(qp, peerHost, p.Host); h != "" && e.Code != snapshot.IBLocProtErr {
			line := fmt.Sprintf("then %s%s: %s: a consequence, its peer's queue pair had failed", p.Name(), hcaWords(p, e.Dev), e.Msg)
			if !sure {
				line += fmt.Sprintf(" (these logs do not map %s to a host; %s is the only other host whose HCA reported a queue-pair error)", e.Peer, h)
			}
			byPeer[h] = append(byPeer[h], line)
			continue
		}
		var key string
		var culprit incident.Culprit
		var keys []string
		switch {
		case peerHost != "" && (c.remote || len(reporters[peerHost]) >= minReporters) && peerHost != p.Host:
			key = "link:peer:" + peerHost
			culprit = incident.Culprit{Rank: -1, Host: peerHost}
			if ps := book.procs[peerHost]; len(ps) == 1 {
				culprit = ps[0].Culprit()
				keys = []string{ps[0].Key()}
			}
		default:
			port := hcaPort(p, e.Dev)
			key = "link:" + p.Host + ":" + orUnknown(port)
			culprit = p.Culprit()
			culprit.Port = port
			keys = []string{p.Key()}
		}
		f := found[key]
		if f == nil {
			f = &Finding{Kind: incident.KindLink, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{culprit},
				culpritKeys: keys, Key: key}
			f.Summary = fmt.Sprintf("IB %s (%s) on %s%s talking to %s: %s",
				c.what, snapshot.IBStatusName(e.Code), p.Name(), hcaWords(p, e.Dev), book.describe(e.Peer), c.why)
			if key == "link:peer:"+peerHost && !c.remote {
				f.Summary = fmt.Sprintf("IB %s (%s): %d hosts (%s) report it with %s, the one they share: look at its link and node first; %s",
					c.what, snapshot.IBStatusName(e.Code), len(reporters[peerHost]), strings.Join(slices.Sorted(maps.Keys(reporters[peerHost])), ", "),
					book.describe(e.Peer), c.why)
			}
			if e.T != 0 {
				f.FaultAt = e.T.Time()
			}
			found[key] = f
			order = append(order, key)
		}
		if e.T != 0 && (f.FaultAt.IsZero() || e.T.Time().Before(f.FaultAt)) {
			f.FaultAt = e.T.Time()
		}
		f.Victims++
		f.culpritKeys = appendUnique(f.culpritKeys, p.Key())
		f.addEvidence("%s%s: %s", p.Name(), hcaWords(p, e.Dev), e.Msg)
	}
	for _, k := range order {
		out = append(out, *found[k])
	}
	if len(flushes) == 0 {
		return out, byPeer
	}
	if len(out) > 0 {
		// Flushed requests are what the first error left behind on its queue pairs.
		out[0].addEvidence("%d flushed request(s) (%s) follow: consequences of this error, not causes", len(flushes),
			snapshot.IBStatusName(snapshot.IBWRFlushErr))
		return out, byPeer
	}
	// Only flushes: the error that put the queue pairs in error state is not in these logs
	// (another rank's log, or an earlier part of this one). Say where they point.
	first := flushes[0]
	hosts := map[string]bool{}
	for _, r := range flushes {
		hosts[r.p.Host] = true
	}
	f := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Culprits: []incident.Culprit{},
		Key: "link:flush:" + first.p.Host}
	f.Summary = fmt.Sprintf("IB requests were flushed (%s) on %s talking to %s: a consequence of an earlier error on those connections that these logs do not hold (look at the peer's log and at the first error of the job)",
		snapshot.IBStatusName(snapshot.IBWRFlushErr), strings.Join(slices.Sorted(maps.Keys(hosts)), ", "), book.describe(first.e.Peer))
	for _, r := range flushes {
		f.addEvidence("%s: %s", r.p.Name(), r.e.Msg)
		f.culpritKeys = appendUnique(f.culpritKeys, r.p.Key())
	}
	return []Finding{f}, byPeer
}

// qpPeer is the host among qp's that a completion error's peer is on: the peer's own host,
// or, when no log maps the peer's address, the only other host with a failed queue pair
// (sure is false then).
func qpPeer(qp map[string]int, peerHost, reporter string) (host string, sure bool) {
	if peerHost != "" {
		if _, ok := qp[peerHost]; ok && peerHost != reporter {
			return peerHost, true
		}
		return "", false
	}
	for h := range qp {
		if h == reporter {
			continue
		}
		if host != "" {
			return "", false
		}
		host = h
	}
	return host, false
}

// knownStage is the stage of an event where the logs can tell it: with no op line anywhere
// (COLL not logged, a posted excerpt), an event past init, or of a process with no
// communicator known, may have come at any time.
func knownStage(opsLogged bool, p *Proc, e snapshot.Event) snapshot.Stage {
	if !opsLogged && (e.Stage == snapshot.StageReady || len(p.Comms) == 0) {
		return snapshot.StageUnknown
	}
	return e.Stage
}

// anyOpLogged reports whether any process of the job logged a collective or send/receive:
// then a process without one had not reached its first op.
func anyOpLogged(j *Job) bool {
	for _, p := range j.Procs {
		for _, c := range p.Comms {
			if c.Count > 0 || len(c.Recent) > 0 {
				return true
			}
		}
	}
	return false
}

// hcaWords names the HCA of an error for a sentence: " HCA mlx5_3:1", or the process's
// devices when the line names none (NCCL before 2.22 does not); "" when nothing is known.
func hcaWords(p *Proc, dev string) string {
	if port := hcaPort(p, dev); port != "" {
		return " HCA " + port
	}
	var names []string
	for _, d := range p.NetDevs {
		name, _, _ := strings.Cut(d, "/")
		names = append(names, name)
	}
	if len(names) == 0 {
		return ""
	}
	return " on one of its HCAs (" + strings.Join(names, ", ") + "; this NCCL does not say which)"
}

// hcaPort is "mlx5_3:1" for an HCA the process uses, from its NET/IB device list; the
// process's only device when the line named none (NCCL before 2.22).
func hcaPort(p *Proc, dev string) string {
	for _, d := range p.NetDevs {
		name, _, _ := strings.Cut(d, "/")
		if dev != "" && (name == dev || strings.HasPrefix(name, dev+":")) {
			return name
		}
	}
	if dev == "" && len(p.NetDevs) == 1 && p.Network != "Socket" {
		name, _, _ := strings.Cut(p.NetDevs[0], "/")
		return name
	}
	return dev
}
