package heartbeat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ncclwatch/watchdog/heartbeat/profile"
)

const mib = 1 << 20

// bwRegion is a region of one communicator of 4 ranks with the given cumulative timings.
func bwRegion(id profile.CommID, gen uint32, nranks int, tm ...profile.OpTiming) *profile.Region {
	return &profile.Region{Comms: []profile.Comm{{Slot: 0, Gen: gen, ID: id, NRanks: nranks, Timings: tm}}}
}

// TestBandwidthSeries: the series of two ranks' regions of one communicator, with NCCL's bus
// factors, counters that only grow across a rank's restart, and 30 s gauges.
func TestBandwidthSeries(t *testing.T) {
	b := newBandwidth(time.Minute)
	reg := prometheus.NewRegistry()
	reg.MustRegister(b)
	t0 := time.Unix(1_800_000_000, 0)
	const id = profile.CommID(0xa1a2a3a4a5a6a7a8)
	ar := func(ops uint64) profile.OpTiming { // 4 MiB all-reduces of 2 ms each
		return profile.OpTiming{Func: profile.BWAllReduce, Bucket: 3, Ops: ops, Bytes: ops * 4 * mib, ExecNs: ops * 2_000_000, GPUTimed: ops}
	}
	ag := func(ops uint64) profile.OpTiming { // 1 MiB per rank, 1 ms each
		return profile.OpTiming{Func: profile.BWAllGather, Bucket: 3, Ops: ops, Bytes: ops * mib, ExecNs: ops * 1_000_000}
	}
	b.observe("rank0", bwRegion(id, 1, 4, ar(10), ag(4)), t0)
	b.observe("rank1", bwRegion(id, 1, 4, ar(10)), t0)
	b.sample(t0)
	// 10 s later: rank 0 did 10 more all-reduces; rank 1 restarted (a new region: its sums
	// start again) and did 5.
	t1 := t0.Add(10 * time.Second)
	b.observe("rank0", bwRegion(id, 1, 4, ar(20), ag(4)), t1)
	b.observe("rank1-restarted", bwRegion(id, 1, 4, ar(5)), t1)
	b.sample(t1)

	// All-reduce: 35 ops, 70 ms, 140 MiB; bus factor 2(n-1)/n = 1.5. In the 30 s window: the
	// 15 ops of the second poll: 60 MiB over 30 ms = 2.097 GB/s, bus 3.146 GB/s. All-gather: 4 ops
	// of 4 MiB gathered, bus factor 3/4, none in the window.
	want := `
# HELP ncclwatch_comm_algorithm_bandwidth_bytes_per_second Algorithm bandwidth of the operations completed over the sidecar's last 30 s (absent when none).
# TYPE ncclwatch_comm_algorithm_bandwidth_bytes_per_second gauge
ncclwatch_comm_algorithm_bandwidth_bytes_per_second{comm="0xa1a2a3a4",op="AllReduce",size_bucket="1MiB-16MiB"} 2.09715200e+09
# HELP ncclwatch_comm_bus_bandwidth_bytes_per_second Bus bandwidth of the operations completed over the sidecar's last 30 s (absent when none).
# TYPE ncclwatch_comm_bus_bandwidth_bytes_per_second gauge
ncclwatch_comm_bus_bandwidth_bytes_per_second{comm="0xa1a2a3a4",op="AllReduce",size_bucket="1MiB-16MiB"} 3.145728e+09
# HELP ncclwatch_comm_op_bus_bytes_total Bus bytes of the timed operations: algorithm bytes x NCCL's bus factor (AllReduce 2(n-1)/n, AllGather and ReduceScatter (n-1)/n, others 1; none for other collectives), summed over the node's ranks; rate() over ncclwatch_comm_op_duration_seconds_sum's is the bus bandwidth.
# TYPE ncclwatch_comm_op_bus_bytes_total counter
ncclwatch_comm_op_bus_bytes_total{comm="0xa1a2a3a4",op="AllGather",size_bucket="1MiB-16MiB"} 1.2582912e+07
ncclwatch_comm_op_bus_bytes_total{comm="0xa1a2a3a4",op="AllReduce",size_bucket="1MiB-16MiB"} 2.20200960e+08
# HELP ncclwatch_comm_op_bytes_total Bytes the timed operations moved by NCCL's algorithm-bandwidth definition (the message; x ranks for AllGather and ReduceScatter), summed over the node's ranks; rate() over ncclwatch_comm_op_duration_seconds_sum's is the algorithm bandwidth.
# TYPE ncclwatch_comm_op_bytes_total counter
ncclwatch_comm_op_bytes_total{comm="0xa1a2a3a4",op="AllGather",size_bucket="1MiB-16MiB"} 1.6777216e+07
ncclwatch_comm_op_bytes_total{comm="0xa1a2a3a4",op="AllReduce",size_bucket="1MiB-16MiB"} 1.46800640e+08
`
	names := []string{"ncclwatch_comm_algorithm_bandwidth_bytes_per_second", "ncclwatch_comm_bus_bandwidth_bytes_per_second",
		"ncclwatch_comm_op_bus_bytes_total", "ncclwatch_comm_op_bytes_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	wantSum := `
# HELP ncclwatch_comm_op_duration_seconds ` + helpOpTime + `
# TYPE ncclwatch_comm_op_duration_seconds summary
ncclwatch_comm_op_duration_seconds_sum{comm="0xa1a2a3a4",op="AllGather",size_bucket="1MiB-16MiB"} 0.004
ncclwatch_comm_op_duration_seconds_count{comm="0xa1a2a3a4",op="AllGather",size_bucket="1MiB-16MiB"} 4
ncclwatch_comm_op_duration_seconds_sum{comm="0xa1a2a3a4",op="AllReduce",size_bucket="1MiB-16MiB"} 0.07
ncclwatch_comm_op_duration_seconds_count{comm="0xa1a2a3a4",op="AllReduce",size_bucket="1MiB-16MiB"} 35
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantSum), "ncclwatch_comm_op_duration_seconds"); err != nil {
		t.Error(err)
	}

	// Nothing new for 40 s: the gauges go, the counters stay; after keep, the comm goes.
	b.sample(t1.Add(40 * time.Second))
	if n := testutil.CollectAndCount(b, "ncclwatch_comm_bus_bandwidth_bytes_per_second"); n != 0 {
		t.Errorf("%d bus bandwidth gauges with no op in the window", n)
	}
	if n := testutil.CollectAndCount(b, "ncclwatch_comm_op_bytes_total"); n != 2 {
		t.Errorf("%d byte counters, want 2", n)
	}
	b.sample(t1.Add(2 * time.Minute))
	if n := testutil.CollectAndCount(b); n != 0 {
		t.Errorf("%d series of a communicator gone for longer than keep", n)
	}
}

// TestBandwidthBounds: past maxBandwidthComms communicators are summed as comm="other"; two
// whose short ids collide keep their full ids; ABI v3's communicators (no size) are left out;
// the bus factors are NCCL's.
func TestBandwidthBounds(t *testing.T) {
	b := newBandwidth(time.Minute)
	now := time.Unix(1_800_000_000, 0)
	ar := profile.OpTiming{Func: profile.BWAllReduce, Bucket: 0, Ops: 1, Bytes: 1024, ExecNs: 1000}
	for i := range maxBandwidthComms + 4 {
		b.observe(fmt.Sprintf("r%d", i), bwRegion(profile.CommID(0x1000_0000_0000+uint64(i)<<32), 1, 2, ar), now)
	}
	b.observe("v3", bwRegion(0x77, 1, -1, ar), now)
	b.sample(now)
	comms := map[string]bool{}
	for k, c := range b.cells {
		comms[k.comm] = true
		if k.comm == otherComm && c.ops != 4 {
			t.Errorf("other: %d ops, want 4", c.ops)
		}
	}
	if len(comms) != maxBandwidthComms+1 || !comms[otherComm] || comms["0x77"] {
		t.Errorf("comm labels %v", comms)
	}

	b = newBandwidth(time.Minute)
	b.observe("a", bwRegion(0xabcdef0111111111, 1, 2, ar), now)
	b.observe("b", bwRegion(0xabcdef0122222222, 1, 2, ar), now)
	got := map[string]bool{}
	for k := range b.cells {
		got[k.comm] = true
	}
	if !got["0xabcdef01"] || !got["0xabcdef0122222222"] {
		t.Errorf("colliding short ids: %v", got)
	}

	for _, c := range []struct {
		fn       profile.BWFunc
		n        int
		alg, bus float64
	}{
		{profile.BWAllReduce, 8, 1, 1.75}, {profile.BWAllGather, 8, 8, 0.875}, {profile.BWReduceScatter, 4, 4, 0.75},
		{profile.BWBroadcast, 8, 1, 1}, {profile.BWReduce, 8, 1, 1}, {profile.BWSend, 2, 1, 1}, {profile.BWRecv, 2, 1, 1},
		{profile.BWOther, 8, 1, 0},
	} {
		if alg, bus := busFactor(c.fn, c.n); alg != c.alg || bus != c.bus {
			t.Errorf("%s over %d ranks: factors %g, %g; want %g, %g", c.fn, c.n, alg, bus, c.alg, c.bus)
		}
	}
}
