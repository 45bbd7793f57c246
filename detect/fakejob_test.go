package detect

import (
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// t0 is the fake clock's origin: rules read time only from the Job.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func us(d time.Duration) snapshot.Micros { return snapshot.MicrosOf(t0.Add(d)) }

// step is the op pattern every rank issues per training step.
var step = []snapshot.Op{
	{Op: "AllReduce", Count: 6000000, Dtype: "float32", Red: "sum"},
	{Op: "AllReduce", Count: 2000000, Dtype: "float32", Red: "sum"},
	{Op: "AllGather", Count: 262144, Dtype: "bfloat16"},
}

// rank builds a process with one communicator "0xc0ffee" holding n ops at period apart,
// each arriving lag late; edit mutates ops by position.
func rank(r, n int, period, lag time.Duration, edit func(seq int64, o *snapshot.Op)) *Proc {
	c := snapshot.Comm{ID: "0xc0ffee", Ptr: "0x1", Rank: r, NRanks: 0, State: "ready"}
	for s := int64(1); s <= int64(n); s++ {
		o := step[(s-1)%int64(len(step))]
		o.Seq, o.T = s, us(time.Duration(s)*period+lag)
		if edit != nil {
			edit(s, &o)
		}
		c.Recent = append(c.Recent, o)
	}
	c.Count = int64(n)
	if n > 0 {
		last := c.Recent[n-1]
		c.Last = &last
	}
	return &Proc{Process: snapshot.Process{Host: "node" + string(rune('0'+r)), PID: 100 + r, Rank: r, LocalRank: 0, CudaDev: 0,
		BusID: "1b000", Comms: []snapshot.Comm{c}}, Node: "node" + string(rune('0'+r))}
}

func job(now time.Duration, procs ...*Proc) *Job {
	for _, p := range procs {
		for i := range p.Comms {
			p.Comms[i].NRanks = len(procs)
		}
	}
	return NewJob("j", t0.Add(now), procs, map[string]*snapshot.Node{})
}

func only(t *testing.T, fs []Finding, kind incident.Kind) Finding {
	t.Helper()
	var got []Finding
	for _, f := range fs {
		if f.Kind == kind {
			got = append(got, f)
		}
	}
	if len(got) != 1 {
		t.Fatalf("want one %s finding, got %d: %+v", kind, len(got), fs)
	}
	return got[0]
}

func culpritRanks(f Finding) []int {
	var out []int
	for _, c := range f.Culprits {
		out = append(out, c.Rank)
	}
	return out
}

func gpuNode(name string, state snapshot.GPUState, xids ...int) *snapshot.Node {
	g := snapshot.GPU{Index: 0, BusID: "1b000", Util: 100, PowerW: 120, PowerLimitW: 700, State: state}
	for _, x := range xids {
		g.XIDs = append(g.XIDs, snapshot.XID{Code: x, T: us(time.Second)})
	}
	return &snapshot.Node{Node: name, GPUs: []snapshot.GPU{g}}
}
