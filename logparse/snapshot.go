package logparse

import (
	"slices"
	"sort"
	"strconv"

	"github.com/ncclwatch/watchdog/snapshot"
)

// SnapshotOptions say how much detail Snapshot includes.
type SnapshotOptions struct {
	// Recent is how many of each communicator's latest ops to include; -1 includes the
	// whole ring (offline analysis).
	Recent int
	// After, when set, limits each communicator's recent ops to positions after
	// After(ptr) (ops a reader already has), keeping at least MinRecent of them.
	After     func(ptr uint64) int64
	MinRecent int
	// RecentSince includes recent ops only for communicators that moved at or after this
	// time (µs); idle communicators then carry their count and last op only. 0 disables.
	RecentSince int64
	// Final hands the tracker's buffers over instead of copying them: the tracker is not
	// used after this snapshot (a post-mortem's last).
	Final bool
}

// Snapshot renders the tracker in the published schema.
func (t *Tracker) Snapshot(o SnapshotOptions) snapshot.Process {
	p := snapshot.Process{
		Host:       t.Host,
		PID:        t.PID,
		Rank:       t.GlobalRank(),
		LocalRank:  t.localRank(),
		NCCL:       t.Version,
		Timestamps: t.TimestampDigits >= 0,
		TSDigits:   max(t.TimestampDigits, 0),
		Network:    t.Network,
		NetDevs:    t.NetDevs,
		Transports: t.Transports,
		Addrs:      t.Addrs,
		LastLine:   snapshot.Micros(t.LastTime),
		Lines:      t.Lines,
	}
	dev, bus := t.Device()
	p.CudaDev = dev
	if bus != 0 {
		p.BusID = strconv.FormatUint(bus, 16)
	}
	p.Comms = make([]snapshot.Comm, 0, len(t.all))
	for _, c := range t.all {
		p.Comms = append(p.Comms, c.snapshot(o))
	}
	p.Events = t.Events()
	return p
}

func (c *Comm) snapshot(o SnapshotOptions) snapshot.Comm {
	sc := snapshot.Comm{
		ID: c.ID, Ptr: "0x" + strconv.FormatUint(c.Ptr, 16), Rank: c.Rank, NRanks: c.NRanks,
		CudaDev: c.CudaDev, State: c.State, Count: c.Count,
	}
	if c.BusID != 0 {
		sc.BusID = strconv.FormatUint(c.BusID, 16)
	}
	if c.State == snapshot.CommInit {
		sc.InitAt = snapshot.Micros(c.Created)
	}
	if last, ok := c.Last(); ok {
		op := SnapshotOp(last)
		sc.Last = &op
	}
	n := o.Recent
	if n != 0 && (o.RecentSince == 0 || c.LastT >= o.RecentSince) {
		// The ring rendered in place, newest first from the back (a copy of the ring first
		// cost a post-mortem a tenth of its memory): the newest n kept positions.
		kept := min(c.Count, int64(len(c.ring)))
		if n > 0 {
			kept = min(kept, int64(n))
		}
		out := make(snapshot.Ops, kept)
		at := len(out)
		for s := c.Count; s > c.Count-min(c.Count, int64(len(c.ring))) && at > 0; s-- {
			// A slot not yet refilled after a restore holds another position: skip it.
			if r := &c.ring[int(s-1)&(len(c.ring)-1)]; r.Seq == s {
				at--
				fillOp(&out[at], r)
			}
		}
		out = out[at:]
		if o.After != nil {
			after := o.After(c.Ptr)
			i := 0
			for i < len(out)-o.MinRecent && out[i].Seq <= after {
				i++
			}
			out = out[i:]
		}
		sc.Recent = out
	}
	if len(c.times) > 0 {
		if o.Final {
			sc.Times = c.times
		} else {
			sc.Times = slices.Clone(c.times)
		}
		sc.TimesFrom = c.timesFrom
	}
	marks := c.Marks()
	if o.After != nil {
		// Like ops: the marks a reader does not have yet, and the newest one.
		after := o.After(c.Ptr)
		i := 0
		for i < len(marks)-1 && marks[i].Seq <= after {
			i++
		}
		marks = marks[i:]
	}
	for _, m := range marks {
		sc.Marks = append(sc.Marks, snapshot.Mark{Seq: m.Seq, Digest: strconv.FormatUint(m.Digest, 16), T: snapshot.Micros(m.T)})
	}
	if len(c.P2P) > 0 {
		peers := make([]int, 0, len(c.P2P))
		for peer := range c.P2P {
			peers = append(peers, peer)
		}
		sort.Ints(peers)
		for _, peer := range peers {
			pc := c.P2P[peer]
			sc.P2P = append(sc.P2P, snapshot.P2P{Peer: peer, Sends: pc.Sends, Recvs: pc.Recvs,
				LastSend: snapshot.Micros(pc.LastSend), LastRecv: snapshot.Micros(pc.LastRecv)})
		}
	}
	return sc
}

// localRank is the local rank NCCL printed, else the one torchrun's "[defaultN]:" gave every
// line, else -1.
func (t *Tracker) localRank() int {
	if t.LocalRank >= 0 {
		return t.LocalRank
	}
	return t.launcher[RankFromNode].value()
}

// SnapshotOp renders an op record.
func SnapshotOp(r OpRecord) snapshot.Op {
	var op snapshot.Op
	fillOp(&op, &r)
	return op
}

// fillOp renders r into a zero op in place: a rendered ring is thousands of them, and one
// built aside and copied in is read back from stores the CPU cannot forward.
func fillOp(op *snapshot.Op, r *OpRecord) {
	op.Seq, op.Op, op.Count, op.Dtype, op.T, op.Idx = r.Seq, r.Op.String(), r.Count, r.Dtype.String(), snapshot.Micros(r.T), r.Idx
	if r.Op.Reduces() {
		op.Red = RedOpName(r.RedOp)
	}
	if r.Op.Rooted() {
		op.Root = int(r.Root)
	}
}
