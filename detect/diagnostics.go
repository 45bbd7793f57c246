package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Diagnostics turns what NCCL says itself into findings, with the cause NCCL's maintainers
// give: NCCL's own collective-mismatch check, NET/IB message-size mismatches (a transport or
// configuration fault), communicators whose initialization never completed (offline).
func Diagnostics(j *Job) []Finding {
	var out []Finding
	byRank := map[int]*Proc{}
	for _, p := range j.Procs {
		if p.Rank >= 0 {
			byRank[p.Rank] = p
		}
	}
	seen := map[string]bool{}
	for _, p := range j.Procs {
		for _, e := range p.Events {
			switch e.Kind {
			case snapshot.EventCollMismatch:
				culprit := p
				if q := byRank[e.Code]; q != nil {
					culprit = q
				}
				key := "nccl-mismatch:" + culprit.Key()
				if seen[key] {
					continue
				}
				seen[key] = true
				f := Finding{Kind: incident.KindMismatch, Severity: incident.SeverityCritical,
					Culprits: []incident.Culprit{culprit.Culprit()}, culpritKeys: []string{culprit.Key()}, Key: key}
				what := "detected a mismatched collective"
				if !e.Fatal {
					what = "suspects a hang caused by a mismatched collective"
				}
				f.Summary = fmt.Sprintf("NCCL's own check on %s %s at and around rank %d: the ranks' collective calls differ there (check the calls of rank %d)",
					p.Name(), what, e.Code, e.Code)
				f.addEvidence("%s: %s", p.Name(), e.Msg)
				out = append(out, f)
			case snapshot.EventNetSizeMismatch:
				key := "net-size:" + p.Host
				if seen[key] {
					continue
				}
				seen[key] = true
				f := Finding{Kind: incident.KindLink, Severity: incident.SeverityCritical,
					Culprits: []incident.Culprit{{Rank: -1, Host: p.Host}}, culpritKeys: []string{p.Key()}, Key: key}
				f.Summary = fmt.Sprintf("NET/IB on %s reports that the two ends of a connection disagree on a message size (peer %s): NCCL's maintainers trace this to the transport or the configuration (different NCCL versions or NCCL_PROTO/NCCL_ALGO/plugin settings between ranks), not to the application's calls",
					p.Name(), orUnknown(e.Peer))
				if strings.Contains(e.Msg, "NET/Socket") {
					// The socket transport's own message names both causes, and a pipeline
					// stage that sends another shape than its peer receives is a common one.
					f.Summary = fmt.Sprintf("NET/Socket on %s received a message of another size than it expected (peer %s): the ranks' calls differ there (a send and a receive of different sizes, as between pipeline stages) or their settings do (NCCL versions, NCCL_PROTO/NCCL_ALGO); compare what the two ranks called at that moment",
						p.Name(), orUnknown(e.Peer))
				}
				f.addEvidence("%s: %s", p.Name(), e.Msg)
				out = append(out, f)
			}
		}
	}
	if j.Offline {
		out = append(out, initHangs(j)...)
	}
	return out
}

// initHangs finds communicators whose Init START has no COMPLETE: initialization hung, on
// the ranks that started it, waiting for the ranks that never arrived.
// initEndGap is how soon after Init START a log must end, with nothing else logged, for
// the end to be read as possibly the copy's rather than the process's.
const initEndGap = 10 * time.Second

// logsEndAtInit reports, offline, whether the log of every rank stuck in g's initialization
// simply stops soon after its Init START: no retried connect, no error, no timeout, no line
// later than initEndGap. Such an end cannot tell a hang from a crash or a cut copy. It
// returns the longest of those gaps.
func logsEndAtInit(j *Job, g *Group) (time.Duration, bool) {
	if !j.Offline {
		return 0, false
	}
	longest, any := time.Duration(0), false
	for _, m := range g.Members {
		if m.Comm.State != snapshot.CommInit {
			continue
		}
		start, last := m.Comm.InitAt, m.Proc.LastLine
		if start == 0 || last < start {
			return 0, false
		}
		gap := last.Time().Sub(start.Time())
		if gap > initEndGap {
			return 0, false
		}
		for _, e := range m.Proc.Events {
			if e.T == 0 || e.T >= start {
				return 0, false
			}
		}
		longest, any = max(longest, gap), true
	}
	return longest.Round(time.Second), any
}

func initHangs(j *Job) []Finding {
	var out []Finding
	for _, g := range j.Groups {
		var stuck []string
		var keys []string
		present := map[int]bool{}
		for _, m := range g.Members {
			present[m.Comm.Rank] = true
			if m.Comm.State == snapshot.CommInit {
				stuck = append(stuck, m.Proc.Name())
				keys = append(keys, m.Proc.Key())
			}
		}
		if len(stuck) == 0 {
			continue
		}
		var missing []string
		for r := 0; r < g.NRanks && len(missing) < 16; r++ {
			if !present[r] {
				missing = append(missing, fmt.Sprint(r))
			}
		}
		f := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Comm: g.ID,
			Culprits: []incident.Culprit{}, Victims: len(stuck), Key: "init:" + g.ID, culpritKeys: keys}
		f.Summary = fmt.Sprintf("initialization of communicator %s (%d ranks) did not complete on %d rank(s)", shortComm(g.ID), g.NRanks, len(stuck))
		if len(missing) > 0 {
			f.Summary += fmt.Sprintf("; ranks %s never logged joining it: they are the ones to look at", strings.Join(missing, ","))
			if after, ok := logsEndAtInit(j, g); ok {
				f.Summary += fmt.Sprintf(" (the log of each rank that waited ends at most %s after its Init START, with nothing after it: it hung there, died, or the copy was cut)", after)
			}
		} else {
			f.Summary += "; every rank started it: suspect the network between them (bootstrap, firewall, interface)"
		}
		for _, s := range stuck {
			f.addEvidence("%s logged Init START and no Init COMPLETE", s)
		}
		for _, m := range g.Members {
			if m.Comm.State != snapshot.CommInit {
				continue
			}
			// Connects it kept retrying say whom it waited for.
			for _, e := range m.Proc.Events {
				if e.Kind == snapshot.EventSocketConnect && !e.Fatal && e.Peer != "" {
					f.addEvidence("%s kept retrying to connect to %s (%s)", m.Proc.Name(), e.Peer, orUnknown(e.Detail))
					break
				}
			}
		}
		out = append(out, f)
	}
	return out
}
