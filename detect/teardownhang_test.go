package detect

import (
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// oneNodeNoInit is a node of four ranks whose NCCL lines carry no Init line (so no rank),
// and PyTorch's timeouts for the ranks in timedOut, known by their rank alone.
func oneNodeNoInit(closes map[int][]int, timedOut ...int) *Job {
	var procs []*Proc
	for d := 0; d < 4; d++ {
		p := &Proc{Process: snapshot.Process{Host: "node-x", PID: 7100 + d, Rank: -1, LocalRank: -1, CudaDev: d, Lines: 3}, Node: "node-x"}
		for _, lr := range closes[d] {
			p.Events = append(p.Events, snapshot.Event{Kind: snapshot.EventConnClosedLocal, LocalRank: lr, Msg: "[Service thread] Connection closed by localRank"})
		}
		procs = append(procs, p)
	}
	for _, r := range timedOut {
		procs = append(procs, &Proc{Process: snapshot.Process{Host: "?", Rank: r, LocalRank: -1, CudaDev: -1,
			Events: []snapshot.Event{{Kind: snapshot.EventTorchTimeout, Code: 88, Msg: "Watchdog caught collective operation timeout"}}}, Node: "?"})
	}
	j := NewJob("t", procs[0].LastLine.Time(), procs, nil)
	j.Offline = true
	return j
}

// TestCloseAfterOwnTimeoutIsTeardown: PyTorch aborts a timed-out rank's communicators, so
// the other local ranks see its connection close; that rank did not die, the hang leads.
// A close of a rank that logged no timeout is still a death.
func TestCloseAfterOwnTimeoutIsTeardown(t *testing.T) {
	t.Run("closes of the timed-out ranks", func(t *testing.T) {
		j := oneNodeNoInit(map[int][]int{1: {2, 0}, 3: {2, 0}, 0: {0}}, 2, 0, 1)
		f := wantOne(t, evaluate(j), incident.KindHang, "timed out 3 rank(s)", "rank(s) 3 logged no timeout")
		if len(f.Culprits) != 0 {
			t.Errorf("culprits %+v", f.Culprits)
		}
	})
	t.Run("a close of the rank that did not time out", func(t *testing.T) {
		j := oneNodeNoInit(map[int][]int{1: {3}, 2: {3}}, 2, 0, 1)
		fs := evaluate(j)
		if len(fs) == 0 || fs[0].Kind != incident.KindCrash || !strings.Contains(fs[0].Summary, "pid 7103") {
			t.Fatalf("want the death of local rank 3 first, got %+v", fs)
		}
	})
	t.Run("ranks PyTorch names beyond the node's", func(t *testing.T) {
		// Rank 9 cannot be on this node: the node is not the whole job, and local rank 2
		// is not known to be rank 2.
		j := oneNodeNoInit(map[int][]int{1: {2}}, 2, 9)
		fs := evaluate(j)
		if len(fs) == 0 || fs[0].Kind != incident.KindCrash {
			t.Fatalf("want a death, got %+v", fs)
		}
	})
}

// TestCollNetFallbackHandlesItsBreadcrumbs: NCCL fell back from CollNet, so the breadcrumbs
// of that set-up are no failed init; the SHARP error is a warning.
func TestCollNetFallbackHandlesItsBreadcrumbs(t *testing.T) {
	crumb := snapshot.Event{Kind: snapshot.EventBreadcrumb, Code: 2, Src: "transport.cc", Stage: snapshot.StageInit, Msg: "transport.cc:291 -> 2"}
	sharp := snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnCollNet, Msg: "NET/IB : SHARP coll init error: Cannot create SHARP job(-11)"}
	fallback := snapshot.Event{Kind: snapshot.EventWarn, Code: snapshot.WarnCollNetFallback, Msg: "Cannot initialize CollNet, using point-to-point network instead"}
	j := offlineJob(map[int][]snapshot.Event{0: {fallback}, 1: {crumb}, 2: {sharp}})
	for _, p := range j.Procs {
		p.Comms = nil
	}
	f := wantOne(t, evaluate(j), incident.KindConfig, "fell back", "NCCL_COLLNET_ENABLE=0")
	if f.Severity != incident.SeverityWarning {
		t.Errorf("severity %s", f.Severity)
	}
	t.Run("without the fallback the breadcrumbs are a failure", func(t *testing.T) {
		j := offlineJob(map[int][]snapshot.Event{1: {crumb}})
		for _, p := range j.Procs {
			p.Comms = nil
		}
		wantOne(t, evaluate(j), incident.KindCrash, "without a warning")
	})
}
