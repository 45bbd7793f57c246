package detect

import (
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestFlightRecorder: the analyzer's report pasted alone (a rank-less process) names the
// culprits of the first wrong collective, or the ranks that never joined it; the later
// collectives it reports are evidence, and a long culprit list is hedged and bounded.
func TestFlightRecorder(t *testing.T) {
	report := func(evs ...snapshot.Event) *Job {
		p := &Proc{Process: snapshot.Process{Host: "?", Rank: -1, LocalRank: -1, CudaDev: -1, Events: evs}}
		j := NewJob("j", t0, []*Proc{p}, nil)
		j.Offline = true
		return j
	}
	head := func(seq int) snapshot.Event { return snapshot.Event{Kind: snapshot.EventFRCollective, Code: seq} }
	culprit := snapshot.Event{Kind: snapshot.EventFRCulprit, Ranks: []int{6, 9}, Code: 2, Msg: "error msg: Culprit rank 6; ...",
		Detail: "SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[8]]' does not match found input sizes: '[[16]]'"}
	f := wantOne(t, evaluate(report(head(17), culprit, head(18), culprit)), incident.KindMismatch, "collective 17", "ranks 6,9", "[[16]]")
	if len(f.Culprits) != 2 || f.Culprits[0].Rank != 6 || f.Culprits[1].Rank != 9 || !strings.Contains(strings.Join(f.Evidence, "\n"), "collective 18") {
		t.Errorf("culprits %+v evidence %q", f.Culprits, f.Evidence)
	}

	missing := snapshot.Event{Kind: snapshot.EventFRMissing, Ranks: []int{3}, Code: 1, Msg: "missing ranks: {3}"}
	f = wantOne(t, evaluate(report(head(5), missing)), incident.KindHang, "collective 5", "rank 3", "no entry")
	if len(f.Culprits) != 1 || f.Culprits[0].Rank != 3 {
		t.Errorf("culprits %+v", f.Culprits)
	}

	var ranks []int
	for r := range snapshot.MaxFRRanks {
		ranks = append(ranks, r+1)
	}
	many := snapshot.Event{Kind: snapshot.EventFRCulprit, Ranks: ranks, Code: 127, Detail: "COLLECTIVE_STATE_MISMATCH"}
	f = wantOne(t, evaluate(report(head(2), many)), incident.KindMismatch, "127 ranks (1,2,3,4,5,6,7,8,...)", "first rank")
	if len(f.Culprits) != frNamed {
		t.Errorf("%d culprits, want %d", len(f.Culprits), frNamed)
	}
}
