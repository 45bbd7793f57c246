package analyze

import (
	"testing"

	"github.com/ncclwatch/watchdog/incident"
)

// TestRecurring: a GPU throttling in two runs is named, with both runs; a mismatch on the
// same host and a part seen in one run only are not.
func TestRecurring(t *testing.T) {
	gpu := func(host string, pid int) FindingReport {
		return FindingReport{Kind: incident.KindStraggler, Cause: incident.CauseGPUThrottled,
			Culprits: []incident.Culprit{{Rank: 3, Host: host, PID: pid}}}
	}
	runs := []Run{
		{Name: "job-a", Report: &Report{Ranks: []RankReport{{Rank: 3, Host: "n7", PID: 10, BusID: "1b000"}},
			Findings: []FindingReport{gpu("n7", 10), {Kind: incident.KindMismatch, Cause: incident.CauseMismatch,
				Culprits: []incident.Culprit{{Rank: 1, Host: "n7"}}}}}},
		{Name: "job-b", Report: &Report{Ranks: []RankReport{{Rank: 5, Host: "n7", PID: 22, BusID: "1b000"}},
			Findings: []FindingReport{gpu("n7", 22), {Kind: incident.KindMismatch, Cause: incident.CauseMismatch,
				Culprits: []incident.Culprit{{Rank: 1, Host: "n7"}}}}}},
		{Name: "job-c", Report: &Report{Findings: []FindingReport{{Kind: incident.KindLink, Cause: incident.CauseLink,
			Culprits: []incident.Culprit{{Rank: -1, Host: "n9", Port: "mlx5_0:1"}}}}}},
	}
	got := Recurring(runs)
	if len(got) != 1 || got[0].Part.Key() != "gpu:n7:1b000" || len(got[0].Runs) != 2 || got[0].Findings != 2 {
		t.Fatalf("recurring %+v; want GPU 1b000 of n7 in job-a and job-b", got)
	}
}
