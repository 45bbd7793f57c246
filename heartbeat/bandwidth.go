package heartbeat

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ncclwatch/watchdog/heartbeat/profile"
)

// Bandwidth, NCCL Inspector's view, from the profiler plugin's regions: per communicator,
// operation and message size bucket, the completed operations' execution time and the bytes
// they moved, summed over the node's ranks. The plugin keeps cumulative sums per communicator
// (profile.OpTiming); the sidecar adds each poll's increase to counters of its own, so that a
// rank that exits or restarts never makes a counter go back.
//
// Algorithm and bus bandwidth follow NCCL's (nccl-tests' PERFORMANCE.md) definitions, as
// Inspector computes them: algorithm bytes are the message (count x datatype size) for
// AllReduce, Broadcast, Reduce, Send and Recv, and the message x ranks for AllGather and
// ReduceScatter (their per-rank count is a part of the whole); bus bytes multiply them by
// 2(n-1)/n for AllReduce, (n-1)/n for AllGather and ReduceScatter, 1 for the others. A
// bandwidth is bytes over execution seconds: rate(bytes) / rate(seconds) in PromQL.

// maxBandwidthComms bounds the communicators exported by their own label; the ops of any
// beyond it are summed under comm="other". A communicator not seen for KeepExited leaves.
const maxBandwidthComms = 16

// otherComm is the label of communicators past maxBandwidthComms.
const otherComm = "other"

var (
	bwLabels    = []string{"comm", "op", "size_bucket"}
	descOpTime  = prometheus.NewDesc("ncclwatch_comm_op_duration_seconds", helpOpTime, bwLabels, nil)
	helpOpTime  = "Execution time of the completed collective and p2p operations the profiler plugin timed (first kernel channel start to last stop, by the GPU's clock where NCCL gives it), summed over the node's ranks, by communicator (short commId; \"other\" past 16), operation and message size (count x datatype size per rank)."
	descOpBytes = prometheus.NewDesc("ncclwatch_comm_op_bytes_total", "Bytes the timed operations moved by NCCL's algorithm-bandwidth definition (the message; x ranks for AllGather and ReduceScatter), summed over the node's ranks; rate() over ncclwatch_comm_op_duration_seconds_sum's is the algorithm bandwidth.", bwLabels, nil)
	descBusB    = prometheus.NewDesc("ncclwatch_comm_op_bus_bytes_total", "Bus bytes of the timed operations: algorithm bytes x NCCL's bus factor (AllReduce 2(n-1)/n, AllGather and ReduceScatter (n-1)/n, others 1; none for other collectives), summed over the node's ranks; rate() over ncclwatch_comm_op_duration_seconds_sum's is the bus bandwidth.", bwLabels, nil)
	descAlgBW   = prometheus.NewDesc("ncclwatch_comm_algorithm_bandwidth_bytes_per_second", "Algorithm bandwidth of the operations completed over the sidecar's last 30 s (absent when none).", bwLabels, nil)
	descBusBW   = prometheus.NewDesc("ncclwatch_comm_bus_bandwidth_bytes_per_second", "Bus bandwidth of the operations completed over the sidecar's last 30 s (absent when none).", bwLabels, nil)
)

// bwKey is one exported series set.
type bwKey struct {
	comm, op, bucket string
}

// bwTotals are a series set's cumulative sums.
type bwTotals struct {
	ops   uint64
	ns    uint64  // execution time
	bytes float64 // algorithm bytes
	bus   float64 // bus bytes
}

type bwCell struct {
	bwTotals
	recent window[bwTotals] // for the 30 s gauges
	comm   profile.CommID   // the communicator (0 for other)
}

// bwSource is one communicator slot's tenure in one region: what the plugin's sums were last.
type bwSource struct {
	path string
	slot int
	gen  uint32
}

type bwCellKey struct {
	fn     profile.BWFunc
	bucket int
}

type bwComm struct {
	label string
	seen  time.Time
}

// bandwidth is the bandwidth collector: it takes each region read (observe) and each poll's
// end (sample), and exports the series above.
type bandwidth struct {
	keep time.Duration

	mu     sync.Mutex
	prev   map[bwSource]map[bwCellKey]profile.OpTiming
	seen   map[bwSource]time.Time
	comms  map[profile.CommID]*bwComm
	labels map[string]profile.CommID
	cells  map[bwKey]*bwCell
}

func newBandwidth(keep time.Duration) *bandwidth {
	return &bandwidth{keep: keep, prev: map[bwSource]map[bwCellKey]profile.OpTiming{}, seen: map[bwSource]time.Time{},
		comms: map[profile.CommID]*bwComm{}, labels: map[string]profile.CommID{}, cells: map[bwKey]*bwCell{}}
}

// commLabel names a communicator: "0x" and the first 8 hex digits of its commId as NCCL prints
// it (the full id where two share those); otherComm past the bound. Under b.mu.
func (b *bandwidth) commLabel(id profile.CommID, now time.Time) string {
	if c := b.comms[id]; c != nil {
		c.seen = now
		return c.label
	}
	if len(b.comms) >= maxBandwidthComms {
		return otherComm
	}
	label := id.String()
	if len(label) > 10 {
		label = label[:10]
	}
	if _, taken := b.labels[label]; taken {
		label = id.String()
	}
	b.comms[id] = &bwComm{label: label, seen: now}
	b.labels[label] = id
	return label
}

// busFactor is NCCL's: bus bytes per algorithm byte, and algorithm bytes per message byte.
func busFactor(fn profile.BWFunc, nranks int) (alg, bus float64) {
	n := float64(nranks)
	switch fn {
	case profile.BWAllReduce:
		return 1, 2 * (n - 1) / n
	case profile.BWAllGather, profile.BWReduceScatter:
		return n, (n - 1) / n
	case profile.BWBroadcast, profile.BWReduce, profile.BWSend, profile.BWRecv:
		return 1, 1
	}
	return 1, 0
}

// observe adds what a region's timings grew by since it was last read.
func (b *bandwidth) observe(path string, reg *profile.Region, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range reg.Comms {
		c := &reg.Comms[i]
		if len(c.Timings) == 0 || c.NRanks < 1 {
			continue // NCCL 2.26 (profiler ABI v3) says nothing of a communicator's size
		}
		src := bwSource{path: path, slot: c.Slot, gen: c.Gen}
		prev := b.prev[src]
		if prev == nil {
			prev = map[bwCellKey]profile.OpTiming{}
			b.prev[src] = prev
		}
		b.seen[src] = now
		label := b.commLabel(c.ID, now)
		for _, tm := range c.Timings {
			k := bwCellKey{fn: tm.Func, bucket: tm.Bucket}
			p := prev[k]
			prev[k] = tm
			if tm.Ops < p.Ops || tm.Bytes < p.Bytes || tm.ExecNs < p.ExecNs {
				p = profile.OpTiming{} // not the sums read before: count them whole
			}
			if tm.Ops == p.Ops {
				continue
			}
			key := bwKey{comm: label, op: tm.Func.String(), bucket: profile.BucketName(tm.Bucket)}
			cell := b.cells[key]
			if cell == nil {
				cell = &bwCell{}
				if label != otherComm {
					cell.comm = c.ID
				}
				b.cells[key] = cell
			}
			alg, bus := busFactor(tm.Func, c.NRanks)
			bytes := float64(tm.Bytes-p.Bytes) * alg
			cell.ops += tm.Ops - p.Ops
			cell.ns += tm.ExecNs - p.ExecNs
			cell.bytes += bytes
			cell.bus += bytes * bus
		}
	}
}

// sample ends a poll: every series set's sums enter its 30 s window, and communicators and
// regions not seen for keep are forgotten.
func (b *bandwidth) sample(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for src, at := range b.seen {
		if now.Sub(at) > b.keep {
			delete(b.seen, src)
			delete(b.prev, src)
		}
	}
	for id, c := range b.comms {
		if now.Sub(c.seen) > b.keep {
			delete(b.comms, id)
			delete(b.labels, c.label)
			for k, cell := range b.cells {
				if cell.comm == id && k.comm == c.label {
					delete(b.cells, k)
				}
			}
		}
	}
	for _, cell := range b.cells {
		cell.recent.add(now, cell.bwTotals)
	}
}

func (b *bandwidth) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOpTime, descOpBytes, descBusB, descAlgBW, descBusBW} {
		ch <- d
	}
}

func (b *bandwidth) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, c := range b.cells {
		l := []string{k.comm, k.op, k.bucket}
		ch <- prometheus.MustNewConstSummary(descOpTime, c.ops, float64(c.ns)/1e9, nil, l...)
		ch <- prometheus.MustNewConstMetric(descOpBytes, prometheus.CounterValue, c.bytes, l...)
		ch <- prometheus.MustNewConstMetric(descBusB, prometheus.CounterValue, c.bus, l...)
		a, z, _, ok := c.recent.span()
		if !ok || z.ops <= a.ops || z.ns <= a.ns {
			continue
		}
		sec := float64(z.ns-a.ns) / 1e9
		ch <- prometheus.MustNewConstMetric(descAlgBW, prometheus.GaugeValue, (z.bytes-a.bytes)/sec, l...)
		if z.bus > a.bus {
			ch <- prometheus.MustNewConstMetric(descBusBW, prometheus.GaugeValue, (z.bus-a.bus)/sec, l...)
		}
	}
}
