package detect

import (
	"fmt"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// ConnConfig sets how socket failures are read.
type ConnConfig struct {
	// ConnMaxPeers bounds the unreachable peers one finding names as culprits.
	ConnMaxPeers int `yaml:"-"`
}

// Connections reads NCCL's socket and proxy connection failures (bootstrap, proxy, NET/Socket)
// and names the peer. A connection that could not be opened is the network's setup: the
// interface NCCL picked (NCCL_SOCKET_IFNAME), a firewall, a route; a loopback or link-local
// address means the wrong interface. A connection that broke after the ranks were up means
// the peer's process went away: the peer is the culprit, the reporter only saw it. Breaks
// while the ranks were still initializing point at the peer too, unless a failed connect
// explains them.
func Connections(j *Job, cfg Config) []Finding {
	book := newPeerBook(j)
	maxPeers := max(cfg.ConnMaxPeers, 1)
	type failure struct {
		p *Proc
		e snapshot.Event
	}
	var connects, breaks []failure
	for _, p := range j.Procs {
		stray := strayAllocations(p)
		for i, e := range p.Events {
			if stray[i] || !recentEvent(j, cfg.EventConfig, int64(e.T)) || echoed(j, p, e) {
				continue
			}
			switch e.Kind {
			case snapshot.EventSocketConnect:
				if e.Fatal {
					connects = append(connects, failure{p, e})
				}
			case snapshot.EventConnClosedRemote:
				breaks = append(breaks, failure{p, e})
			case snapshot.EventSocketError:
				if e.Peer != "" {
					breaks = append(breaks, failure{p, e})
				}
			}
		}
	}
	var out []Finding
	if len(connects) > 0 {
		// One finding for the job's failed connects: they share the network's setup.
		first := connects[0]
		peers := map[string]bool{}
		var reporters []string
		culprits := []incident.Culprit{}
		for _, c := range connects {
			peers[book.describe(c.e.Peer)] = true
			reporters = appendUnique(reporters, c.p.Name())
		}
		for _, c := range connects {
			if h := book.host(c.e.Peer); h != "" && len(culprits) < maxPeers {
				if !hasHost(culprits, h) {
					culprits = append(culprits, incident.Culprit{Rank: -1, Host: h})
				}
			} else if c.e.Peer != "" && !loopback(c.e.Peer) && len(culprits) < maxPeers && !hasHost(culprits, peerName(c.e.Peer)) {
				culprits = append(culprits, incident.Culprit{Rank: -1, Host: peerName(c.e.Peer)})
			}
		}
		when := "while the ranks were starting (bootstrap, communicator init)"
		if first.e.Stage == snapshot.StageRun || first.e.Stage == snapshot.StageFirst {
			when = "when it connected to a peer for the first time mid-run (a lazy send/receive connection)"
		}
		why := "the peer is not reachable on the interface NCCL chose: a firewall, a missing route, or the wrong interface (set NCCL_SOCKET_IFNAME to the interface the hosts share; NCCL_DEBUG_SUBSYS=INIT,NET shows the one picked)"
		if loopback(first.e.Peer) {
			why = fmt.Sprintf("%s is a loopback, link-local or container-bridge address no other host can reach: NCCL picked the wrong interface; set NCCL_SOCKET_IFNAME to the interface the hosts share", peerIP(first.e.Peer))
		} else if strings.Contains(first.e.Detail, "refused") {
			why = "nothing listened at that address: the peer's process was not up (it failed before listening: look at its log) or a firewall rejects the port"
		} else if a := strayInterface(first.p); a != "" {
			why = fmt.Sprintf("NCCL on %s uses %s too, a link-local or container-bridge address no other host can reach (a veth, docker or virbr interface): set NCCL_SOCKET_IFNAME to the interface the hosts share", first.p.Host, a)
		}
		f := Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical, Culprits: culprits,
			Key: "connect:" + first.p.Key(), Victims: len(reporters)}
		f.Summary = fmt.Sprintf("%s could not connect to %s (%s) %s: %s",
			first.p.Name(), book.describe(first.e.Peer), orUnknown(first.e.Detail), when, why)
		if len(reporters) > 1 {
			f.Summary += fmt.Sprintf("; %d processes failed alike", len(reporters))
		}
		if len(peers) > 1 {
			f.Summary += fmt.Sprintf(", with %d peers in all", len(peers))
		}
		for _, c := range connects {
			f.addEvidence("%s: %s", c.p.Name(), c.e.Msg)
			f.culpritKeys = appendUnique(f.culpritKeys, c.p.Key())
		}
		if first.e.T != 0 {
			f.FaultAt = first.e.T.Time()
		}
		out = append(out, f)
	}
	if len(breaks) == 0 {
		return out
	}
	if len(out) > 0 {
		// A rank that could not connect gave up, and its peers' connections to it broke.
		for _, b := range breaks {
			out[0].addEvidence("then %s: %s", b.p.Name(), b.e.Msg)
		}
		return out
	}
	// Connections broke: the peer they lead to went away. Group by the peer's host; a
	// process's later breaks with other peers follow its first (its proxy and its other
	// connections close once one failed).
	byPeer := map[string]*Finding{}
	firstOf := map[*Proc]*Finding{}
	opsLogged := anyOpLogged(j)
	var order []string
	for _, b := range breaks {
		host := book.host(b.e.Peer)
		name := host
		if name == "" {
			name = peerName(b.e.Peer)
		}
		if name == "" {
			continue
		}
		f := byPeer[name]
		if first := firstOf[b.p]; f == nil && first != nil {
			first.addEvidence("then %s: %s", b.p.Name(), b.e.Msg)
			continue
		}
		if f == nil {
			culprit := incident.Culprit{Rank: -1, Host: name}
			var keys []string
			if ps := book.procs[host]; len(ps) == 1 {
				culprit = ps[0].Culprit()
				keys = []string{ps[0].Key()}
			}
			f = &Finding{Kind: incident.KindCrash, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{culprit},
				culpritKeys: keys, Key: "peer:" + name}
			when := "mid-run: the process there died (crash, OOM kill, or an abort after its own error; its log says which)"
			stage := b.e.Stage
			if b.p.Lines > 0 && knownStage(opsLogged, b.p, b.e) == snapshot.StageUnknown {
				// NCCL's own line, but nothing dates it: say what is certain.
				stage, when = snapshot.StageUnknown, "(when, these lines do not show): the process there went away or failed first (its log holds the first error)"
			}
			switch stage {
			case snapshot.StageInit:
				when = "while the ranks were initializing: the process there failed during init (its log holds the first error)"
			case snapshot.StageReady:
				when = "after the ranks had initialized: the process there went away (crash, OOM kill, or an abort after its own error)"
			case snapshot.StageUnknown:
				if b.p.Lines == 0 {
					when = "after the ranks had initialized: the process there went away (crash, OOM kill, or an abort after its own error)"
				}
			}
			who := describeHost(book, host, name)
			f.Summary = fmt.Sprintf("the connection from %s to %s broke (%s) %s", b.p.Name(), who, breakReason(b.e), when)
			if len(book.procs[host]) == 0 && stage != snapshot.StageInit && pathCanBreak(b.e) {
				// Seen from one end only: a reset or a timeout also comes from a path that
				// failed; a close by the peer (end of stream) and a broken pipe do not.
				f.Summary += "; no log of that node is among these, so a network path that failed (its NIC, a switch, its IB ports) cannot be ruled out: its log, dmesg and port counters tell"
			}
			if b.e.T != 0 {
				f.FaultAt = b.e.T.Time()
			}
			byPeer[name] = f
			order = append(order, name)
		}
		f.Victims++
		f.addEvidence("%s: %s", b.p.Name(), b.e.Msg)
		if firstOf[b.p] == nil {
			firstOf[b.p] = f
		}
	}
	for _, k := range order {
		out = append(out, *byPeer[k])
	}
	return out
}

// strayInterface is an address of a process's own that no other host can reach, when NCCL
// listed it among several ("Using [0]eno1:10.0.0.5<0> [1]veth1a2b:fe80::1%veth1a2b<0>"):
// NCCL may hand it to its peers, whose connects then time out.
func strayInterface(p *Proc) string {
	if len(p.Addrs) < 2 {
		return ""
	}
	for _, a := range p.Addrs {
		if loopback(a + "<0>") {
			return a
		}
	}
	return ""
}

// pathCanBreak says whether a broken connection's error is one a failed network path
// gives as well as a peer that went away: a reset, a timeout, an unreachable host.
func pathCanBreak(e snapshot.Event) bool {
	d := strings.ToLower(e.Detail)
	return e.Kind != snapshot.EventConnClosedRemote &&
		(strings.Contains(d, "reset") || strings.Contains(d, "timed out") || strings.Contains(d, "unreachable") || strings.Contains(d, "no route"))
}

func breakReason(e snapshot.Event) string {
	if e.Kind == snapshot.EventConnClosedRemote {
		return "closed by the remote peer"
	}
	return orUnknown(e.Detail)
}

// describeHost is "gpu-b (rank 3)" or "gpu-b (ranks 0,1)" or the bare name.
func describeHost(book *peerBook, host, name string) string {
	if host == "" {
		return name
	}
	if r := book.ranksOn(host); r != "" {
		return fmt.Sprintf("%s (%s)", host, r)
	}
	return host
}

func hasHost(cs []incident.Culprit, h string) bool {
	for _, c := range cs {
		if c.Host == h {
			return true
		}
	}
	return false
}
