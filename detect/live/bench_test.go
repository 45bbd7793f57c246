package live

import (
	"fmt"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/snapshot"
)

// bigJob is a job of nodes × 8 ranks with 4 communicators per rank: the world, a
// tensor-parallel group per node, a data-parallel group per local rank, and a pipeline
// pair; every rank has published 16 recent ops and marks on each.
func bigJob(nodes int, now time.Time) *State {
	s := NewState()
	for n := 0; n < nodes; n++ {
		node := &snapshot.Node{Job: "big", Node: fmt.Sprintf("node%05d", n), Started: 1}
		for l := 0; l < 8; l++ {
			rank := n*8 + l
			p := snapshot.Process{Host: node.Node, PID: 1000 + l, Rank: rank, CudaDev: l, BusID: fmt.Sprintf("%x000", 0x18+l)}
			for ci, c := range []struct {
				id   string
				rank int
				n    int
			}{
				{"0xworld", rank, nodes * 8},
				{fmt.Sprintf("0xworld/s1c%d", n), l, 8},
				{fmt.Sprintf("0xworld/s2c%d", l), n, nodes},
				{fmt.Sprintf("0xworld/s3c%d", n/2), n % 2, 2},
			} {
				cm := snapshot.Comm{ID: c.id, Ptr: fmt.Sprintf("0x%x", ci+1), Rank: c.rank, NRanks: c.n, State: "ready", Count: 1000}
				for k := int64(985); k <= 1000; k++ {
					cm.Recent = append(cm.Recent, snapshot.Op{Seq: k, Op: "AllReduce", Count: uint64(1 << (k % 4)), Dtype: "bfloat16",
						Red: "sum", T: snapshot.MicrosOf(now.Add(-time.Duration(1000-k) * 10 * time.Millisecond))})
				}
				last := cm.Recent[len(cm.Recent)-1]
				cm.Last = &last
				cm.Marks = []snapshot.Mark{{Seq: 992, Digest: "abc", T: cm.Recent[7].T}}
				p.Comms = append(p.Comms, cm)
			}
			node.Processes = append(node.Processes, p)
		}
		s.Put(node, now)
	}
	return s
}

// BenchmarkEvaluate4096 is the detector's evaluation of one job of 4,096 ranks × 4
// communicators: building the view and running every rule (make bench-detector).
func BenchmarkEvaluate4096(b *testing.B) { benchmarkEvaluate(b, 512) }

// BenchmarkEvaluate16384 is the same at 16,384 ranks (2,048 nodes).
func BenchmarkEvaluate16384(b *testing.B) { benchmarkEvaluate(b, 2048) }

func benchmarkEvaluate(b *testing.B, nodes int) {
	now := time.Now()
	d := bigDetectorOf(nodes, now)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuSeconds(b)
	for i := 0; i < b.N; i++ {
		fs, _ := d.evaluateJob("big", now, 0)
		if len(fs) != 0 {
			b.Fatalf("a healthy job gave findings: %+v", fs[0])
		}
	}
	b.ReportMetric((cpuSeconds(b)-cpu0)*1e3/float64(b.N), "cpu-ms/cycle")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
}

// BenchmarkEvaluate4096Stuck: the same job a minute after every communicator stopped (a hang
// at scale): the rules that compare communicators pairwise (OrderInversion) do their most.
func BenchmarkEvaluate4096Stuck(b *testing.B) {
	now := time.Now()
	d := bigDetector(now)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.evaluateJob("big", now.Add(time.Minute), 0)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
}

// bigDetector is a detector holding bigJob's 4,096 ranks.
func bigDetector(now time.Time) *Detector { return bigDetectorOf(512, now) }

// bigDetectorOf is a detector holding bigJob's nodes × 8 ranks.
func bigDetectorOf(nodes int, now time.Time) *Detector {
	d := &Detector{opts: Options{Rules: detect.DefaultConfig()}, state: bigJob(nodes, now), lostTimes: map[string][]time.Time{}}
	d.opts.defaults()
	return d
}
