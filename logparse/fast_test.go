package logparse

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// refColl reads the per-op line grammar the plain way, token by token: the reference that
// the hand-tuned hotColl must agree with.
func refColl(m []byte) (Coll, bool) {
	var c Coll
	i := bytes.IndexByte(m, ':')
	if i <= 0 || i >= 16 {
		return c, false
	}
	c.OpName = m[:i]
	c.Op = ParseOpName(c.OpName)
	s := scanner{b: m, i: i}
	var ok bool
	if !s.lit(": opCount ") {
		return c, false
	}
	if c.OpCount, ok = s.hex(); !ok {
		return c, false
	}
	if !s.lit(" sendbuff ") || len(s.word()) == 0 || !s.lit(" recvbuff ") || len(s.word()) == 0 || !s.lit(" count ") {
		return c, false
	}
	start := s.i
	for s.i < len(m) && isDigit(m[s.i]) {
		c.Count = c.Count*10 + uint64(m[s.i]-'0')
		s.i++
	}
	if s.i == start || s.i-start >= 20 {
		return c, false
	}
	dt, ok := s.field(" datatype")
	if !ok {
		return c, false
	}
	c.Datatype = Datatype(dt)
	if dt < 0 || dt > 127 {
		c.Datatype = -1
	}
	if c.RedOp, ok = s.field(" op"); !ok {
		return c, false
	}
	root, ok := s.field(" root")
	if !ok || !s.lit(" comm 0x") {
		return c, false
	}
	c.Root = int(root)
	if c.Comm, ok = s.hex(); !ok || !s.lit(" [nranks=") {
		return c, false
	}
	if c.NRanks, ok = s.int(); !ok || !s.lit("]") {
		return c, false
	}
	return c, true
}

// checkFastPath fails when Parse (its caches warm from the previous lines) and the general
// path with the reference per-op grammar disagree on a line.
func checkFastPath(t *testing.T, fast *Line, line []byte) {
	t.Helper()
	Parse(line, fast)
	var ref Line
	parseGeneral(trimRight(line), &ref)
	if ref.Level == LevelInfo {
		if c := bytes.IndexByte(ref.Msg, ':'); c > 0 && c < 16 && hasPrefix(ref.Msg[c:], ": opCount ") {
			ref.Kind = KindInfo
			if coll, ok := refColl(ref.Msg); ok {
				ref.Kind, ref.Coll = KindColl, coll
			}
		}
	}
	if !headerEqual(&fast.Header, &ref.Header) {
		t.Fatalf("%q:\nfast header %+v\n ref header %+v", line, fast.Header, ref.Header)
	}
	if fast.Kind == KindColl {
		if !collEqual(&fast.Coll, &ref.Coll) {
			t.Fatalf("%q:\nfast coll %+v\n ref coll %+v", line, fast.Coll, ref.Coll)
		}
		return
	}
	if !bodyEqual(&fast.Body, &ref.Body) {
		t.Fatalf("%q:\nfast body %+v\n ref body %+v", line, fast.Body, ref.Body)
	}
}

func headerEqual(a, b *Header) bool {
	return a.Kind == b.Kind && a.Level == b.Level && a.LauncherRank == b.LauncherRank &&
		a.HasTime == b.HasTime && a.Time == b.Time && bytes.Equal(a.Host, b.Host) && a.PID == b.PID &&
		a.TID == b.TID && a.Dev == b.Dev && bytes.Equal(a.File, b.File) && a.FileLn == b.FileLn && bytes.Equal(a.Msg, b.Msg)
}

func collEqual(a, b *Coll) bool {
	return a.Op == b.Op && bytes.Equal(a.OpName, b.OpName) && a.OpCount == b.OpCount && a.Count == b.Count &&
		a.Datatype == b.Datatype && a.RedOp == b.RedOp && a.Root == b.Root && a.Comm == b.Comm && a.NRanks == b.NRanks
}

func bodyEqual(a, b *Body) bool {
	x, y := &a.Channel, &b.Channel
	return collEqual(&a.Coll, &b.Coll) && a.Comm == b.Comm && a.Rank == b.Rank && a.NRanks == b.NRanks &&
		a.NNodes == b.NNodes && a.LocalRk == b.LocalRk && a.Phase == b.Phase &&
		x.Channel == y.Channel && x.From == y.From && x.To == y.To && bytes.Equal(x.Transport, y.Transport) &&
		bytes.Equal(x.Net, y.Net) && x.NetDev == y.NetDev && x.ProxyRank == y.ProxyRank && x.Send == y.Send &&
		x.Recv == y.Recv && x.GDR == y.GDR && bytes.Equal(a.Text, b.Text) && bytes.Equal(a.Dev2, b.Dev2) &&
		a.Port == b.Port && a.Code == b.Code && a.Fatal == b.Fatal
}

// TestFastPathMatchesGeneral replays every capture line, and variants of the per-op line,
// through Parse and the reference.
func TestFastPathMatchesGeneral(t *testing.T) {
	files, _ := filepath.Glob("../testdata/captures/*/*/*.log")
	if len(files) == 0 {
		t.Fatal("no captures")
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		var fast Line
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			checkFastPath(t, &fast, sc.Bytes())
		}
		f.Close()
	}
	var fast Line
	for _, line := range fastPathVariants {
		checkFastPath(t, &fast, []byte(line))
	}
}

// fastPathVariants are edge cases for the shortcuts: lengths around the SWAR word sizes,
// cache hits that must be rejected, malformed numbers.
var fastPathVariants = []string{
	"[2026-11-21 23:00:35.402707] vm:607:607 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7faa1f440000 recvbuff 0x7faa1f440000 count 16384 datatype 7 op 0 root 0 comm 0x10d842d0 [nranks=2] stream (nil)",
	"[2026-11-21 23:00:35.402708] vm:607:607 [0] NCCL INFO AllReduce: opCount fffffffffffffff sendbuff 0x1 recvbuff (nil) count 123456789012345678 datatype 10 op 4 root -1 comm 0xFFFFFFFFFFFFFFFF [nranks=1024] stream (nil)",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount 1ffffffffffffffff sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount 12345678 sendbuff 0x1 recvbuff 0x1 count 12345678 datatype 7 op 0 root 0 comm 0x12345678 [nranks=2]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount 123456789 sendbuff 0x1 recvbuff 0x1 count 123456789 datatype 7 op 0 root 0 comm 0x123456789 [nranks=2]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount 1234567 sendbuff 0x1 recvbuff 0x1 count 1234567 datatype 7 op 0 root 0 comm 0x1234567 [nranks=2]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount aBcDeF sendbuff 0x1 recvbuff 0x1 count 99999999999999999999 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount g sendbuff 0x1 recvbuff 0x1 count 9 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff  recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO ReduceScatter: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype -3 op 12345 root 77 comm 0x1 [nranks=2]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO Send: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 1 comm 0x1 [nranks=2] stream 0x5",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x [nranks=2]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=]",
	"[2026-11-21 23:00:35.402709] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]x",
	"[2026-11-21 23:00:36] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:00:36.1] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:00:36.123456789] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:00:36.1234567890] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:00:36.12a456] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:61:36.123456] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 23:0a:36.123456] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-21 24:00:36.123456] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-22 00:00:00.000001] vm:607:607 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-22 00:00:00.000001] vm:607:6070 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-22 00:00:00.000001] vm:607:60 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-22 00:00:00.000001] a-very-long-hostname-of-a-big-cluster-node-0001:123456:123457 [7] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-22 00:00:00.000001] a-very-long-hostname-of-a-big-cluster-node-0001:123456:123457 [7] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-22 00:00:00.000001] a-very-long-hostname-of-a-big-cluster-node-0002:123456:123457 [7] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-22 00:00:00.000001] node17:9:9 [12] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"[2026-11-22 00:00:00.000001] node17:9:9 [-1] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x10d842d0 [nranks=2]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x10d842d0a [nranks=2]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x10d842d [nranks=2]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x10d842d0 [nranks=2]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x10D842D0 [nranks=2]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x7faa1f440000 [nranks=2]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x7faa1f440000 [nranks=3]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x7faa1f4400001 [nranks=3]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x7faa1f44000012 [nranks=3]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x7faa1f440000123 [nranks=3]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x7faa1f4400001234 [nranks=3]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x7faa1f44000012345 [nranks=3]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x7faa1f4400001234 [nranks=3]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x7faa1f4400001234[nranks=3]",
	"node17:9:9 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"node17:9:9 NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 0 datatype 7 op 0 root 0 comm 0x1 [nranks=2]",
	"node17:9:9 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
	"node17:9:9 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/3(5)/GDRDMA",
	"node17:9:9 [1] NCCL INFO Channel 01/0 : 0[0] -> 1[1] [send] via NET/IB/3(5)/GDRDMA",
	"node17:9:9 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/AWS Libfabric/0/GDRDMA/Shared",
	"node17:9:9 [1] NCCL INFO Channel 13/0 : 0[0] -> 1[1] [receive] via NET/AWS Libfabric/0/GDRDMA/Shared",
	"node17:9:9 [1] NCCL INFO Channel 7/0 : 0[0] -> 1[1] [receive] via NET/AWS Libfabric/0/GDRDMA/Shared",
	"node17:9:9 [1] NCCL INFO Channel 7/0 : 0[0] -> 1[1] [receive] via NET/AWS Libfabric/0/GDRDMA/Shared/",
	"node17:9:9 [1] NCCL INFO Channel 7/0 : 0[0] -> 1[1] [receive] via NET/AWS Libfabric/0/GDRDMA/Share",
	"node17:9:9 [1] NCCL INFO Channel 08/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
	"node17:9:9 [1] NCCL INFO Channel 09/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
	"node17:9:9 [1] NCCL INFO Channel 09/0 : 0[0] -> 1[1] via P2P/CUMEM/reae",
	"node17:9:9 [1] NCCL INFO Channel 00/24 :    0   1",
	"node17:9:9 [1] NCCL INFO Channel 0x/0 : 0[0] -> 1[1] via P2P/CUMEM",
	"node17:9:9 [1] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}",
	"",
	"   ",
}

func FuzzFastPathMatchesGeneral(f *testing.F) {
	for _, l := range fastPathVariants {
		f.Add([]byte(l), []byte("[2026-11-21 23:00:35.1] x:1:2 [0] NCCL INFO x"))
	}
	f.Add([]byte("[2026-11-21 23:00:36.1] a:1:1 [0] NCCL INFO Init"), []byte("[2026-11-21 23:00:36.1] a:1:1 [0] NCCL INFO Init"))
	f.Fuzz(func(t *testing.T, previous, line []byte) {
		// The previous line warms the caches the fast path may reuse.
		var fast Line
		Parse(previous, &fast)
		checkFastPath(t, &fast, line)
	})
}

// TestParserMatchesParse parses every capture line into a Line of its own with one Parser
// (as a reader that parses ahead of its use does) and into one reused Line: the fields must
// be the same, and a Line parsed by a Parser keeps no reference to its cache.
func TestParserMatchesParse(t *testing.T) {
	files, _ := filepath.Glob("../testdata/captures/*/*/*.log")
	if len(files) == 0 {
		t.Fatal("no captures")
	}
	var p Parser
	var reused Line
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range bytes.SplitAfter(b, []byte("\n")) {
			var own Line
			p.Parse(raw, &own)
			Parse(raw, &reused)
			if own.shared != nil {
				t.Fatal("a parsed line kept the parser's cache")
			}
			if !sameHeader(own.Header, reused.Header) {
				t.Fatalf("%s: %q: parser %+v, parse %+v", f, raw, own.Header, reused.Header)
			}
			if own.Kind == KindColl && !sameColl(own.Coll, reused.Coll) {
				t.Fatalf("%s: %q: parser %+v, parse %+v", f, raw, own.Coll, reused.Coll)
			}
			n++
		}
	}
	if n < 1000 {
		t.Fatalf("only %d lines", n)
	}
}

func sameHeader(a, b Header) bool {
	return a.Kind == b.Kind && a.Level == b.Level && a.LauncherRank == b.LauncherRank && a.HasTime == b.HasTime &&
		a.Time == b.Time && string(a.Host) == string(b.Host) && a.PID == b.PID && a.TID == b.TID && a.Dev == b.Dev &&
		string(a.File) == string(b.File) && a.FileLn == b.FileLn && string(a.Msg) == string(b.Msg)
}

func sameColl(a, b Coll) bool {
	return a.Op == b.Op && string(a.OpName) == string(b.OpName) && a.OpCount == b.OpCount && a.Count == b.Count &&
		a.Datatype == b.Datatype && a.RedOp == b.RedOp && a.Root == b.Root && a.Comm == b.Comm && a.NRanks == b.NRanks
}
