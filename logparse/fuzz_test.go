package logparse

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// seedLines adds real capture lines and the hand-made table to a fuzz corpus.
func seedLines(f *testing.F) [][]byte {
	var lines [][]byte
	files, _ := filepath.Glob("../testdata/captures/*/*/*.log")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		seen := map[Kind]int{}
		var l Line
		for sc.Scan() {
			Parse(sc.Bytes(), &l)
			if seen[l.Kind] < 3 {
				seen[l.Kind]++
				lines = append(lines, append([]byte(nil), sc.Bytes()...))
			}
		}
	}
	// The shapes that no capture has: launcher stacks, NCCL 2.1-2.3, pasted markdown,
	// nccl-tests' failure lines.
	for _, s := range []string{
		"2021-03-04T05:06:07.890Z: [1,12]<stdout>:gpu7:4242:4250 [2] misc/ibvwrap.cc:220 NCCL WARN Call to ibv_get_async_event failed",
		"2024-02-03 12:05:06.007 +08:00 [2024-02-03 04:05:05] gpu7:4242:4242 [2] NCCL INFO Using network IB",
		"[pod/trainer-0/main] gpu7:4242:4242 [2] NCCL INFO Using network IB",
		"[rank0]:\t - To our best knowledge, ranks [3, 7] are the lagging ranks that caused this timeout. They never joined any collectives",
		"[A] finished collective #, but didn't join collective #", // a short line once gave a Detail longer than itself
		"[rank0]:\t   - [3] joined but didn't finish collective #41 (count from 1)",
		"[rank0]:\t     [0, 1, 2] finished collective #41, but didn't join collective #42 (count from 1)",
		"2026-03-02 11:07:41 [rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5",
		"Root Cause (first observed failure):",
		"h:1:2 [2] proxy.cc:1519 NCCL WARN [Proxy Service 93] Failed to execute operation Connect from rank 7, retcode 3",
		"gpu7:4242:4242 [2] INFO NET : Using interface eth1:10.3.0.7<0>",
		"gpu7:4242:4250 [2] include/socket.h:360 WARN Call to connect failed : Connection timed out",
		"gpu7:4242:4250 [2] INFO 1 -> 0 via P2P/IPC",
		"> gpu7:4242:4250 [2] transport/[net_ib.cc:101](http://net_ib.cc:101/) NCCL WARN NET/IB : Got completion from peer [10.9.8.7](http://10.9.8.7/)<40001> with status=9",
		"gpu7: Test NCCL failure common.cu:1291 'unhandled cuda error / '",
		" .. gpu7 pid 4242: Test failure common.cu:1165",
		"RCCL version : 2.27.7-HEAD:0a1b2c3",
		"Collective 7 at entry 6 errors",
		"error msg: Culprit rank 3; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective type: 'all_reduce' does not match found collective type: 'broadcast', Culprit rank 5; Error type: SIZE_OR_SYNTAX_MISMATCH",
		"Not all ranks joining collective, sequence number: 12",
		"missing ranks: {1, 2, 99999999999999999999999, 4}",
		"[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float, TensorDeviceTypes=TensorOptions()), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=5OpType=BARRIER).",
		"[rank0]: RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms",
		"[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of 79.15 GiB",
		"  exitcode  : -9 (pid: 1212)",
		"  rank      : 2 (local_rank: 2)",
		"  traceback : Signal 9 (SIGKILL) received by PID 1212",
		"gpu7:4242:4242 [2] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: version `GLIBC_2.38' not found : when loading libnccl-net.so",
		"gpu7:4242:4242 [2] NCCL INFO Failed to initialize NET plugin IB",
		"gpu7:4242:4250 [2] init.cc:1702 NCCL WARN Invalid rank requested : 4/4",
		"1: [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 1",
		"0: [default1]:gpu7:4242:4242 [1] NCCL INFO Using network IB",
		"2: Traceback (most recent call last):",
		"2: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 2.",
		"n1:7:7 [0] NCCL INFO AllReduce: opCount 3 sendbuff 0x7f recvbuff 0x7f count 1 datatype 7 op 0 root 0 comm 0x5d [nranks=2]n2:8:8 [1] NCCL INFO Using network IB",
		"n1:7:7 [0] NCCL INFO AllReduce: opCount 3 sendbuff 0x7f recvbuff 0x7f count 1 datatype 7 op 0 root 0 comm 0x5d [nranks=2] stream (nil)      n1:7:9 [0] NCCL INFO Using network IB",
		"allreduce_perf.gpu7 [stderr] gpu7:4242:4250 [2] transport/net_ib.cc:1683 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4821> with sta",
	} {
		lines = append(lines, []byte(s))
	}
	return lines
}

func FuzzParse(f *testing.F) {
	for _, l := range seedLines(f) {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var l Line
		Parse(line, &l)
		if l.Kind >= NumKinds {
			t.Fatalf("kind %d out of range", l.Kind)
		}
		// The analyzer's rank sets are bounded however long the line.
		if e, ok := EventOf(&l, 0); ok && (len(e.Ranks) > snapshot.MaxFRRanks || len(e.Detail) > snapshot.MaxMsg) &&
			(l.Kind == KindFRCulprit || l.Kind == KindFRMissing || l.Kind == KindTorchLagging) {
			t.Fatalf("event %+v unbounded", e)
		}
		if e, ok := EventOf(&l, 0); ok && (len(e.Work) > 2 || len(e.Ranks) > snapshot.MaxFRRanks) {
			t.Fatalf("event %+v unbounded", e)
		}
		if l.Kind == KindColl && l.Coll.Op != ParseOpName(l.Coll.OpName) {
			t.Fatalf("op %v does not match its name %q", l.Coll.Op, l.Coll.OpName)
		}
		// A per-op line's second prefixes are searched for after its fields only.
		if l.Kind == KindColl {
			var all, after []Second
			for s := range SecondPrefixes(l.Msg) {
				all = append(all, s)
			}
			for s := range SecondPrefixesFrom(l.Msg, l.Coll.End) {
				after = append(after, s)
			}
			if fmt.Sprint(all) != fmt.Sprint(after) {
				t.Fatalf("second prefixes %+v, after the fields read (%d) %+v", all, l.Coll.End, after)
			}
		}
		for _, b := range [][]byte{l.Host, l.Msg, l.Text, l.File, l.Dev2, l.Detail, l.Coll.OpName, l.Init.API, l.Channel.Transport, l.Channel.Net, l.Torch.OpType, l.Torch.PGDesc, l.Torch.PG, l.Torch.Host, l.Label} {
			if len(b) > len(line) {
				t.Fatalf("field longer than the line")
			}
		}
		// A pasted line is read unlinked: never longer, and unlinked once more it is read
		// the same way.
		if u, ok := Unlink(nil, line); ok {
			if len(u) > len(line) {
				t.Fatalf("Unlink(%q) = %q: longer", line, u)
			}
			Parse(u, &l)
			if l.Kind >= NumKinds {
				t.Fatalf("kind %d out of range", l.Kind)
			}
		} else if string(u) != string(line) {
			t.Fatalf("Unlink(%q) changed a line without links", line)
		}
	})
}

// FuzzTracker feeds a whole fuzzed log through a tracker and renders its snapshot.
func FuzzTracker(f *testing.F) {
	lines := seedLines(f)
	f.Add(bytes.Join(lines, []byte("\n")))
	f.Add([]byte("vm:1:1 [0] NCCL INFO ncclCommSplit comm 0x2 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 parent 0x1 splitCount 1 color 5 key 0- Init START\nvm:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0x2 [nranks=2] stream (nil)\n"))
	f.Fuzz(func(t *testing.T, log []byte) {
		tr := NewTracker(TrackerOptions{RingSize: 8, MaxComms: 4, MaxEvents: 4})
		now := time.Unix(1_700_000_000, 0)
		for _, line := range bytes.Split(log, []byte("\n")) {
			tr.Observe(line, now)
		}
		s := tr.Snapshot(SnapshotOptions{Recent: -1})
		if len(s.Comms) > 4 {
			t.Fatalf("%d comms kept, cap 4", len(s.Comms))
		}
		for _, c := range s.Comms {
			if len(c.Recent) > 8 {
				t.Fatalf("%d recent ops, ring 8", len(c.Recent))
			}
			for i := 1; i < len(c.Recent); i++ {
				if c.Recent[i].Seq != c.Recent[i-1].Seq+1 {
					t.Fatalf("recent ops not contiguous: %d then %d", c.Recent[i-1].Seq, c.Recent[i].Seq)
				}
			}
		}
		if len(s.Events) > 4 {
			t.Fatalf("%d events kept, cap 4", len(s.Events))
		}
	})
}
