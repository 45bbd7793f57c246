package logparse

import (
	"strings"
	"testing"
	"time"
)

// TestGap: after a gap, the communicators seen before it have an identity of this process
// alone (their counts go on, but are not positions any other rank shares); one initialised
// after the gap joins by its commId as usual.
func TestGap(t *testing.T) {
	tr := NewTracker(TrackerOptions{})
	tr.Host, tr.PID = "node0", 42
	at := time.Unix(1700000000, 0)
	for _, l := range []string{
		"node0:42:42 [0] NCCL INFO ncclCommInitRankConfig comm 0x1000 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 10000 commId 0xfeed - Init COMPLETE",
		"node0:42:42 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1000 datatype 7 op 0 root 0 comm 0x1000 [nranks=2] stream (nil)",
	} {
		tr.Observe([]byte(l), at)
	}
	tr.Gap()
	for _, l := range []string{
		"node0:42:42 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1000 datatype 7 op 0 root 0 comm 0x1000 [nranks=2] stream (nil)",
		"node0:42:42 [0] NCCL INFO ncclCommInitRankConfig comm 0x2000 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 10000 commId 0xbeef - Init COMPLETE",
	} {
		tr.Observe([]byte(l), at)
	}
	comms := tr.Comms()
	if len(comms) != 2 {
		t.Fatalf("%d communicators, want 2", len(comms))
	}
	if id := comms[0].ID; id != "unjoined:node0:42:0x1000/gap" || comms[0].Count != 2 {
		t.Errorf("before the gap: id %q count %d, want a process-local id and its count", id, comms[0].Count)
	}
	if id := comms[1].ID; id != "0xbeef" || strings.Contains(id, "gap") {
		t.Errorf("after the gap: id %q, want 0xbeef", id)
	}
}
