package heartbeat

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ncclwatch/watchdog/snapshot"
)

// TestMetricConventions: hardware counts that only grow are counters, values are in base
// units, a reading NVML could not give is absent (not 0), and one XID kept in a GPU's
// history across samples counts once.
func TestMetricConventions(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(Options{Job: "j", Node: "n", LogPatterns: []string{filepath.Join(t.TempDir(), "*.log")}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	at := func(sec int) snapshot.Micros { return snapshot.MicrosOf(time.Unix(1_795_000_000+int64(sec), 0)) }
	gpu := snapshot.GPU{Index: 3, BusID: "1b000", T: at(0), Util: 87, MemUtil: 40, PowerW: 512.5, PowerLimitW: 700,
		SMClockMHz: 1980, SMMaxMHz: 1980, TempC: 61, ClockEvents: 4, ECCVolatileSBE: 3, PCIeReplays: 2,
		State: snapshot.GPUComputing, Missing: []string{"nvlerr"}, XIDs: []snapshot.XID{{Code: 79, T: at(0)}},
		Procs: []snapshot.GPUProc{{PID: 4242, MemMiB: 70_000}, {PID: 999, MemMiB: 500}}}
	// A GPU whose process list NVML cannot give: absent, not 0 processes.
	unknownProcs := snapshot.GPU{Index: 4, BusID: "2a000", T: at(0), Missing: []string{"util", "memutil", "pw", "pwmax",
		"sm", "smmax", "temp", "ce", "sbe", "dbe", "nvlerr", "pcierep", "procs"}}
	for range 2 { // the same XID in two samples
		s.mu.Lock()
		s.gpus = []snapshot.GPU{gpu, unknownProcs}
		s.mu.Unlock()
		s.m.observeGPUs(s.gpus)
	}
	gpu.XIDs = append(gpu.XIDs, snapshot.XID{Code: 48, T: at(5)})
	s.m.observeGPUs([]snapshot.GPU{gpu})
	ib := snapshot.Port{Kind: snapshot.PortIB, Device: "mlx5_0", Port: 1, State: snapshot.PortActive, RateGbps: 400,
		Deltas: map[string]uint64{"port_xmit_data": 1000, "port_rcv_data": 500, "port_xmit_wait": 7, "symbol_error": 2}}
	eth := snapshot.Port{Kind: snapshot.PortNet, Device: "eth0", State: "down"} // rate unknown
	s.m.observePorts([]snapshot.Port{ib, eth})
	s.m.observePorts([]snapshot.Port{ib, eth})

	const want = `
# HELP ncclwatch_gpu_ecc_corrected_errors_total Volatile corrected (single-bit) ECC errors since the driver loaded.
# TYPE ncclwatch_gpu_ecc_corrected_errors_total counter
ncclwatch_gpu_ecc_corrected_errors_total{gpu="3"} 3
# HELP ncclwatch_gpu_pcie_replays_total PCIe replays.
# TYPE ncclwatch_gpu_pcie_replays_total counter
ncclwatch_gpu_pcie_replays_total{gpu="3"} 2
# HELP ncclwatch_gpu_processes Processes with a compute context on the GPU, as NVML lists them (at most 16): more than the ranks using it means the GPU is shared.
# TYPE ncclwatch_gpu_processes gauge
ncclwatch_gpu_processes{gpu="3"} 2
# HELP ncclwatch_gpu_sm_clock_hertz GPU SM clock.
# TYPE ncclwatch_gpu_sm_clock_hertz gauge
ncclwatch_gpu_sm_clock_hertz{gpu="3"} 1.98e+09
# HELP ncclwatch_gpu_utilization_ratio GPU utilization, 0 to 1 (NVML).
# TYPE ncclwatch_gpu_utilization_ratio gauge
ncclwatch_gpu_utilization_ratio{gpu="3"} 0.87
# HELP ncclwatch_gpu_xid_errors_total XID errors the GPU reported since the sidecar started, by XID code.
# TYPE ncclwatch_gpu_xid_errors_total counter
ncclwatch_gpu_xid_errors_total{gpu="3",xid="48"} 1
ncclwatch_gpu_xid_errors_total{gpu="3",xid="79"} 1
# HELP ncclwatch_port_errors_total Port error counter increases seen by the sidecar (symbol_error, link_downed, rx_errors, ...).
# TYPE ncclwatch_port_errors_total counter
ncclwatch_port_errors_total{counter="carrier_changes",device="eth0",kind="net",port="0"} 0
ncclwatch_port_errors_total{counter="excessive_buffer_overrun_errors",device="mlx5_0",kind="ib",port="1"} 0
ncclwatch_port_errors_total{counter="link_downed",device="mlx5_0",kind="ib",port="1"} 0
ncclwatch_port_errors_total{counter="link_error_recovery",device="mlx5_0",kind="ib",port="1"} 0
ncclwatch_port_errors_total{counter="local_link_integrity_errors",device="mlx5_0",kind="ib",port="1"} 0
ncclwatch_port_errors_total{counter="port_rcv_errors",device="mlx5_0",kind="ib",port="1"} 0
ncclwatch_port_errors_total{counter="port_xmit_discards",device="mlx5_0",kind="ib",port="1"} 0
ncclwatch_port_errors_total{counter="rx_dropped",device="eth0",kind="net",port="0"} 0
ncclwatch_port_errors_total{counter="rx_errors",device="eth0",kind="net",port="0"} 0
ncclwatch_port_errors_total{counter="symbol_error",device="mlx5_0",kind="ib",port="1"} 4
ncclwatch_port_errors_total{counter="tx_dropped",device="eth0",kind="net",port="0"} 0
ncclwatch_port_errors_total{counter="tx_errors",device="eth0",kind="net",port="0"} 0
# HELP ncclwatch_port_rate_bytes_per_second Network port link rate in bytes per second, a base unit: a 400 Gb/s port is 5e10 (absent while unknown).
# TYPE ncclwatch_port_rate_bytes_per_second gauge
ncclwatch_port_rate_bytes_per_second{device="mlx5_0",kind="ib",port="1"} 5e+10
# HELP ncclwatch_port_receive_bytes_total Bytes the port received since the sidecar started (IB port_rcv_data x 4, net rx_bytes).
# TYPE ncclwatch_port_receive_bytes_total counter
ncclwatch_port_receive_bytes_total{device="eth0",kind="net",port="0"} 0
ncclwatch_port_receive_bytes_total{device="mlx5_0",kind="ib",port="1"} 4000
# HELP ncclwatch_port_transmit_bytes_total Bytes the port transmitted since the sidecar started (IB port_xmit_data x 4, net tx_bytes).
# TYPE ncclwatch_port_transmit_bytes_total counter
ncclwatch_port_transmit_bytes_total{device="eth0",kind="net",port="0"} 0
ncclwatch_port_transmit_bytes_total{device="mlx5_0",kind="ib",port="1"} 8000
# HELP ncclwatch_port_xmit_wait_total Ticks the IB port had data to send but could not (port_xmit_wait: congestion), since the sidecar started.
# TYPE ncclwatch_port_xmit_wait_total counter
ncclwatch_port_xmit_wait_total{device="mlx5_0",kind="ib",port="1"} 14
`
	names := []string{"ncclwatch_gpu_ecc_corrected_errors_total", "ncclwatch_gpu_pcie_replays_total", "ncclwatch_gpu_processes", "ncclwatch_gpu_sm_clock_hertz",
		"ncclwatch_gpu_utilization_ratio", "ncclwatch_gpu_xid_errors_total", "ncclwatch_port_errors_total", "ncclwatch_port_rate_bytes_per_second",
		"ncclwatch_port_receive_bytes_total", "ncclwatch_port_transmit_bytes_total", "ncclwatch_port_xmit_wait_total",
		"ncclwatch_gpu_nvlink_errors_total"} // absent: NVML could not read it
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}
