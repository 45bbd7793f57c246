package jobsim

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/gpu"
	"github.com/ncclwatch/watchdog/heartbeat/ibport/ibsim"
)

// gpuState is what a rank's GPU is doing, as heartbeat/gpu.Classify tells it from
// utilization and power.
type gpuState uint8

const (
	gpuIdle      gpuState = iota // no kernel: 0 %, 80-100 W (host code stuck, paused, exited)
	gpuComputing                 // ~95 %, ~600 W of 700 W
	gpuWaiting                   // an NCCL kernel spinning in a collective: 100 %, ~120 W
)

// setGPU sets GPU i of a node to a state's readings, with a little noise.
func (s *Sim) setGPU(n *simNode, i int, st gpuState, salt uint64) {
	u := func(k uint64) float64 { return s.unit(purposeGPU, uint64(n.Index), uint64(i), salt, k) }
	n.GPUs.Update(i, func(g *gpu.FakeGPU) {
		switch st {
		case gpuComputing:
			g.Util = 93 + uint32(u(1)*6)
			g.MemUtil = 35 + uint32(u(2)*10)
			g.PowerMW = 560_000 + uint32(u(3)*80_000)
			g.TempC = 62 + uint32(u(4)*8)
		case gpuWaiting:
			g.Util = 100
			g.MemUtil = 1 + uint32(u(2)*3)
			g.PowerMW = 115_000 + uint32(u(3)*15_000)
			g.TempC = 48 + uint32(u(4)*4)
		default:
			g.Util = 0
			g.MemUtil = 0
			g.PowerMW = 80_000 + uint32(u(3)*20_000)
			g.TempC = 33 + uint32(u(4)*4)
		}
		g.SMClockMHz = g.SMMaxMHz
	})
}

// netBytes is what a rank sends (and receives) over its HCA in one step: the ring
// AllReduce of the data-parallel buckets moves 2(n-1)/n of their bytes; pipeline Sends
// cross nodes whole. Intra-node traffic rides NVLink.
func (s *Sim) netBytes(r *simRank) uint64 {
	var b float64
	for _, op := range r.plan {
		c := r.comms[op.comm]
		if c.g.nNodes < 2 {
			continue
		}
		size := float64(op.count * dtypeSize(op.dtype))
		switch {
		case !op.coll:
			if op.name == "Send" {
				b += size
			}
		default:
			n := float64(len(c.g.members))
			b += size * 2 * (n - 1) / n
		}
	}
	return uint64(b)
}

// The per-port counters that traffic advances (port_*_data count 4-octet words).
var trafficCounters = []string{"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
	"unicast_xmit_packets", "unicast_rcv_packets"}

// addTraffic counts steps of traffic of a node's ranks on their HCAs; the caller writes.
func (s *Sim) addTraffic(n *simNode, steps func(r *simRank) int) {
	n.portMu.Lock()
	defer n.portMu.Unlock()
	for _, r := range n.ranks {
		k := steps(r)
		if k <= 0 {
			continue
		}
		bytes := s.netBytes(r) * uint64(k)
		c := n.ports[r.hca].Counters
		c["port_xmit_data"] += bytes / 4
		c["port_rcv_data"] += bytes / 4
		pk := bytes / 4096
		c["port_xmit_packets"] += pk
		c["port_rcv_packets"] += pk
		c["unicast_xmit_packets"] += pk
		c["unicast_rcv_packets"] += pk
	}
}

// writeTraffic rewrites the traffic counters of a node's ports, at most once a second
// unless forced.
func (s *Sim) writeTraffic(n *simNode, force bool) error {
	if s.cfg.LogsOnly {
		return nil
	}
	n.portMu.Lock()
	defer n.portMu.Unlock()
	now := time.Now()
	if !force && now.Sub(n.portWritten) < time.Second {
		return nil
	}
	n.portWritten = now
	for i, p := range n.ports {
		dir := filepath.Join(n.IBRoot, p.Device, "ports", strconv.Itoa(p.Port), "counters")
		for _, name := range trafficCounters {
			if err := ibsim.WriteFile(filepath.Join(dir, name), strconv.FormatUint(n.ports[i].Counters[name], 10)+"\n"); err != nil {
				return fmt.Errorf("jobsim: %w", err)
			}
		}
	}
	return nil
}

// degradePort rewrites one HCA port: trained at 1X NDR (100 of 400 Gb/s), or DOWN.
func (s *Sim) degradePort(n *simNode, hca int, down bool) error {
	n.portMu.Lock()
	defer n.portMu.Unlock()
	p := &n.ports[hca]
	if down {
		p.State, p.PhysState = "DOWN", "Disabled"
		p.Counters["link_downed"]++
	} else {
		p.Rate = ibsim.FormatRate(1, "NDR")
		p.Counters["link_error_recovery"]++
	}
	if s.cfg.LogsOnly {
		return nil
	}
	if err := ibsim.WritePort(n.IBRoot, *p); err != nil {
		return fmt.Errorf("jobsim: %w", err)
	}
	return nil
}
