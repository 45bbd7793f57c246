package detect

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/ncclwatch/watchdog/snapshot"
)

// What a message's finding says of whom: the placeholders of the table's summaries, and
// whether a witnessed death is confirmed by another source.

// value names the placeholders of an event's templates (see knowledge/messages.csv).
func (m *messages) value(ev *msgEvent) map[string]string {
	if ev.values != nil {
		return ev.values
	}
	p, e, b := ev.p, ev.e, m.blame(ev)
	host, peerHost, rank, culprit := p.Host, m.book.host(e.Peer), "?", p.Key()
	if host == "" || host == "?" {
		host = "a host these lines do not name"
	}
	if len(e.Ranks) > 0 {
		rank = strconv.Itoa(e.Ranks[0])
	}
	if len(b.own) > 0 {
		culprit = b.own[0]
	}
	origin := "inside NCCL"
	if e.Src == snapshot.SrcTorchWatchdog {
		origin = "under PyTorch's NCCL watchdog (its check of the GPU's work)"
	}
	ev.values = map[string]string{"who": p.Name(), "host": host, "proc": p.Key(), "hca": eventHCA(p, e),
		"port": orUnknown(eventPort(p, e)), "peer": m.book.describe(e.Peer), "peerhost": peerName(e.Peer),
		"peername": cmp.Or(peerHost, peerName(e.Peer)), "peeraddr": peerIP(e.Peer), "blame": b.key, "culprit": culprit,
		"detail": orUnknown(e.Detail), "text": cmp.Or(e.Detail, e.Msg, "unknown"), "msg": e.Msg, "code": strconv.Itoa(e.Code),
		"event": string(e.Kind), "src": orUnknown(e.Src), "status": snapshot.IBStatusName(e.Code), "result": ncclResultWords(e.Code),
		"errno": ofiWords(e), "ranks": rankWords(e.Ranks), "rank": rank, "when": whenWords(ev.stage, e), "origin": origin,
		"strayaddr": strayInterface(p), "wrongtype": socketTypeWords(e.Detail), "bytes": sizeWords(e.Bytes)}
	if r := m.book.ranksOn(peerHost); r != "" {
		ev.values["peerhost"] = peerHost + " (" + r + ")"
	} else if peerHost != "" {
		ev.values["peerhost"] = peerHost
	}
	return ev.values
}

// confirmed says whether a source other than its witnesses shows a witnessed culprit died:
// its own log's exit or fatal error, the launcher's failure record of its pid, a RAS report
// naming it dead.
func (m *messages) confirmed(b *building) bool {
	own := m.blame(b.lead).own
	dead := func(p *Proc) bool {
		if p.State == snapshot.ProcExited && !cleanExit(p) {
			return true
		}
		for _, e := range p.Events {
			switch e.Kind {
			case snapshot.EventRankExit, snapshot.EventSignal, snapshot.EventCudaError, snapshot.EventTorchNCCLError:
				return true
			}
		}
		return false
	}
	pids := map[int]bool{}
	for _, q := range m.j.Procs {
		if !slices.Contains(own, q.Key()) {
			continue
		}
		if !slices.Contains(b.reporters, q) && dead(q) {
			return true
		}
		if q.PID > 0 {
			pids[q.PID] = true
		}
	}
	for _, q := range m.j.Procs {
		for _, e := range q.Events {
			if e.Kind == snapshot.EventLauncherExit && e.Code != 0 && pids[e.PID] {
				return true
			}
		}
	}
	return false
}

// sizeWords writes a size in bytes as CUDA's messages do ("132.00 MiB"); "an unknown size"
// for none.
func sizeWords(n int64) string {
	if n <= 0 {
		return "an unknown size"
	}
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v, u = v/1024, u+1
	}
	if u == 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.2f %s", v, units[u])
}
