package detect

import (
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Certainty decides severity. A page that names a rank which only paused (an evaluation, a
// checkpoint) is as bad as a miss, so a wait pages at once only where its root is certain:
// the process is dead or stopped (state T, t, Z) or destroyed its communicator, or the evidence is a mismatch, an order
// inversion, a GPU fault or a failed setup. A live rank that is only not issuing, or a
// collective that does not finish, is named at once as a warning and pages once the wait
// outlasts the page window (HangConfig.PageWindow): the Lifecycle escalates the open
// incident, it never opens a second one.

// certainCauses are the causes whose evidence leaves no doubt that the job will not move.
var certainCauses = map[incident.Cause]bool{
	incident.CauseDied: true, incident.CauseMismatch: true, incident.CauseOrder: true,
	incident.CauseGPUFault: true, incident.CauseInit: true, incident.CauseSetup: true,
}

// gradeWaits sets the severity of the open-wait findings (hangs, stuck collectives) of a
// live evaluation from their certainty and how long they have lasted. Offline, a log that
// ends with ranks waiting is a hang whose end the job never saw: certain.
func gradeWaits(j *Job, cfg HangConfig, fs []Finding) {
	if j.Offline {
		return
	}
	var procs map[string]*Proc // built for the first wait to grade: most evaluations have none
	window := cfg.PageWindow(j.Ledger.LongestPause())
	for i := range fs {
		f := &fs[i]
		if f.Severity != incident.SeverityCritical || (f.Kind != incident.KindHang && f.Kind != incident.KindStuckInFlight) {
			continue
		}
		if procs == nil {
			procs = make(map[string]*Proc, len(j.Procs))
			for _, p := range j.Procs {
				procs[p.Key()] = p
			}
		}
		if certain(f, procs) || f.FaultAt.IsZero() {
			continue
		}
		waited := j.Now.Sub(f.FaultAt)
		if waited >= window {
			continue
		}
		f.Severity = incident.SeverityWarning
		f.addEvidence("a warning until it lasts %s (page_after, or %g times the longest pause the job recovered from): the rank is alive and may resume; it pages then",
			window.Round(time.Second), cfg.PauseK)
	}
}

// certain says whether a finding's root is sure not to resume by itself.
func certain(f *Finding, procs map[string]*Proc) bool {
	if certainCauses[f.Cause] {
		return true
	}
	for _, k := range f.culpritKeys {
		p := procs[k]
		if p == nil {
			continue
		}
		if gone, _ := left(p, f.Comm); gone || p.State == snapshot.ProcExited {
			return true
		}
		switch p.Stat {
		case snapshot.SchedStopped, snapshot.SchedTraced, snapshot.SchedZombie:
			return true
		}
	}
	return false
}

// LongestPause is the longest wait the job recovered from: a span the ledger booked once
// every member went on. Zero for a nil ledger (offline, a fresh job).
func (l *Ledger) LongestPause() time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.longestPause) * time.Microsecond
}
