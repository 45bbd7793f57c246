package detect

import (
	"github.com/ncclwatch/watchdog/snapshot"
)

// The evidence timeline. A Job is every rank's evidence merged once: the sidecar joins a
// process's NCCL log, its profiler-plugin region, /proc and NVML into one snapshot.Process
// (and analyze does the same from files, Flight Recorder dumps and launcher output), the
// live detector adds each communicator's history across snapshots. Rules read the Job,
// never a source: an op instance (communicator, position) reads the same whether a log line,
// the plugin or a Flight Recorder entry said it.

// Instance is one member's view of the op at a position of a communicator.
type Instance struct {
	Member Member
	// Op is the signature and issue time, nil when this member's history no longer holds
	// the position (or never issued it: Issued says which).
	Op     *snapshot.Op
	Issued bool
	// Started: its kernel ran on the GPU; Done: it completed. Known only where a source
	// reports completion (the plugin, Flight Recorder): Measured says so.
	Started, Done, Measured bool
	// GPUStart is when its kernel started, where the source says (the op in flight).
	GPUStart snapshot.Micros
}

// InstanceOf is member m's view of position seq.
func InstanceOf(m Member, seq int64) Instance {
	c := m.Comm
	in := Instance{Member: m, Op: opAt(c, seq), Issued: c.Count >= seq}
	if d := c.Done; d != nil {
		in.Measured = true
		in.Started = d.Started >= seq || d.Done >= seq
		in.Done = d.Done >= seq
		if f := d.InFlight; f != nil && !f.P2P && f.Seq == seq {
			in.Started = f.GPUStart != 0
			in.GPUStart = f.GPUStart
			if in.Op == nil {
				in.Op = &f.Op
			}
		}
	}
	return in
}

// Instances lists every member's view of position seq of g, in communicator rank order.
func (g *Group) Instances(seq int64) []Instance {
	out := make([]Instance, len(g.Members))
	for i, m := range g.Members {
		out[i] = InstanceOf(m, seq)
	}
	return out
}
