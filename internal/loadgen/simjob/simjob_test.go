package simjob

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// TestNodeShape: a node's snapshot carries what the detector needs and the sidecar sends:
// 8 ranks of 4 communicators, the ops since the previous snapshot (at least 4), and the
// silent rank stops once injected.
func TestNodeShape(t *testing.T) {
	start := time.Now().Add(-time.Hour)
	j := New("j", 64, 4, time.Second, start, 259)
	n, sent := j.Node(32, start.Add(100*time.Second), nil)
	if len(n.Processes) != 8 || len(n.GPUs) != 8 || len(n.Ports) != 8 {
		t.Fatalf("%d ranks, %d GPUs, %d ports", len(n.Processes), len(n.GPUs), len(n.Ports))
	}
	for _, p := range n.Processes {
		if len(p.Comms) != CommsPerRank {
			t.Fatalf("rank %d: %d communicators", p.Rank, len(p.Comms))
		}
	}
	n2, _ := j.Node(32, start.Add(101*time.Second), sent)
	if got := len(n2.Processes[0].Comms[1].Recent); got != 5 {
		t.Errorf("tensor-parallel ops of one second: %d, want 5", got)
	}
	if got := len(n2.Processes[0].Comms[0].Recent); got != 4 {
		t.Errorf("world ops: %d, want at least 4", got)
	}
	fault := j.Inject(start.Add(101 * time.Second))
	later, _ := j.Node(32, fault.Add(10*time.Second), nil)
	if c, o := later.Processes[3].Comms[0].Count, later.Processes[2].Comms[0].Count; c != o-1 {
		t.Errorf("silent rank at %d, others at %d: want one behind", c, o)
	}
}

// cpuNow is this thread's CPU time (the benchmark's loop runs on one locked thread).
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEncodings compares what a node writes each second at steady state (docs/scale.md,
// "What travels"): plain JSON (before), JSON compressed alone, and JSON compressed against
// a base one second and one minute old (what sidecars write now), with each one's CPU to
// encode and to decode back to a snapshot.
func BenchmarkEncodings(b *testing.B) {
	start := time.Now().Add(-time.Hour)
	const nodes = 64
	job := New("j", 512, 4, time.Second, start, -1)
	var w snapshot.Wire
	type sample struct{ json, full, delta1, delta60 []byte }
	var samples []sample
	var bases1, bases60 []*snapshot.Base
	for n := 0; n < nodes; n++ {
		at := func(sec int) []byte {
			_, sent := job.Node(n, start.Add(time.Duration(sec-1)*time.Second), nil)
			sn, _ := job.Node(n, start.Add(time.Duration(sec)*time.Second), sent)
			b, err := snapshot.Encode(sn)
			if err != nil {
				panic(err)
			}
			return b
		}
		cur := at(200)
		b1, b60 := snapshot.NewBase(at(199)), snapshot.NewBase(at(140))
		full, _ := w.Full(cur)
		d1, _ := w.Delta(cur, b1)
		d60, _ := w.Delta(cur, b60)
		samples = append(samples, sample{cur, full, d1, d60})
		bases1, bases60 = append(bases1, b1), append(bases60, b60)
	}
	for _, enc := range []string{"json", "zstd", "zstd+base1s", "zstd+base60s"} {
		b.Run(enc, func(b *testing.B) {
			runtime.LockOSThread() // cpuNow reads this thread's CPU time
			defer runtime.UnlockOSThread()
			encode := func(n int) []byte {
				var v []byte
				switch enc {
				case "json":
					v = samples[n].json
				case "zstd":
					v, _ = w.Full(samples[n].json)
				case "zstd+base1s":
					v, _ = w.Delta(samples[n].json, bases1[n])
				case "zstd+base60s":
					v, _ = w.Delta(samples[n].json, bases60[n])
				}
				return v
			}
			values := make([][]byte, nodes)
			var size int
			// Whole loops are timed: a thread's CPU time moves in scheduler ticks.
			t0 := cpuNow()
			for i := 0; i < b.N; i++ {
				v := encode(i % nodes)
				values[i%nodes] = v
				size += len(v)
			}
			encCPU := cpuNow() - t0
			t0 = cpuNow()
			for i := 0; i < b.N; i++ {
				n := i % nodes
				base := bases1[n]
				if enc == "zstd+base60s" {
					base = bases60[n]
				}
				if _, err := w.Decode(values[n], base); err != nil {
					b.Fatal(err)
				}
			}
			decCPU := cpuNow() - t0
			b.ReportMetric(float64(size)/float64(b.N), "B/node")
			b.ReportMetric(float64(encCPU.Microseconds())/float64(b.N), "enc-cpu-µs")
			b.ReportMetric(float64(decCPU.Microseconds())/float64(b.N), "dec-cpu-µs")
		})
	}
}
