package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// wireNode is a node of 8 ranks at step s: counts and recent ops move, the rest stays.
func wireNode(s int64) *Node {
	n := &Node{Job: "train", Node: "node7", Seq: uint64(s), Time: Micros(1795306000000000 + s*1e6), Started: 1795306000000000}
	for r := 0; r < 8; r++ {
		p := Process{Host: "node7", PID: 100 + r, Rank: 56 + r, LocalRank: r, CudaDev: r, BusID: fmt.Sprintf("%x000", 0x18+r),
			NCCL: "2.28.9", State: ProcRunning, GPUState: GPUComputing}
		for c := 0; c < 3; c++ {
			cm := Comm{ID: fmt.Sprintf("0xfeed/s%dc%d", c, r), Ptr: fmt.Sprintf("0x%x", c+1), Rank: r, NRanks: 8, State: CommReady, Count: s * 5}
			for k := s*5 - 4; k <= s*5; k++ {
				cm.Recent = append(cm.Recent, Op{Seq: k, Op: "AllReduce", Count: 1 << (k % 5), Dtype: "bfloat16", Red: "sum",
					T: Micros(1795306000000000 + k*200000 + int64(r))})
			}
			last := cm.Recent[len(cm.Recent)-1]
			cm.Last = &last
			cm.Marks = Marks{{Seq: s * 5 / 16 * 16, Digest: fmt.Sprintf("%x", s*5/16), T: Micros(1795306000000000 + s)}}
			p.Comms = append(p.Comms, cm)
		}
		n.Processes = append(n.Processes, p)
	}
	return n
}

func encodeJSON(t testing.TB, n *Node) []byte {
	t.Helper()
	b, err := Encode(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWireRoundTrip: a full value and values compressed against a base decode to exactly
// the snapshot, plain JSON still reads, and a value compressed against a base is smaller
// than the same compressed alone.
func TestWireRoundTrip(t *testing.T) {
	var w Wire
	baseJSON := encodeJSON(t, wireNode(100))
	full, err := w.Full(baseJSON)
	if err != nil {
		t.Fatal(err)
	}
	base, err := w.DecodeBase(full)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(base.JSON(), baseJSON) || base.ID() != BaseID(baseJSON) {
		t.Fatal("base does not round-trip")
	}
	for _, s := range []int64{100, 101, 160} {
		want := wireNode(s)
		j := encodeJSON(t, want)
		v, err := w.Delta(j, base)
		if err != nil {
			t.Fatal(err)
		}
		alone, _ := w.Full(j)
		t.Logf("step %d: JSON %d bytes, zstd %d, against a base %d steps old %d", s, len(j), len(alone), s-100, len(v))
		if len(v) >= len(alone) {
			t.Errorf("step %d: %d bytes against the base, %d alone", s, len(v), len(alone))
		}
		if id, err := NeedsBase(v); err != nil || id != base.ID() {
			t.Errorf("NeedsBase = %08x, %v; want %08x", id, err, base.ID())
		}
		got, err := w.Decode(v, base)
		if err != nil {
			t.Fatal(err)
		}
		back, _ := Decode(j)
		if !reflect.DeepEqual(got, back) {
			t.Fatalf("step %d: decoded snapshot differs", s)
		}
	}
	// Plain JSON (older sidecars, tests) reads as before.
	if n, err := w.Decode(baseJSON, nil); err != nil || n.Node != "node7" {
		t.Fatalf("plain JSON: %v", err)
	}
	if _, err := w.Decode([]byte("garbage"), nil); err == nil {
		t.Error("garbage decoded")
	}
}

// TestWireWrongBase: a value needs the base it was made against; another base, or none,
// is an ErrNoBase, never a misread snapshot.
func TestWireWrongBase(t *testing.T) {
	var w Wire
	b1, b2 := NewBase(encodeJSON(t, wireNode(10))), NewBase(encodeJSON(t, wireNode(11)))
	v, err := w.Delta(encodeJSON(t, wireNode(12)), b1)
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range []*Base{nil, b2} {
		if _, err := w.Decode(v, base); !errors.Is(err, ErrNoBase) {
			t.Errorf("base %v: err %v, want ErrNoBase", base, err)
		}
	}
	if _, err := w.DecodeBase(v); err == nil {
		t.Error("a value compressed against a base taken for a base")
	}
}

// TestWireBounded: a value that would inflate past MaxWireJSON is refused (a sidecar's
// key cannot make the detector allocate without bound), and so is a body that large.
func TestWireBounded(t *testing.T) {
	var w Wire
	huge := bytes.Repeat([]byte("{"), MaxWireJSON+1)
	if _, err := w.Full(huge); err == nil {
		t.Error("an oversized body compressed")
	}
	enc, _ := zstd.NewWriter(nil)
	bomb := enc.EncodeAll(bytes.Repeat([]byte(" "), 4<<20), nil)
	if _, err := w.JSON(bomb, nil); err == nil {
		t.Errorf("a %d-byte frame of 4 MiB inflated", len(bomb))
	}
}

// TestWireConcurrent: one Wire serves many nodes' publishers and a detector at once
// (run with -race).
func TestWireConcurrent(t *testing.T) {
	var w Wire
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := NewBase(encodeJSON(t, wireNode(int64(20+g))))
			for s := int64(0); s < 4; s++ {
				j := encodeJSON(t, wireNode(int64(21+g)+s))
				v, err := w.Delta(j, base)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := w.JSON(v, base)
				if err != nil || !bytes.Equal(got, j) {
					t.Errorf("goroutine %d step %d: %v", g, s, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// FuzzWireDecode: whatever a key holds, decoding returns an error or a snapshot, never
// panics, and never inflates without bound.
func FuzzWireDecode(f *testing.F) {
	var w Wire
	base := NewBase(encodeJSON(f, wireNode(3)))
	v, _ := w.Delta(encodeJSON(f, wireNode(4)), base)
	full, _ := w.Full(base.JSON())
	f.Add(v)
	f.Add(full)
	f.Add(base.JSON())
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Fuzz(func(t *testing.T, b []byte) {
		if j, err := w.JSON(b, base); err == nil && len(j) > MaxWireJSON && b[0] != '{' {
			t.Fatalf("inflated to %d bytes", len(j))
		}
		w.Decode(b, base)
		w.DecodeBase(b)
	})
}

// wireNodes are nodes' bases (step 100) and their JSON 30 steps later.
func wireNodes(b *testing.B, nodes int) ([]*Base, [][]byte) {
	bases := make([]*Base, nodes)
	bodies := make([][]byte, nodes)
	for i := range bases {
		n := wireNode(100)
		n.Node = fmt.Sprintf("node%d", i)
		bases[i] = NewBase(encodeJSON(b, n))
		n = wireNode(130)
		n.Node = fmt.Sprintf("node%d", i)
		bodies[i] = encodeJSON(b, n)
	}
	return bases, bodies
}

// BenchmarkWireDelta: compressing a node against its base, with one node (a sidecar: the
// coder keeps its dictionary) and with 64 nodes sharing one Wire (a load generator: the
// coder switches dictionary at every call).
func BenchmarkWireDelta(b *testing.B) {
	for _, nodes := range []int{1, 64} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var w Wire
			bases, bodies := wireNodes(b, nodes)
			b.ReportAllocs()
			b.ResetTimer()
			var size int
			for i := 0; i < b.N; i++ {
				v, err := w.Delta(bodies[i%nodes], bases[i%nodes])
				if err != nil {
					b.Fatal(err)
				}
				size = len(v)
			}
			b.ReportMetric(float64(size), "B/value")
		})
	}
}

// BenchmarkWireDecode: decompressing a value against its base, switching base every call
// (a detector reading many nodes).
func BenchmarkWireDecode(b *testing.B) {
	var w Wire
	const nodes = 64
	bases, values := wireNodes(b, nodes)
	for i := range values {
		values[i], _ = w.Delta(values[i], bases[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := w.JSON(values[i%nodes], bases[i%nodes]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeJSON: a node's JSON to a snapshot, what the detector does for every value.
func BenchmarkDecodeJSON(b *testing.B) {
	j := encodeJSON(b, wireNode(130))
	b.SetBytes(int64(len(j)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := Decode(j); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the process's CPU time: on a shared machine wall time measures the neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
