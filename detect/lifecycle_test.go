package detect

import (
	"slices"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

func TestLifecycle(t *testing.T) {
	l := NewLifecycle(5 * time.Second)
	hang := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Key: "rank:node1:101",
		Culprits: []incident.Culprit{{Rank: 1, Host: "node1", PID: 101}}, Summary: "rank 1 stopped"}
	notify, _ := l.Update("j", []Finding{hang}, t0)
	if len(notify) != 1 || notify[0].State != incident.StateOpen || notify[0].ID == "" {
		t.Fatalf("open: %+v", notify)
	}
	id := notify[0].ID
	// The same root cause seen again, with more victims: no new notification.
	hang.Victims = 511
	if notify, _ = l.Update("j", []Finding{hang}, t0.Add(time.Second)); len(notify) != 0 {
		t.Fatalf("victims do not change the root cause: %+v", notify)
	}
	// The culprit dies: the same incident upgrades to crash.
	crash := hang
	crash.Kind = incident.KindCrash
	notify, _ = l.Update("j", []Finding{crash}, t0.Add(2*time.Second))
	if len(notify) != 1 || notify[0].ID != id || notify[0].Kind != incident.KindCrash || notify[0].Revision != 2 {
		t.Fatalf("upgrade: %+v", notify)
	}
	// Clear for less than ResolveAfter: still open; then resolved once.
	if notify, _ = l.Update("j", nil, t0.Add(3*time.Second)); len(notify) != 0 {
		t.Fatalf("resolved too early: %+v", notify)
	}
	notify, _ = l.Update("j", nil, t0.Add(9*time.Second))
	if len(notify) != 1 || notify[0].State != incident.StateResolved || notify[0].ID != id {
		t.Fatalf("resolve: %+v", notify)
	}
	if notify, _ = l.Update("j", nil, t0.Add(20*time.Second)); len(notify) != 0 {
		t.Fatalf("resolved twice: %+v", notify)
	}
	// A restored lifecycle (failover) continues an open incident without reopening it.
	l2 := NewLifecycle(5 * time.Second)
	open, _ := l.Update("j", []Finding{hang}, t0.Add(30*time.Second))
	l2.Restore(open)
	if notify, _ = l2.Update("j", []Finding{hang}, t0.Add(31*time.Second)); len(notify) != 0 {
		t.Fatalf("after failover the open incident must continue silently: %+v", notify)
	}
	if got := l2.Incidents("j"); len(got) != 1 || got[0].ID != open[0].ID {
		t.Fatalf("incidents after restore %+v", got)
	}
}

// TestVagueViewKeepsThePreciseCulprit: live on one H100, a two-rank mismatch first named
// rank 1 (its op broke the pattern); once the ops before it aged out of the history, the
// same mismatch could no longer tell the ranks apart and named both. The incident keeps
// rank 1. A precise view replaces a vague one.
func TestVagueViewKeepsThePreciseCulprit(t *testing.T) {
	l := NewLifecycle(5 * time.Second)
	mism := func(vague bool, ranks ...int) Finding {
		f := Finding{Kind: incident.KindMismatch, Severity: incident.SeverityCritical, Key: "mismatch:dp", vague: vague,
			Ops: map[string]incident.Op{"0": {Op: "AllReduce"}, "1": {Op: "Broadcast"}}}
		for _, r := range ranks {
			f.Culprits = append(f.Culprits, incident.Culprit{Rank: r})
		}
		return f
	}
	steps := []struct {
		f    Finding
		want []int
	}{
		{mism(true, 1, 3), []int{1, 3}}, // first seen vague: both
		{mism(false, 1), []int{1}},      // a precise view replaces it
		{mism(true, 1, 3), []int{1}},    // a vague one does not
	}
	for i, s := range steps {
		l.Update("j", []Finding{s.f}, t0.Add(time.Duration(i)*time.Second))
		got := l.Incidents("j")
		var ranks []int
		for _, c := range got[0].Culprits {
			ranks = append(ranks, c.Rank)
		}
		if len(got) != 1 || !slices.Equal(ranks, s.want) {
			t.Fatalf("step %d: culprits %v, want %v", i, ranks, s.want)
		}
	}
}

// A root that comes back after its incident resolved (a flapping link, a rank that pauses
// again) reopens that incident as its next episode, and then holds it open through quiet
// spells as long as the ones it showed: one incident, not one per episode.
func TestRecurringRootIsOneIncident(t *testing.T) {
	l := NewLifecycle(5 * time.Second)
	link := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Key: "link:node1:node2",
		Summary: "slow link", Episode: &incident.Episode{Onset: t0}}
	var opened, reopened, resolved []string
	at := func(s int, present bool) {
		var fs []Finding
		if present {
			fs = []Finding{link}
		}
		notify, _ := l.Update("j", fs, t0.Add(time.Duration(s)*time.Second))
		for _, inc := range notify {
			switch {
			case inc.State == incident.StateResolved:
				resolved = append(resolved, inc.ID)
			case inc.Revision == 1:
				opened = append(opened, inc.ID)
			default:
				reopened = append(reopened, inc.ID)
			}
		}
	}
	// Episodes of 2 s every 10 s, for 60 s.
	for s := 0; s <= 60; s++ {
		at(s, s%10 < 2)
	}
	if len(opened) != 1 || len(reopened) != 1 || reopened[0] != opened[0] || len(resolved) != 1 {
		t.Fatalf("opened %v reopened %v resolved %v: want one incident, reopened once, resolved once", opened, reopened, resolved)
	}
	incs := l.Incidents("j")
	if len(incs) != 1 || incs[0].State != incident.StateOpen || len(incs[0].Episodes) != 1 {
		t.Fatalf("incidents %+v", incs)
	}
	// Quiet for well past its longest spell: resolved once more, still one incident.
	for s := 61; s <= 100; s++ {
		at(s, false)
	}
	if incs = l.Incidents("j"); len(incs) != 1 || incs[0].State != incident.StateResolved || len(resolved) != 2 {
		t.Fatalf("after the flapping stopped: %+v resolved %v", incs, resolved)
	}
}

// One root is one incident whatever its picture: a rank that stalled (a hang) and now only
// lags (a straggler, the same key) stays the hang it was; one that then dies becomes a crash.
func TestOneRootKeepsItsWorstKind(t *testing.T) {
	l := NewLifecycle(5 * time.Second)
	f := func(kind incident.Kind, sev incident.Severity) Finding {
		return Finding{Kind: kind, Severity: sev, Key: "rank:node1:101", Culprits: []incident.Culprit{{Rank: 1, Host: "node1", PID: 101}},
			Summary: string(kind)}
	}
	var kinds []incident.Kind
	for i, g := range []Finding{f(incident.KindHang, incident.SeverityWarning), f(incident.KindStraggler, incident.SeverityWarning),
		f(incident.KindCrash, incident.SeverityCritical)} {
		l.Update("j", []Finding{g}, t0.Add(time.Duration(i)*time.Second))
		incs := l.Incidents("j")
		if len(incs) != 1 {
			t.Fatalf("incidents %+v", incs)
		}
		kinds = append(kinds, incs[0].Kind)
	}
	if want := []incident.Kind{incident.KindHang, incident.KindHang, incident.KindCrash}; !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
}

// A link root is found piecewise: a slow pair, then the NIC of one end, is one incident (live
// on one H200, a slow NIC paged as the pair and again as the NIC); another pair is another.
func TestALinkSeenMorePreciselyIsOneIncident(t *testing.T) {
	l := NewLifecycle(5 * time.Second)
	end := func(r int) incident.Culprit { return incident.Culprit{Rank: r, Host: "vm", PID: 100 + r} }
	link := func(key string, ends ...int) Finding {
		f := Finding{Kind: incident.KindLink, Severity: incident.SeverityWarning, Key: key, Summary: key}
		for _, r := range ends {
			f.Culprits = append(f.Culprits, end(r))
		}
		return f
	}
	l.Update("j", []Finding{link("link:pair:0->1", 0, 1)}, t0)
	l.Update("j", []Finding{link("link:nic:0", 0)}, t0.Add(time.Second))
	l.Update("j", []Finding{link("link:nic:0", 0), link("link:pair:2->3", 2, 3)}, t0.Add(2*time.Second))
	incs := l.Incidents("j")
	if len(incs) != 2 {
		t.Fatalf("incidents %+v", incs)
	}
	for _, inc := range incs {
		if inc.State != incident.StateOpen {
			t.Fatalf("%s %s", inc.Key, inc.State)
		}
	}
}
