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

// TestGlogPrefix: glog's prefix (torchrun's agent, PyTorch's C++ logging) is a console
// prefix like the others: taken off, its month, day and time kept without a year, and what
// follows it is never NCCL's own line.
func TestGlogPrefix(t *testing.T) {
	const exit = "failed (exitcode: -9) local_rank: 0 (pid: 4492) of binary: python3"
	for _, tc := range []struct {
		name, line, want, rest string
	}{
		{"torchrun's agent", "E1129 03:11:35.586230 460 torch/distributed/elastic/multiprocessing/api.py:882] " + exit,
			"kind=launcher_exit time=0000-11-29T03:11:35.586230000/6 code=-9 local=0 pid=4492", exit},
		{"thread padded", "I0101 00:00:01.000001  12 run.py:851] hello", "kind=unknown time=0000-01-01T00:00:01.000001000/6", "hello"},
		{"blank message", "W1121 22:51:59.044000 1170 torch/distributed/run.py:851] ", "kind=blank time=0000-11-21T22:51:59.044000000/6", ""},
		{"c10 with nanoseconds under a rank", "[rank1]:[W1129 03:13:05.119497044 ProcessGroupNCCL.cpp:4051] [PG ID 0 PG GUID 0(default_pg) Rank 1] An unbatched P2P op",
			"kind=unknown lrank=1 time=0000-11-29T03:13:05.119497044/9", "[PG ID 0 PG GUID 0(default_pg) Rank 1] An unbatched P2P op"},
		{"c10 without time", "[W socket.cpp:464] [c10d] The server socket has failed to bind.", "kind=unknown", "[c10d] The server socket has failed to bind."},
		{"a collector's dated time wins", "2025-12-31T23:59:59.5Z E0101 00:00:00.100000 7 api.py:882] " + exit,
			"kind=launcher_exit time=2025-12-31T23:59:59.500000000/1 code=-9 local=0 pid=4492", exit},
		{"NCCL words after it are PyTorch's", "[E1129 03:13:05.1 ProcessGroupNCCL.cpp:9] x NCCL WARN y", "kind=unknown time=0000-11-29T03:13:05.100000000/1", "x NCCL WARN y"},
		// Not glog: kept whole.
		{"no source", "W1129 03:11:35.586230 460 nofile] x", "kind=unknown", "W1129 03:11:35.586230 460 nofile] x"},
		{"bad month", "E1329 03:11:35.586230 460 api.py:882] x", "kind=unknown", "E1329 03:11:35.586230 460 api.py:882] x"},
		{"untimed without brackets", "E api.py:882] x", "kind=unknown", "E api.py:882] x"},
		{"a level and a date alone", "E1129 x", "kind=unknown", "E1129 x"},
		{"a collector's tag", "[E1]: x", "kind=unknown", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Line
			parseLike(t, &l, tc.line, tc.want)
			if got := string(Unprefixed([]byte(tc.line))); got != tc.rest {
				t.Errorf("unprefixed %q, want %q", got, tc.rest)
			}
		})
	}
}

// TestYearless: a glog time takes the year that puts it nearest the job's other times, a
// new year's night included; without any, it stays undated.
func TestYearless(t *testing.T) {
	utc := time.UTC
	at := func(s string) int64 {
		v, err := time.Parse("2006-01-02 15:04:05.999999", s)
		if err != nil {
			t.Fatal(err)
		}
		return v.UnixMicro()
	}
	for _, tc := range []struct {
		name  string
		stamp Timestamp
		ref   int64
		want  int64
	}{
		{"same day", Timestamp{Month: 11, Day: 29, Hour: 3, Min: 11, Sec: 35, Nanos: 586230000}, at("2026-11-29 03:10:00"), at("2026-11-29 03:11:35.58623")},
		{"after midnight on new year's eve", Timestamp{Month: 1, Day: 1, Sec: 2}, at("2025-12-31 23:59:40"), at("2026-01-01 00:00:02")},
		{"before midnight, the job's lines after", Timestamp{Month: 12, Day: 31, Hour: 23, Min: 59, Sec: 58}, at("2026-01-01 00:00:10"), at("2025-12-31 23:59:58")},
		{"no reference", Timestamp{Month: 1, Day: 1}, 0, 0},
		{"a year of its own ignores the reference", Timestamp{Year: 2024, Month: 2, Day: 29}, at("2026-01-01 00:00:00"), at("2024-02-29 00:00:00")},
	} {
		if got := tc.stamp.UnixMicro(utc, tc.ref); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, time.UnixMicro(got).UTC(), time.UnixMicro(tc.want).UTC())
		}
	}
	// A tracker dates a glog line by the process's own lines before it; with none, and no
	// read time, the line stays undated as it always was.
	tr := NewTracker(TrackerOptions{Location: utc})
	tr.Observe([]byte("E0101 00:00:01.000000 7 api.py:882] "+"failed (exitcode: -9) local_rank: 0 (pid: 9) of binary: python3"), time.Time{})
	if tr.LastTime != 0 {
		t.Errorf("an undated tracker dated a yearless line: %v", time.UnixMicro(tr.LastTime).UTC())
	}
	tr.Observe([]byte("[2025-12-31 23:59:59.000000] node0:9:9 [0] NCCL INFO Using network IB"), time.Time{})
	tr.Observe([]byte("E0101 00:00:01.000000 7 api.py:882] failed (exitcode: -9) local_rank: 0 (pid: 9) of binary: python3"), time.Time{})
	if want := at("2026-01-01 00:00:01"); tr.LastTime != want {
		t.Errorf("tracker: %v, want %v", time.UnixMicro(tr.LastTime).UTC(), time.UnixMicro(want).UTC())
	}
}
