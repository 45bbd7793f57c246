package detect

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// torchJob is a job known only from PyTorch's lines: one process per rank, its events.
func torchJob(events ...[]snapshot.Event) *Job {
	var procs []*Proc
	for r, evs := range events {
		procs = append(procs, &Proc{Process: snapshot.Process{Host: "h" + strconv.Itoa(r), Rank: r, LocalRank: -1, CudaDev: -1,
			Events: evs}, Node: "?"})
	}
	j := NewJob("j", t0, procs, nil)
	j.Offline = true
	return j
}

func heartbeat(queued int) []snapshot.Event {
	return []snapshot.Event{{Kind: snapshot.EventTorchStuck, Code: queued, Comm: "0", Fatal: true,
		Msg: "[PG 0 Rank r] Heartbeat monitor timed out! workMetaList_.size()=" + strconv.Itoa(queued)},
		{Kind: snapshot.EventTorchStuck, Code: -1, Comm: "0", Fatal: true, Msg: "ProcessGroupNCCL's watchdog got stuck for 600 seconds"}}
}

// TestTorchStuck: the heartbeat monitor's lines say the job hung; a rank with clearly fewer
// queued works than all its peers stopped enqueuing first and is the suspect, hedged; a
// small or shared difference names no one.
func TestTorchStuck(t *testing.T) {
	f := wantOne(t, evaluate(torchJob(heartbeat(84), heartbeat(103), heartbeat(103))), incident.KindHang,
		"watchdog thread stuck on ranks 0,1,2", "rank 0 had 84 queued work(s) while the others had 103", "suspect", "do not show")
	if got := culpritRanks(f); len(got) != 1 || got[0] != 0 {
		t.Errorf("culprits %v, want rank 0", got)
	}
	for _, tc := range []struct {
		name   string
		queued []int
	}{
		{"one rank", []int{1}},
		{"all alike", []int{50, 50, 50}},
		{"a work apart", []int{102, 103, 103}},
		{"half the ranks low", []int{84, 84, 103, 103}},
		{"within a tenth", []int{95, 103, 103}},
	} {
		var evs [][]snapshot.Event
		for _, q := range tc.queued {
			evs = append(evs, heartbeat(q))
		}
		f := wantOne(t, evaluate(torchJob(evs...)), incident.KindHang, "heartbeat monitor", "do not show which rank stopped first")
		if len(f.Culprits) != 0 {
			t.Errorf("%s: culprits %+v", tc.name, f.Culprits)
		}
	}
}

// TestTorchFailureWithoutTimeoutLine: PyTorch 2.6+'s "failure detected by watchdog at work
// sequence id" alone (its timeout line not kept) is the watchdog's finding all the same, and
// its last completed works point at the rank behind.
func TestTorchFailureWithoutTimeoutLine(t *testing.T) {
	status := func(done int) []snapshot.Event {
		return []snapshot.Event{{Kind: snapshot.EventTorchWorkStatus, Code: done, Enqueued: int64(done) + 3, Comm: "0", Fatal: true,
			Msg: "failure detected by watchdog at work sequence id: " + strconv.Itoa(done+1)}}
	}
	f := wantOne(t, evaluate(torchJob(status(120048))), incident.KindHang, "caught a failed or timed-out collective on 1 rank(s)")
	if len(f.Culprits) != 0 || !strings.Contains(strings.Join(f.Evidence, "\n"), "last completed work 120048, last enqueued 120051") {
		t.Errorf("%+v", f)
	}
	f = wantOne(t, evaluate(torchJob(status(120048), status(120048), status(120047))), incident.KindHang,
		"rank 2 completed work only up to 120047", "suspect")
	if got := culpritRanks(f); len(got) != 1 || got[0] != 2 {
		t.Errorf("culprits %v, want rank 2", got)
	}
	// The dump's status line (not Fatal) is no failure of its own.
	quiet := status(7)
	quiet[0].Fatal = false
	if fs := torchTimeouts(torchJob(quiet, quiet), DefaultConfig()); len(fs) != 0 {
		t.Errorf("a dump's status line alone: %+v", fs)
	}
}

// TestWatchdogCUDAError: a CUDA error PyTorch's watchdog thread raised is the rank's GPU
// failure, said to come from PyTorch's check rather than from inside NCCL.
func TestWatchdogCUDAError(t *testing.T) {
	cuda := []snapshot.Event{{Kind: snapshot.EventCudaError, Fatal: true, Src: snapshot.SrcTorchWatchdog,
		Detail: "an illegal memory access was encountered", Msg: "Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered"}}
	f := wantOne(t, evaluate(torchJob(nil, nil, cuda)), incident.KindGPU, "rank 2", "under PyTorch's NCCL watchdog", "illegal memory access", "application's own kernel")
	if got := culpritRanks(f); len(got) != 1 || got[0] != 2 {
		t.Errorf("culprits %v, want rank 2", got)
	}
	if strings.Contains(f.Summary, "inside NCCL") {
		t.Errorf("blamed on NCCL: %s", f.Summary)
	}
	cuda[0].Detail = "device-side assert triggered"
	wantOne(t, evaluate(torchJob(cuda)), incident.KindGPU, "assertion failed")
}

// TestTorchDumpSignal: a rank's dump signal names the rank whose collective timed out; the
// finding names that rank as timed out (not as the culprit: it may only have waited), once
// when its own timeout line is there too.
func TestTorchDumpSignal(t *testing.T) {
	dump := snapshot.Event{Kind: snapshot.EventTorchWorkStatus, Code: 303, Enqueued: 305, Comm: "0", Ranks: []int{2},
		Msg: "Received a dump signal due to a collective timeout from  rank 2"}
	f := wantOne(t, evaluate(torchJob([]snapshot.Event{dump})), incident.KindHang,
		"timed out 1 rank(s)", "rank 2 timed out first")
	ev := strings.Join(f.Evidence, "\n")
	if len(f.Culprits) != 0 || !strings.Contains(ev, "rank 2 timed out (rank 0's dump signal says so") || !strings.Contains(ev, "rank 0: last completed work 303") {
		t.Errorf("culprits %+v, evidence %s", f.Culprits, ev)
	}
	own := snapshot.Event{Kind: snapshot.EventTorchTimeout, Code: 304, Comm: "0", Msg: "Watchdog caught collective operation timeout"}
	f = wantOne(t, evaluate(torchJob([]snapshot.Event{dump}, nil, []snapshot.Event{own})), incident.KindHang, "timed out 1 rank(s)")
	for _, e := range f.Evidence {
		if strings.Contains(e, "dump signal") {
			t.Errorf("rank 2's timeout said twice: %q", e)
		}
	}
}
