package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Diagnostics finds, offline, communicators whose initialization never completed. What
// NCCL says itself (its collective-mismatch check, NET/IB message-size mismatches) is the
// knowledge table's (messages.go).
func Diagnostics(j *Job) []Finding {
	if !j.Offline {
		return nil
	}
	return initHangs(j)
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
			Culprits: []incident.Culprit{}, Victims: len(stuck), Key: "init:" + g.ID, culpritKeys: keys, origin: knowledge.InitHang}
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
