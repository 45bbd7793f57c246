package detect

import (
	"fmt"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
)

// Finding is one rule's verdict about one root cause.
type Finding struct {
	Kind       incident.Kind
	Severity   incident.Severity
	Comm       string
	Seq        int64
	Culprits   []incident.Culprit
	Victims    int
	Ops        map[string]incident.Op
	LagSeconds float64
	Summary    string
	Evidence   []string
	// FaultAt estimates when the condition began (zero when unknown).
	FaultAt time.Time
	// Cause is the root's cause class, from its own evidence; Episode the span of a
	// slowdown (or a stall that resolved) and the share of the job's time it cost.
	Cause   incident.Cause
	Episode *incident.Episode
	// Episodes are the root's later episodes, offline (live, the Lifecycle lists them).
	Episodes []incident.Episode
	// Key identifies the root cause across evaluations: equal keys are one incident.
	Key string
	// Teardown is set on the finding that stands for a job's teardown when nothing earlier
	// in the same evaluation explains it: the live Lifecycle folds it into an incident
	// already open for the job rather than opening one.
	Teardown *Teardown
	// culpritKeys are the host:pid of culprit processes, for merging findings.
	culpritKeys []string
	// exitOnly: a crash known only from the process's exit, which no peer and no launcher
	// reported as a failure.
	exitOnly bool
	// measured marks a finding proven by the profiler plugin's completion state, which
	// supersedes one inferred from log lines about the same root cause.
	measured bool
	// comms are the communicators a finding spans beyond Comm (an order inversion's two).
	comms []string
	// role is the part a finding plays in the explains table (knowledge/explains.csv): the
	// knowledge table's row says it, Evaluate files the other rules' by what they find.
	role knowledge.Role
	// origin tells it from others of its role there (an init that failed silently, one
	// that hung, a message size two ends disagree on, the ranks' NCCL versions).
	origin knowledge.Origin
	// witness: the finding is what one process saw of another's failure (a closed
	// connection, a remote error), not confirmed by the culprit's own evidence.
	witness bool
	// vague: the rule could not tell the culprit from its peers (a tie nothing broke), so
	// it names them all; a later view like it does not replace a precise one.
	vague bool
}

// Teardown is a job's teardown: Ranks rank processes on Hosts hosts died between First
// and Last.
type Teardown struct {
	Ranks, Hosts int
	First, Last  time.Time
}

// teardownPrefix starts every teardown evidence line, so a newer one replaces it.
const teardownPrefix = "then the job was torn down: "

// Evidence is the line that tells an incident what followed it.
func (t *Teardown) Evidence() string {
	return fmt.Sprintf("%s%d ranks on %d hosts exited within %s (from %s)",
		teardownPrefix, t.Ranks, t.Hosts, t.Last.Sub(t.First).Round(time.Millisecond), fmtTime(t.First))
}

func (f *Finding) addEvidence(format string, args ...any) {
	if len(f.Evidence) < 24 {
		f.Evidence = append(f.Evidence, fmt.Sprintf(format, args...))
	}
}

// Incident renders a finding as a new open incident of a job.
func (f *Finding) Incident(job string, now time.Time) incident.Incident {
	return incident.Incident{
		Key: f.Key, Kind: f.Kind, State: incident.StateOpen, Severity: f.Severity, Job: job, Comm: f.Comm, Seq: f.Seq,
		Culprits: f.Culprits, Victims: f.Victims, Summary: f.Summary, Evidence: f.Evidence, Ops: f.Ops,
		LagSeconds: f.LagSeconds, OpenedAt: now, LastSeen: now, FaultAt: f.FaultAt, Cause: f.Cause, Episode: f.Episode,
		Episodes: f.Episodes,
	}
}

// kindOrder ranks kinds from the one that explains most: a setup NCCL cannot work with is
// found first (everything else follows from it), a straggler late.
var kindOrder = map[incident.Kind]int{incident.KindConfig: 0, incident.KindCrash: 1, incident.KindMismatch: 2,
	incident.KindOrderInversion: 3, incident.KindHang: 4, incident.KindP2PMismatch: 5, incident.KindStuckInFlight: 6,
	incident.KindLink: 7, incident.KindGPU: 8, incident.KindLostNode: 9, incident.KindStraggler: 10,
	incident.KindMonitoring: 11, incident.KindNCCLWarning: 12}

// sortFindings orders findings most severe first, then by kind and key.
func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(a, b int) bool {
		if ra, rb := fs[a].Severity.Rank(), fs[b].Severity.Rank(); ra != rb {
			return ra < rb
		}
		if oa, ob := kindOrder[fs[a].Kind], kindOrder[fs[b].Kind]; oa != ob {
			return oa < ob
		}
		return fs[a].Key < fs[b].Key
	})
}
