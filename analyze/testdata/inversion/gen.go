//go:build ignore

// gen writes the order-inversion fixtures: NCCL 2.28.9 INFO logs of a 4-rank job on two
// hosts, a world communicator and two tensor-parallel groups made by new_group ({0,1}, then
// {2,3}: two ncclCommSplit calls on the world, each rank a member of one). Every step each
// rank calls its tensor-parallel AllReduce, then the world AllReduce; at step 21 rank 1 calls
// the world one first, and with CUDA_DEVICE_MAX_CONNECTIONS=1 the job deadlocks: every rank
// has issued both, none completes, the job is killed (no Destroy lines). In ranahead/ every
// host goes on issuing three more steps after the inverted one before it blocks, as PyTorch
// does (the GPU is deadlocked, the host is not), so the inverted pair is not the last one.
//
//	go run gen.go   # in this folder: rewrites timestamps/, plain/ and ranahead/
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func main() {
	for _, mode := range []string{"timestamps", "plain", "ranahead"} {
		if err := os.MkdirAll(mode, 0o755); err != nil {
			panic(err)
		}
		for r := 0; r < 4; r++ {
			if err := os.WriteFile(filepath.Join(mode, fmt.Sprintf("nccl.%s.%d.log", host(r), pid(r))), rankLog(r, mode != "plain", mode == "ranahead"), 0o644); err != nil {
				panic(err)
			}
		}
	}
}

func host(r int) string { return []string{"gpu-a", "gpu-a", "gpu-b", "gpu-b"}[r] }
func pid(r int) int     { return 2101 + r }

func rankLog(r int, stamps, ranAhead bool) []byte {
	var b []byte
	t := time.Date(2026, 11, 24, 10, 0, 1, 0, time.UTC).Add(time.Duration(r) * 137 * time.Microsecond)
	dev := r % 2
	line := func(step time.Duration, msg string) {
		t = t.Add(step)
		if stamps {
			b = append(b, t.Format("[2006-01-02 15:04:05.000000] ")...)
		}
		b = append(b, fmt.Sprintf("%s:%d:%d [%d] NCCL INFO %s\n", host(r), pid(r), pid(r), dev, msg)...)
	}
	world, tp := 0x55d0c1a0+r*0x1000, 0x55d9e3c0+r*0x1000
	bus := []string{"1b000", "3d000", "1b000", "3d000"}[r]
	split, color := 1, 1840383466
	if r >= 2 {
		split, color = 2, 953477190
	}
	line(0, "NCCL version 2.28.9+cuda12.9")
	line(300*time.Millisecond, fmt.Sprintf("ncclCommInitRankConfig comm 0x%x rank %d nranks 4 cudaDev %d nvmlDev %d busId %s commId 0x5e1f0a4d3c2b1a09 - Init START", world, r, dev, dev, bus))
	line(time.Millisecond, fmt.Sprintf("comm 0x%x rank %d nRanks 4 nNodes 2 localRanks 2 localRank %d MNNVL 0", world, r, dev))
	line(350*time.Millisecond, fmt.Sprintf("ncclCommInitRankConfig comm 0x%x rank %d nranks 4 cudaDev %d nvmlDev %d busId %s commId 0x5e1f0a4d3c2b1a09 - Init COMPLETE", world, r, dev, dev, bus))
	line(5*time.Millisecond, fmt.Sprintf("ncclCommSplit comm 0x%x rank %d nranks 2 cudaDev %d nvmlDev %d busId %s parent 0x%x splitCount %d color %d key %d- Init START", tp, r%2, dev, dev, bus, world, split, color, r%2))
	line(30*time.Millisecond, fmt.Sprintf("ncclCommSplit comm 0x%x rank %d nranks 2 cudaDev %d nvmlDev %d busId %s parent 0x%x splitCount %d color %d key %d - Init COMPLETE", tp, r%2, dev, dev, bus, world, split, color, r%2))
	op := func(comm, nranks int, count int) {
		line(40*time.Microsecond, fmt.Sprintf("AllReduce: opCount 0 sendbuff 0x7f3a1c000000 recvbuff 0x7f3a1c000000 count %d datatype 9 op 0 root 0 comm 0x%x [nranks=%d] stream 0x55e0f2a8c0a0", count, comm, nranks))
	}
	steps := 21
	if ranAhead {
		steps = 24
	}
	for step := 1; step <= steps; step++ {
		t = t.Add(95 * time.Millisecond) // forward and backward
		tpFirst := !(r == 1 && step == 21)
		if tpFirst {
			op(tp, 2, 4194304)
			op(world, 4, 1048576)
		} else {
			op(world, 4, 1048576)
			op(tp, 2, 4194304)
		}
	}
	return b
}
