package detect

import (
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// A rank that stopped issuing while alive is named at once as a warning and pages once its
// wait outlasts the page window; a stopped, dead or long-waited one pages at once.
func TestCertaintyDecidesSeverity(t *testing.T) {
	period := 100 * time.Millisecond
	stopped := 3 * time.Second // rank 1's last op
	for _, tc := range []struct {
		name  string
		after time.Duration // since rank 1 stopped
		stat  snapshot.SchedState
		exit  bool
		pause time.Duration // the longest pause the job recovered from
		want  incident.Severity
	}{
		{"alive, just named", 11 * time.Second, snapshot.SchedSleeping, false, 0, incident.SeverityWarning},
		{"alive, past page_after", 31 * time.Second, snapshot.SchedSleeping, false, 0, incident.SeverityCritical},
		{"stopped by a signal", 11 * time.Second, snapshot.SchedStopped, false, 0, incident.SeverityCritical},
		{"exited", 11 * time.Second, "", true, 0, incident.SeverityCritical},
		{"alive, past page_after but inside 3x the job's own pauses", 31 * time.Second, snapshot.SchedSleeping, false, 15 * time.Second, incident.SeverityWarning},
		{"alive, past 3x the job's own pauses", 46 * time.Second, snapshot.SchedSleeping, false, 15 * time.Second, incident.SeverityCritical},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r1 := rank(1, 27, period, 0, nil)
			r1.Stat = tc.stat
			if tc.exit {
				r1.State, r1.ExitedAt = snapshot.ProcExited, us(stopped+time.Second)
			}
			j := job(stopped-300*time.Millisecond+tc.after, rank(0, 30, period, 0, nil), r1, rank(2, 30, period, 0, nil))
			j.Ledger = NewLedger()
			j.Ledger.longestPause = tc.pause.Microseconds()
			var got []Finding
			for _, f := range Evaluate(j, DefaultConfig(), TimingOK).Findings {
				if f.Kind == incident.KindHang || f.Kind == incident.KindCrash {
					got = append(got, f)
				}
			}
			if len(got) != 1 || got[0].Severity != tc.want || culpritRanks(got[0])[0] != 1 {
				t.Fatalf("want one finding on rank 1 at %s, got %+v", tc.want, got)
			}
		})
	}
}

// A rank that destroyed its process group and lives on (the plugin keeps its freed
// communicator as destroyed) is the root where its peers wait, certain: it will never join.
func TestALiveRankThatLeftItsCommunicatorIsACertainRoot(t *testing.T) {
	ps := plugin4(nil, []int{2})
	ps[2].Comms[0].State = snapshot.CommDestroyed
	ps[2].State = snapshot.ProcRunning
	ps[2].Stat = snapshot.SchedSleeping
	res := Evaluate(mjob(7*time.Second, ps...), DefaultConfig(), TimingOK)
	if len(res.Findings) != 1 {
		t.Fatalf("findings %+v", res.Findings)
	}
	f := res.Findings[0]
	if got := culpritRanks(f); len(got) != 1 || got[0] != 2 || f.Cause != incident.CauseApplication || f.Severity != incident.SeverityCritical {
		t.Fatalf("culprits %v cause %s severity %s: %s", got, f.Cause, f.Severity, f.Summary)
	}
}

// Its peers' closed connections to the rank that left are witnesses of that root: one
// finding, not a culprit-less crash beside it (live on one H200, exit_early and
// pg_destroyed paged both).
func TestWitnessesOfARankThatLeftFoldIntoIt(t *testing.T) {
	ps := plugin4(nil, []int{2})
	ps[2].Comms[0].State = snapshot.CommDestroyed
	ps[2].State, ps[2].Stat = snapshot.ProcRunning, snapshot.SchedSleeping
	for _, r := range []int{0, 1} {
		ps[r].Events = append(ps[r].Events, snapshot.Event{Kind: snapshot.EventConnClosedRemote, T: us(4 * time.Second),
			Peer: "localhost<35882>", Stage: snapshot.StageRun, Msg: "socketProgress: Connection closed by remote peer localhost<35882>"})
	}
	for _, now := range []time.Duration{7 * time.Second, 30 * time.Second} {
		res := Evaluate(mjob(now, ps...), DefaultConfig(), TimingOK)
		if len(res.Findings) != 1 || culpritRanks(res.Findings[0])[0] != 2 {
			t.Fatalf("at %s: %+v", now, res.Findings)
		}
	}
}
