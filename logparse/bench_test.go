package logparse

import (
	"bytes"
	"os"
	"testing"
	"time"
)

var benchLine = []byte("[2026-11-21 23:00:35.402707] vm:607:607 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7faa1f440000 recvbuff 0x7faa1f440000 count 16384 datatype 7 op 0 root 0 comm 0x10d842d0 [nranks=2] stream (nil)\n")

func BenchmarkParseCollLine(b *testing.B) {
	var l Line
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Parse(benchLine, &l)
	}
}

func BenchmarkObserveCollLine(b *testing.B) {
	tr := NewTracker(TrackerOptions{})
	now := time.Now()
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tr.Observe(benchLine, now)
	}
}

// BenchmarkObserveCapture replays a real capture (all its lines) through a tracker.
func BenchmarkObserveCapture(b *testing.B) {
	data, err := os.ReadFile("../testdata/captures/nccl-2.28.9-2xH200/multicomm/nccl.vm.607.log")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	now := time.Now()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tr := NewTracker(TrackerOptions{})
		for _, l := range lines {
			tr.Observe(l, now)
		}
	}
}
