package live

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/loadgen/simjob"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The detector's cost per unit (docs/scale.md, make bench-detector-scale): CPU per node
// write and per MB of node snapshots received from etcd (decoding them and folding them
// into the state), at 4,096 and 16,384 ranks; per evaluation: BenchmarkEvaluate4096 and
// BenchmarkEvaluate16384.

// benchDecode applies secs seconds of every node's writes at steady state, as the watch
// delivers them: with wire, values compressed against each node's base (what sidecars
// write; the bases, written once a minute, are applied before the timer with a first
// second of writes), else the plain JSON that sidecars wrote before.
func benchDecode(b *testing.B, nodes int, wire bool) {
	const secs = 2
	start := time.Now().Add(-time.Hour)
	job := simjob.New("big", nodes, 4, time.Second, start, -1)
	var w snapshot.Wire
	var warm []change
	seconds := make([][]change, secs) // a second's writes arrive as watch batches do
	var total int64
	bases := make([]*snapshot.Base, nodes)
	sent := make([]simjob.Sent, nodes)
	for s := -1; s < secs; s++ {
		for n := 0; n < nodes; n++ {
			sn, next := job.Node(n, start.Add(time.Duration(100+s)*time.Second), sent[n])
			sent[n] = next
			j, err := snapshot.Encode(sn)
			if err != nil {
				b.Fatal(err)
			}
			v := j
			if wire {
				if bases[n] == nil {
					bases[n] = snapshot.NewBase(j)
					full, _ := w.Full(j)
					warm = append(warm, change{key: snapshot.BaseKey(sn.Job, sn.Node), value: full})
				}
				if v, err = w.Delta(j, bases[n]); err != nil {
					b.Fatal(err)
				}
			}
			if s < 0 {
				warm = append(warm, change{key: snapshot.NodeKey(sn.Job, sn.Node), value: v})
				continue
			}
			seconds[s] = append(seconds[s], change{key: snapshot.NodeKey(sn.Job, sn.Node), value: v})
			total += int64(len(v))
		}
	}
	d := scaleDetector(NewState())
	d.owned["big"] = &ownedJob{life: detect.NewLifecycle(time.Second)}
	d.applyChanges(warm)
	runtime.GC()
	b.SetBytes(total)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuSeconds(b)
	for i := 0; i < b.N; i++ {
		for _, batch := range seconds {
			for k := 0; k < len(batch); k += 64 {
				d.applyChanges(batch[k:min(k+64, len(batch))])
			}
		}
	}
	cpu := cpuSeconds(b) - cpu0
	if got := d.m.badSnapshots; testutil.ToFloat64(got) != 0 {
		b.Fatalf("%v snapshots did not decode", testutil.ToFloat64(got))
	}
	nodeWrites := float64(b.N * nodes * secs)
	b.ReportMetric(float64(total)/float64(nodes*secs), "B/node-write")
	b.ReportMetric(cpu*1e6/nodeWrites, "cpu-µs/node-write")
	b.ReportMetric(cpu/(float64(b.N)*float64(total)/1e6), "cpu-s/MB")
}

// BenchmarkScaleDecode: CPU per node write and per MB received at 4,096 and 16,384 ranks, for
// the wire form and for plain JSON.
func BenchmarkScaleDecode(b *testing.B) {
	for _, wire := range []bool{true, false} {
		for _, nodes := range []int{512, 2048} {
			name := fmt.Sprintf("enc=json/ranks=%d", nodes*8)
			if wire {
				name = fmt.Sprintf("enc=wire/ranks=%d", nodes*8)
			}
			b.Run(name, func(b *testing.B) { benchDecode(b, nodes, wire) })
		}
	}
}

// cpuSeconds is the CPU time this process used so far (user and system, every thread): on
// a shared machine, wall time says more about the neighbours than about the code.
func cpuSeconds(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// scaleDetector is a detector holding s, with unregistered metrics.
func scaleDetector(s *State) *Detector {
	d := &Detector{opts: Options{Rules: detect.DefaultConfig()}, state: s, lostTimes: map[string][]time.Time{},
		incidents: map[string]incident.Incident{}, inbox: newInbox(), owned: map[string]*ownedJob{}}
	d.opts.defaults()
	d.m = newMetrics(d, nil)
	return d
}
