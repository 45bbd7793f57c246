package logparse

import (
	"testing"
	"time"
)

// TestLauncherFrom: which prefix named the rank, and srun's task kept under an inner one.
func TestLauncherFrom(t *testing.T) {
	nccl := "node7:41231:41231 [3] NCCL INFO Using network IB"
	for _, tc := range []struct {
		line       string
		rank, task int
		from       RankFrom
	}{
		{nccl, -1, -1, RankFromNone},
		{"[rank5]:" + nccl, 5, -1, RankFromJob},
		{"[default3]:" + nccl, 3, -1, RankFromNode},
		{"12: " + nccl, 12, 12, RankFromTask},
		{" 3: " + nccl, 3, 3, RankFromTask},
		{"[1,7]<stdout>:" + nccl, 7, -1, RankFromJob},
		{"[2] " + nccl, 2, 2, RankFromTask},
		{"1: [rank9]:" + nccl, 9, 1, RankFromJob},
		{"0: [default1]:" + nccl, 1, 0, RankFromNode},
		{"1: [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB.", 3, 1, RankFromJob},
		{"1: Traceback (most recent call last):", 1, 1, RankFromTask},
	} {
		var l Line
		// A fast-path line first: its header must not leak into the next.
		Parse([]byte("[2026-01-05 10:00:00.001990] node0:1:1 [0] NCCL INFO Using network IB"), &l)
		Parse([]byte(tc.line), &l)
		if l.LauncherRank != tc.rank || l.Task != tc.task || l.LauncherFrom != tc.from {
			t.Errorf("%q: rank %d task %d from %d, want %d %d %d", tc.line, l.LauncherRank, l.Task, l.LauncherFrom, tc.rank, tc.task, tc.from)
		}
		Parse([]byte("[2026-01-05 10:00:00.001990] node0:1:1 [0] NCCL INFO Using network IB"), &l)
		if l.LauncherRank != -1 || l.Task != -1 || l.LauncherFrom != RankFromNone || l.Quoted {
			t.Errorf("after %q the next line keeps rank %d task %d from %d quoted %v", tc.line, l.LauncherRank, l.Task, l.LauncherFrom, l.Quoted)
		}
	}
}

// TestQuotedDoesNotLeak: a line read as PyTorch's quote of a WARN leaves nothing of that in
// the next line read into the same Line by the fast path.
func TestQuotedDoesNotLeak(t *testing.T) {
	var l Line
	ParseQuoted([]byte("socketStartConnect: Connect to 127.0.0.1<45069> failed : Software caused connection abort"), &l)
	for range 2 {
		Parse([]byte("gpu7:42:43 [0] NCCL INFO Using network IB"), &l)
		if l.Quoted || l.Kind != KindUsingNetwork {
			t.Fatalf("quoted %v kind %v", l.Quoted, l.Kind)
		}
	}
}

// TestContinuation: unprefixed text after a WARN goes on with it, but not another task's
// line (srun's label differs), a traceback or a Python exception under the same label.
func TestContinuation(t *testing.T) {
	warn := "2: gpu7:42:43 [0] transport/net_ib.cc:1414 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<3981> with status=12"
	for _, tc := range []struct {
		next string
		glue bool
	}{
		{"2: hca mlx5_3 qp 0x1c", true},
		{"0: Traceback (most recent call last):", false},
		{"3: some other task's text", false},
		{`2:   File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2050`, false},
		{"2: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 2.", false},
		{"2: RuntimeError: NCCL error", false},
	} {
		tr := NewTracker(TrackerOptions{RingSize: 8, MaxEvents: 8})
		tr.Observe([]byte(warn), time.Unix(1, 0))
		tr.Observe([]byte(tc.next), time.Unix(1, 0))
		evs := tr.Events()
		if len(evs) == 0 {
			t.Fatalf("%q: no event", tc.next)
		}
		glued := len(evs[0].Msg) > len("NET/IB : Got completion from peer 10.0.0.2<3981> with status=12")+2
		if glued != tc.glue {
			t.Errorf("%q: glued %v, want %v (%q)", tc.next, glued, tc.glue, evs[0].Msg)
		}
	}
}
