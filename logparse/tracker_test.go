package logparse

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

func trackFile(t testing.TB, path string, opts TrackerOptions) *Tracker {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := NewTracker(opts)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		tr.Observe(sc.Bytes(), time.Unix(1_700_000_000, 0))
	}
	return tr
}

func TestTrackerMulticomm(t *testing.T) {
	dir := "../testdata/captures/nccl-2.28.9-2xH200/multicomm"
	ids := map[string][]int64{}
	for _, name := range []string{"nccl.vm.607.log", "nccl.vm.608.log"} {
		tr := trackFile(t, filepath.Join(dir, name), TrackerOptions{Location: time.UTC})
		if tr.Version != "2.28.9" || tr.TimestampDigits != 6 {
			t.Errorf("%s: version %q digits %d", name, tr.Version, tr.TimestampDigits)
		}
		for _, c := range tr.Comms() {
			ids[c.ID] = append(ids[c.ID], c.Count)
			if c.State != "destroyed" {
				t.Errorf("%s: comm %s state %s, want destroyed", name, c.ID, c.State)
			}
		}
	}
	want := map[string]bool{"0x302a0c2a0babd0fc": true, "0x302a0c2a0babd0fc/s1c2130503744": true, "0x302a0c2a0babd0fc/s2c2130503744": true}
	if len(ids) != 3 {
		t.Fatalf("got %d communicator identities %v, want 3", len(ids), ids)
	}
	for id, counts := range ids {
		if !want[id] {
			t.Errorf("unexpected identity %s", id)
		}
		if len(counts) != 2 || counts[0] != counts[1] || counts[0] == 0 {
			t.Errorf("%s: counts %v, want two equal non-zero counts", id, counts)
		}
	}
}

func TestTrackerSequencesAndP2P(t *testing.T) {
	tr := trackFile(t, "../testdata/captures/nccl-2.28.9-2xH200/multicomm/nccl.vm.607.log", TrackerOptions{RingSize: 4, Location: time.UTC})
	world := tr.Comms()[0]
	if world.Rank != 0 || world.NRanks != 2 || world.BusID != 0x60 {
		t.Fatalf("world comm %+v", world)
	}
	p := world.P2P[1]
	if p == nil || p.Sends == 0 || p.Sends != p.Recvs {
		t.Fatalf("p2p with peer 1: %+v", p)
	}
	recent := world.Recent()
	if len(recent) != 4 || recent[3].Seq != world.Count {
		t.Fatalf("recent %+v with count %d", recent, world.Count)
	}
	snap := tr.Snapshot(SnapshotOptions{Recent: 2})
	if len(snap.Comms[0].Recent) != 2 || snap.Comms[0].Count != world.Count || snap.Rank != 0 {
		t.Fatalf("snapshot %+v", snap.Comms[0])
	}
}

func TestTrackerSplitWithoutSplitCount(t *testing.T) {
	// 2.23 prints no splitCount: two splits of one parent with one color stay distinct.
	tr := NewTracker(TrackerOptions{})
	lines := []string{
		"h:1:1 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xfeed - Init START",
		"h:1:1 [0] NCCL INFO ncclCommSplit comm 0xb rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 parent 0xa color 7 key 0- Init START",
		"h:1:1 [0] NCCL INFO ncclCommSplit comm 0xc rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 parent 0xa color 7 key 0- Init START",
	}
	for _, l := range lines {
		tr.Observe([]byte(l), time.Now())
	}
	got := []string{tr.Comms()[0].ID, tr.Comms()[1].ID, tr.Comms()[2].ID}
	want := []string{"0xfeed", "0xfeed/c7#1", "0xfeed/c7#2"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("comm %d id %s, want %s", i, got[i], want[i])
		}
	}
}

func TestTrackerBoundedMemory(t *testing.T) {
	tr := NewTracker(TrackerOptions{RingSize: 8, MaxComms: 3, MaxEvents: 2})
	now := time.Now()
	for i := 0; i < 10; i++ {
		ptr := 0x100 + i
		tr.Observe([]byte("h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x"+hex(ptr)+" rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x"+hex(ptr)+" - Init START"), now)
		for k := 0; k < 100; k++ {
			tr.Observe([]byte("h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0x"+hex(ptr)+" [nranks=2] stream (nil)"), now)
		}
		tr.Observe([]byte("h:1:1 [0] NCCL INFO comm 0x"+hex(ptr)+" rank 0 nranks 2 cudaDev 0 busId 1b000 - Destroy COMPLETE"), now)
		tr.Observe([]byte("h:1:2 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : mlx5_0:1 Got async error event: port error"), now)
	}
	if n := len(tr.Comms()); n != 3 {
		t.Errorf("%d comms kept, cap 3", n)
	}
	if n := len(tr.Events()); n != 2 {
		t.Errorf("%d events kept, cap 2", n)
	}
	for _, c := range tr.Comms() {
		if len(c.Recent()) != 8 || c.Count != 100 {
			t.Errorf("comm %s: %d recent, count %d", c.ID, len(c.Recent()), c.Count)
		}
	}
}

func hex(i int) string {
	return string("0123456789abcdef"[i>>8&15]) + string("0123456789abcdef"[i>>4&15]) + string("0123456789abcdef"[i&15])
}

// TestObserveAllocatesNothing checks the hot path: a collective line on a known
// communicator costs no allocation. Deterministic (allocation counts, not time).
func TestObserveAllocatesNothing(t *testing.T) {
	tr := trackFile(t, "../testdata/captures/nccl-2.28.9-2xH200/multicomm/nccl.vm.607.log", TrackerOptions{})
	lines := [][]byte{
		[]byte("[2026-11-21 23:00:35.402707] vm:607:607 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7faa1f440000 recvbuff 0x7faa1f440000 count 16384 datatype 7 op 0 root 0 comm 0x10d842d0 [nranks=2] stream (nil)"),
		[]byte("[2026-11-21 23:00:35.403150] vm:607:607 [0] NCCL INFO Send: opCount 0 sendbuff (nil) recvbuff 0x7faa1f400000 count 65536 datatype 7 op 0 root 1 comm 0x94a72c0 [nranks=2] stream 0x10965ef0"),
		[]byte("vm:607:607 [0] NCCL INFO AllReduce: 4 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"),
		[]byte("vm:607:607 [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM"),
	}
	now := time.Now()
	for _, line := range lines {
		if n := testing.AllocsPerRun(200, func() { tr.Observe(line, now) }); n != 0 {
			t.Errorf("%.1f allocations per line for %q", n, line)
		}
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	b, err := os.ReadFile("../testdata/captures/nccl-2.28.9-2xH200/multicomm/nccl.vm.607.log")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	now := time.Unix(1_700_000_000, 0)
	opts := TrackerOptions{Location: time.UTC}
	whole := NewTracker(opts)
	for _, l := range lines {
		whole.Observe([]byte(l), now)
	}
	for _, cut := range []int{0, 1, 50, len(lines) / 2, len(lines) - 3, len(lines)} {
		first := NewTracker(opts)
		for _, l := range lines[:cut] {
			first.Observe([]byte(l), now)
		}
		state, err := first.MarshalState(-1)
		if err != nil {
			t.Fatal(err)
		}
		resumed, err := RestoreTracker(state, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines[cut:] {
			resumed.Observe([]byte(l), now)
		}
		got, _ := json.Marshal(resumed.Snapshot(SnapshotOptions{Recent: -1}))
		want, _ := json.Marshal(whole.Snapshot(SnapshotOptions{Recent: -1}))
		if string(got) != string(want) {
			t.Errorf("cut at line %d: resumed snapshot differs\n got %s\nwant %s", cut, got, want)
		}
	}
	if _, err := RestoreTracker([]byte(`{"v":99}`), opts); err == nil {
		t.Error("a checkpoint of another version must be refused")
	}
}

// TestIssueIndexFollowsLineOrder: every op line, collective or p2p, on any communicator,
// takes the next place in the process's issue order, so ops of two communicators compare by
// Idx whether or not the lines carry timestamps.
func TestIssueIndexFollowsLineOrder(t *testing.T) {
	tr := trackFile(t, "../testdata/captures/nccl-2.28.9-2xH200/multicomm/nccl.vm.607.log",
		TrackerOptions{RingSize: 1 << 14, Location: time.UTC})
	if tr.Issued == 0 || tr.Issued != tr.Kinds[KindColl] {
		t.Fatalf("issued %d for %d op lines", tr.Issued, tr.Kinds[KindColl])
	}
	var ops []OpRecord
	comms := 0
	for _, c := range tr.Comms() {
		if c.Count > 0 {
			comms++
		}
		ops = append(ops, c.Recent()...)
	}
	if comms < 2 {
		t.Fatalf("%d communicators with collectives: the capture should interleave several", comms)
	}
	sort.Slice(ops, func(a, b int) bool { return ops[a].Idx < ops[b].Idx })
	for i := 1; i < len(ops); i++ {
		if ops[i].Idx == ops[i-1].Idx || ops[i].T < ops[i-1].T {
			t.Fatalf("ops %+v then %+v: issue order must be unique and follow the lines' time", ops[i-1], ops[i])
		}
	}
	snap := tr.Snapshot(SnapshotOptions{Recent: -1})
	if last := snap.Comms[0].Last; last == nil || last.Idx == 0 {
		t.Fatalf("snapshot's last op %+v carries no issue index", last)
	}
}

// TestTrackerFailureRuns: what follows a WARN or an error's breadcrumbs decides what they
// mean: a plugin's second WARN line is its rest, a PyTorch line is not; breadcrumbs whose
// thread carries on were handled; breadcrumbs that end on the progress thread came after
// init.
func TestTrackerFailureRuns(t *testing.T) {
	const w = "h:7:9 [1] transport/net_ib.cc:100 NCCL WARN "
	cases := []struct {
		name  string
		lines []string
		want  []string // kind:stage:msg of each event
	}{
		{"plugin continuation", []string{w + "NET/OFI first part", "second part of it"},
			[]string{"net_error:init:NET/OFI first part | second part of it"}},
		{"pytorch line is not a continuation", []string{w + "NET/IB : Got completion from peer 10.0.0.2<5> with error 12, opcode 0",
			"[E ProcessGroupNCCL.cpp:456] Some NCCL operations have failed or timed out."},
			[]string{"ib_completion:init:NET/IB : Got completion from peer 10.0.0.2<5> with error 12, opcode 0"}},
		{"handled breadcrumbs", []string{"h:7:8 [1] NCCL INFO include/net.h:19 -> 2", "h:7:8 [1] NCCL INFO CUDA Dev 1[1], Socket NIC distance :  PHB"},
			nil},
		{"another thread does not handle them", []string{"h:7:8 [1] NCCL INFO include/net.h:19 -> 2", "h:7:9 [1] NCCL INFO Channel 00/02 :    0   1"},
			[]string{"breadcrumb:init:include/net.h:19 -> 2"}},
		{"progress thread", []string{"h:7:30 [1] NCCL INFO transport/net.cc:1302 -> 6", "h:7:30 [1] NCCL INFO proxy.cc:878 -> 6 [Progress Thread]"},
			[]string{"breadcrumb:ready:transport/net.cc:1302 -> 6"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(TrackerOptions{})
			for _, l := range c.lines {
				tr.Observe([]byte(l), time.Time{})
			}
			var got []string
			for _, e := range tr.Events() {
				got = append(got, string(e.Kind)+":"+string(e.Stage)+":"+e.Msg)
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("events\n got  %q\n want %q", got, c.want)
			}
		})
	}
}
