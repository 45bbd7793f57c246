package detect

import (
	"fmt"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// Offline tells the whole run: a single stall the whole job waited for, long enough to be a
// hang (hang_floor), that ended and let the job go on is a resolved hang: "rank 0 stalled
// the job for 31 s from 12:03:10". Live, the hang side named it while it lasted.

// resolvedStalls are the booked waits of at least floor that no episode of their root
// covers, one finding each.
func (l *Ledger) resolvedStalls(j *Job, floor time.Duration, procs map[string]*Proc, episodes []Finding) []Finding {
	var out []Finding
	for id, gl := range l.groups {
		for _, sp := range gl.spans {
			if time.Duration(sp.end-sp.start)*time.Microsecond < floor {
				continue
			}
			p := procs[gl.keys[sp.root]]
			if p == nil || episodeCovers(episodes, p.Key(), sp) || stalledAlready(out, p.Key(), sp) {
				continue
			}
			d := time.Duration(sp.end-sp.start) * time.Microsecond
			f := Finding{Kind: incident.KindHang, Severity: incident.SeverityWarning, Comm: id, Seq: sp.seq,
				Culprits: []incident.Culprit{p.Culprit()}, culpritKeys: []string{p.Key()}, Cause: incident.CauseHostStalled,
				Key: fmt.Sprintf("stall:%s:%d", p.Key(), sp.seq), FaultAt: sp.start.Time(),
				Episode: &incident.Episode{Onset: sp.start.Time(), End: sp.end.Time(), Lost: d, Steps: 1}}
			f.Summary = fmt.Sprintf("%s stalled the job for %s from %s, then went on (a hang that resolved): the others waited for it at op %d of communicator %s",
				p.Name(), d.Round(100*time.Millisecond), fmtTime(sp.start.Time()), sp.seq, shortComm(id))
			out = append(out, f)
		}
	}
	return out
}

// episodeCovers says whether an episode finding of root key spans the wait.
func episodeCovers(fs []Finding, key string, sp lateSpan) bool {
	for _, f := range fs {
		if f.Episode == nil || len(f.culpritKeys) == 0 || f.culpritKeys[0] != key {
			continue
		}
		for _, e := range append([]incident.Episode{*f.Episode}, f.Episodes...) {
			if !e.Onset.After(sp.end.Time()) && (e.End.IsZero() || !e.End.Before(sp.start.Time())) {
				return true
			}
		}
	}
	return false
}

// stalledAlready says whether a resolved stall of root key overlaps the wait (the same stall
// seen on another communicator).
func stalledAlready(fs []Finding, key string, sp lateSpan) bool {
	for _, f := range fs {
		if f.culpritKeys[0] == key && !f.Episode.Onset.After(sp.end.Time()) && !f.Episode.End.Before(sp.start.Time()) {
			return true
		}
	}
	return false
}
