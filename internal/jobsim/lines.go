package jobsim

import (
	"fmt"
	"strconv"
	"strings"
)

// ringChannels is how many channels the simulated communicators connect (real H100/H200
// jobs use 16-32; 8 keeps init short without changing any format).
const ringChannels = 8

type tidLine struct {
	tid  int
	text string
}

func member(s *Sim, c *commRank, i int) *simRank {
	n := len(c.g.members)
	return s.ranks[c.g.members[(i%n+n)%n]]
}

// ringLines are a rank's channel connections on a communicator's ring: NVLink (P2P) to a
// neighbour on the node, the IB NIC of its GPU (NET/IB/<dev>/GDRDMA) across nodes.
// "%d[%d]" is rank[nvmlDev]; "Channel %02d/%d" is channel/connIndex.
func (s *Sim) ringLines(r *simRank, k CommKind) []tidLine {
	c := r.comms[k]
	n := len(c.g.members)
	if n < 2 {
		return nil
	}
	next, prev := member(s, c, c.rank+1), member(s, c, c.rank-1)
	nextRank, prevRank := (c.rank+1)%n, (c.rank+n-1)%n
	var out []tidLine
	for ch := 0; ch < ringChannels; ch++ {
		if prev.node != r.node {
			out = append(out, tidLine{tidProgress, fmt.Sprintf("Channel %02d/0 : %d[%d] -> %d[%d] [receive] via NET/IB/%d/GDRDMA",
				ch, prevRank, prev.LocalRank, c.rank, r.LocalRank, r.hca)})
		}
		if next.node == r.node {
			out = append(out, tidLine{0, fmt.Sprintf("Channel %02d/0 : %d[%d] -> %d[%d] via %s",
				ch, c.rank, r.LocalRank, nextRank, next.LocalRank, s.d.p2pTransport())})
		} else {
			out = append(out, tidLine{tidProgress, fmt.Sprintf("Channel %02d/0 : %d[%d] -> %d[%d] [send] via NET/IB/%d/GDRDMA",
				ch, c.rank, r.LocalRank, nextRank, next.LocalRank, r.hca)})
		}
	}
	return out
}

// p2pLines are the point-to-point connections (connIndex 1) made at the first Send or Recv.
func (s *Sim) p2pLines(r *simRank, op *planOp) []tidLine {
	c := r.comms[op.comm]
	peer := member(s, c, op.root)
	var out []tidLine
	for ch := 0; ch < 2; ch++ {
		from, fromDev, to, toDev, dir := c.rank, r.LocalRank, op.root, peer.LocalRank, "send"
		if op.name == "Recv" {
			from, fromDev, to, toDev, dir = op.root, peer.LocalRank, c.rank, r.LocalRank, "receive"
		}
		if peer.node == r.node {
			out = append(out, tidLine{0, fmt.Sprintf("Channel %02d/1 : %d[%d] -> %d[%d] via %s", ch, from, fromDev, to, toDev, s.d.p2pTransport())})
		} else {
			out = append(out, tidLine{tidProgress, fmt.Sprintf("Channel %02d/1 : %d[%d] -> %d[%d] [%s] via NET/IB/%d/GDRDMA/Shared", ch, from, fromDev, to, toDev, dir, r.hca)})
		}
	}
	return out
}

// ringDump is comm rank 0's "Channel %02d/%02d :" line: the ring order, cut near 128 bytes.
func ringDump(ch, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Channel %02d/%02d :", ch, ringChannels)
	for i := 0; i < n; i++ {
		if b.Len() > 120 {
			b.WriteString(" ...")
			break
		}
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(i))
	}
	return b.String()
}

func treesLine(c *commRank) string {
	var b strings.Builder
	b.WriteString("Trees")
	n := len(c.g.members)
	for ch := 0; ch < ringChannels; ch++ {
		up, down := -1, -1
		if c.rank > 0 {
			up = c.rank - 1
		}
		if c.rank+1 < n {
			down = c.rank + 1
		}
		if ch%2 == 1 {
			up, down = down, up
		}
		fmt.Fprintf(&b, " [%d] %d/-1/-1->%d->%d", ch, down, c.rank, up)
	}
	return b.String()
}

// initLine renders an Init START or COMPLETE line of a communicator (§4.2).
func (s *Sim) initLine(r *simRank, c *commRank, start bool) string {
	d := s.d
	isSplit := c.g.kind != CommWorld
	phase := "Init COMPLETE"
	if start {
		phase = "Init START"
	}
	var b strings.Builder
	if start && !isSplit && d.rankPrefix() {
		fmt.Fprintf(&b, "[Rank %d] ", r.Rank)
	}
	form := d.split()
	if !isSplit || form == splitAsRoot {
		b.WriteString(d.initAPI(false))
		fmt.Fprintf(&b, "comm 0x%x rank %d nranks %d cudaDev %d nvmlDev %d busId %s commId 0x%x - %s",
			c.ptr, c.rank, len(c.g.members), r.CudaDev, r.CudaDev, r.BusID, c.g.commID, phase)
		return b.String()
	}
	b.WriteString(d.initAPI(true))
	fmt.Fprintf(&b, "comm 0x%x rank %d nranks %d cudaDev %d nvmlDev %d busId %s parent 0x%x ",
		c.ptr, c.rank, len(c.g.members), r.CudaDev, r.CudaDev, r.BusID, r.comms[CommWorld].ptr)
	switch form {
	case splitWithCount:
		fmt.Fprintf(&b, "splitCount %d ", c.g.splitCount)
	case splitWithChildren:
		fmt.Fprintf(&b, "childCount %d ", c.g.splitCount)
	}
	fmt.Fprintf(&b, "color %d key %d", c.g.color, r.Rank)
	switch {
	case form == splitWithCommID:
		fmt.Fprintf(&b, " commId 0x%x - %s", c.g.commID, phase)
	case start:
		b.WriteString("- " + phase) // 2.23+: "key %d- Init START"
	default:
		b.WriteString(" - " + phase)
	}
	return b.String()
}

func (s *Sim) destroyLine(r *simRank, c *commRank) string {
	return fmt.Sprintf("comm 0x%x rank %d nranks %d cudaDev %d busId %s - Destroy COMPLETE",
		c.ptr, c.rank, len(c.g.members), r.CudaDev, r.BusID)
}

func (s *Sim) ibDeviceList(r *simRank) string {
	var b strings.Builder
	b.WriteString("NET/IB : Using")
	for i := 0; i < hcaCount; i++ {
		b.WriteString(s.d.ibDevice(i, "mlx5_"+strconv.Itoa(i)))
	}
	b.WriteString(" [RO]; OOB ib0:" + r.node.Addr + "<0>")
	return b.String()
}

// ibPeer is the address NCCL names in an IB completion error: the next node on the
// rank's data-parallel (else world) ring, at an ephemeral port.
func (s *Sim) ibPeer(r *simRank) string {
	c := r.comms[CommDP]
	if c == nil {
		c = r.comms[CommWorld]
	}
	for i := 1; i < len(c.g.members); i++ {
		if p := member(s, c, c.rank+i); p.node != r.node {
			return p.node.Addr + "<" + strconv.Itoa(40000+int(s.rnd(purposePort, uint64(r.Rank))%20000)) + ">"
		}
	}
	return r.node.Addr + "<45123>"
}
