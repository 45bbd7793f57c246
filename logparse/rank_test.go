package logparse

import (
	"testing"
	"time"
)

func TestOwnRank(t *testing.T) {
	for _, c := range []struct {
		line string
		want int
	}{
		{"node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0", 0},
		{"node2:22555:22555 [0] NCCL INFO Channel 00/0 : 2[1] -> 1[0] [receive] via NET/Socket/0", 1},
		{"node0:13572:13572 [1] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct", 2},
		{"user:16901:16967 [2] proxy.cc:1519 NCCL WARN [Proxy Service 93] Failed to execute operation Connect from rank 7, retcode 3", 93},
		{"user:16901:16967 [2] NCCL INFO Proxy Call to rank 9 failed (Connect)", -1},
		{"user:16901:16967 [2] NCCL INFO Connected all rings", -1},
	} {
		var l Line
		Parse([]byte(c.line), &l)
		if got := OwnRank(&l); got != c.want {
			t.Errorf("%q: own rank %d, want %d", c.line, got, c.want)
		}
	}
}

// TestTrackerRankFromLines: without Init lines the rank the channel lines carry is the
// process's; when they carry two (two communicators), it has none rather than a guess.
func TestTrackerRankFromLines(t *testing.T) {
	for _, c := range []struct {
		name  string
		lines []string
		want  int
	}{
		{"agree", []string{
			"n:1:2 [0] NCCL INFO Channel 00/0 : 3[0] -> 4[1] [send] via NET/IB/0",
			"n:1:2 [0] NCCL INFO Channel 01/0 : 2[1] -> 3[0] [receive] via NET/IB/0"}, 3},
		{"disagree", []string{
			"n:1:2 [0] NCCL INFO Channel 00/0 : 3[0] -> 4[1] [send] via NET/IB/0",
			"n:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[1] [send] via NET/IB/0"}, -1},
		{"init wins", []string{
			"n:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[1] [send] via NET/IB/0",
			"n:1:2 [0] NCCL INFO comm 0x7f5780001ca0 rank 15 nranks 32 cudaDev 0 nvmlDev 0 - Init COMPLETE"}, 15},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(TrackerOptions{})
			var l Line
			for _, s := range c.lines {
				Parse([]byte(s), &l)
				tr.Apply(&l, []byte(s), time.Time{})
			}
			if got := tr.GlobalRank(); got != c.want {
				t.Errorf("rank %d, want %d", got, c.want)
			}
		})
	}
}
