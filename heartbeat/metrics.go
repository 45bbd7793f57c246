package heartbeat

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

// metrics are the sidecar's Prometheus series. Every label set is bounded: kinds by the
// parser's kinds, GPUs and ports by the node's hardware, XID codes by the few a GPU reports,
// ranks by the processes followed now.
//
// They follow Prometheus's conventions: counts that only grow (hardware error counters,
// bytes through a port) are counters named _total, their rates left to PromQL; values are in
// base units (ratios, seconds, hertz, bytes; bits per second for link rates, the unit link
// rates are sold in); moments are Unix timestamps, not ages that go stale between scrapes.
type metrics struct {
	lines       [logparse.NumKinds]prometheus.Counter
	cappedLines prometheus.Counter

	xids *prometheus.CounterVec
	// xidSeen is the newest XID time counted per GPU, so that one XID kept in a GPU's
	// recent history across samples counts once.
	xidMu    sync.Mutex
	xidSeen  map[int]snapshot.Micros
	xidCodes map[int]map[int]bool // the codes counted per GPU, at most maxXIDCodes

	portRate, portUp         *prometheus.GaugeVec
	portTx, portRx, portWait *prometheus.CounterVec
	portErrors               *prometheus.CounterVec
	rasUp                    prometheus.Gauge
	rasMissing               prometheus.Gauge

	bw *bandwidth // the profiler plugin's op timings (bandwidth.go)
}

var gpuStates = []snapshot.GPUState{snapshot.GPUComputing, snapshot.GPUWaiting, snapshot.GPUIdle}

func newMetrics(s *Sidecar, reg prometheus.Registerer) *metrics {
	m := &metrics{xidSeen: map[int]snapshot.Micros{}, xidCodes: map[int]map[int]bool{}, bw: newBandwidth(s.opts.KeepExited)}
	linesVec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_lines_total",
		Help: "NCCL and PyTorch log lines parsed, by kind (kind=\"unknown\": not a line we use)."}, []string{"kind"})
	for k := logparse.Kind(0); k < logparse.NumKinds; k++ {
		m.lines[k] = linesVec.WithLabelValues(k.String())
	}
	m.cappedLines = prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_lines_capped_total", Help: "Lines longer than the cap, cut."})
	m.xids = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_gpu_xid_errors_total",
		Help: "XID errors the GPU reported since the sidecar started, by XID code."}, []string{"gpu", "xid"})
	port := []string{"kind", "device", "port"}
	g := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, port)
	}
	c := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, port)
	}
	m.portRate = g("ncclwatch_port_rate_bytes_per_second", "Network port link rate in bytes per second, a base unit: a 400 Gb/s port is 5e10 (absent while unknown).")
	m.portUp = g("ncclwatch_port_up", "1 when the port is ACTIVE (IB) or up (net).")
	m.portTx = c("ncclwatch_port_transmit_bytes_total", "Bytes the port transmitted since the sidecar started (IB port_xmit_data x 4, net tx_bytes).")
	m.portRx = c("ncclwatch_port_receive_bytes_total", "Bytes the port received since the sidecar started (IB port_rcv_data x 4, net rx_bytes).")
	m.portWait = c("ncclwatch_port_xmit_wait_total", "Ticks the IB port had data to send but could not (port_xmit_wait: congestion), since the sidecar started.")
	m.portErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_port_errors_total",
		Help: "Port error counter increases seen by the sidecar (symbol_error, link_downed, rx_errors, ...)."}, []string{"kind", "device", "port", "counter"})
	m.rasUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_ras_up", Help: "1 when the local NCCL RAS service answered the last poll."})
	m.rasMissing = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_ras_missing_ranks", Help: "Ranks RAS reports missing, over all communicators."})
	if reg == nil {
		return m
	}
	reg.MustRegister(linesVec, m.cappedLines, m.xids, m.portRate, m.portUp, m.portTx, m.portRx, m.portWait, m.portErrors,
		m.rasUp, m.rasMissing, &gpuCollector{s: s}, &followCollector{s: s}, &rankCollector{s: s})
	reg.MustRegister(m.bw)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ncclwatch_sidecar_sample_lag_seconds",
			Help: "Worst lateness of the sidecar's sampling loop over the last 30 s (CPU starvation): the detector widens its windows by it."},
			func() float64 { return s.sampleLag.worst(time.Now()).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ncclwatch_sidecar_publish_lag_seconds",
			Help: "Worst lateness of the sidecar's snapshot publishing over the last 30 s (CPU starvation, a slow etcd)."},
			func() float64 { return s.publishLag.worst(time.Now()).Seconds() }))
	return m
}

func (m *metrics) line(k logparse.Kind) {
	if k < logparse.NumKinds {
		m.lines[k].Inc()
	}
}

// errorCounters are the error counters each port kind has. Every one is exported from the
// port's first sample, at 0: a series born at its first error would hide that error from
// increase() and rate(), which need a sample before it.
var errorCounters = map[snapshot.PortKind][]string{
	snapshot.PortIB: {"symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
		"port_xmit_discards", "local_link_integrity_errors", "excessive_buffer_overrun_errors"},
	snapshot.PortNet: {"rx_errors", "tx_errors", "rx_dropped", "tx_dropped", "carrier_changes"},
}

// maxXIDCodes bounds the XID codes counted per GPU (more count as xid="other"); a GPU
// reports a handful in its life.
const maxXIDCodes = 32

// observeGPUs counts the XIDs a sample brings that no earlier sample had.
func (m *metrics) observeGPUs(gpus []snapshot.GPU) {
	m.xidMu.Lock()
	defer m.xidMu.Unlock()
	for _, g := range gpus {
		for _, x := range g.XIDs { // newest last
			if x.T <= m.xidSeen[g.Index] {
				continue
			}
			m.xidSeen[g.Index] = x.T
			codes := m.xidCodes[g.Index]
			if codes == nil {
				codes = map[int]bool{}
				m.xidCodes[g.Index] = codes
			}
			code := strconv.Itoa(x.Code)
			if !codes[x.Code] && len(codes) >= maxXIDCodes {
				code = "other"
			} else {
				codes[x.Code] = true
			}
			m.xids.WithLabelValues(strconv.Itoa(g.Index), code).Inc()
		}
	}
}

// portBytes are the counters, by sysfs name, whose deltas are the bytes a port moved, and
// how many bytes one unit is (IB counts 4-octet words).
var portBytes = map[snapshot.PortKind]struct {
	tx, rx string
	unit   float64
}{
	snapshot.PortIB:  {"port_xmit_data", "port_rcv_data", 4},
	snapshot.PortNet: {"tx_bytes", "rx_bytes", 1},
}

func (m *metrics) observePorts(ports []snapshot.Port) {
	for _, p := range ports {
		port, kind := strconv.Itoa(p.Port), string(p.Kind)
		if p.RateGbps > 0 {
			m.portRate.WithLabelValues(kind, p.Device, port).Set(p.RateGbps * 1e9 / 8)
		} else { // unknown (a net interface that is down): no stale rate
			m.portRate.DeleteLabelValues(kind, p.Device, port)
		}
		up := 0.0
		if p.State == snapshot.PortActive || p.State == snapshot.NetUp {
			up = 1
		}
		m.portUp.WithLabelValues(kind, p.Device, port).Set(up)
		if b, ok := portBytes[p.Kind]; ok {
			// Add(0) on the first sample: the series exists from the start, so that
			// rate() has a first point before the first byte.
			m.portTx.WithLabelValues(kind, p.Device, port).Add(float64(p.Deltas[b.tx]) * b.unit)
			m.portRx.WithLabelValues(kind, p.Device, port).Add(float64(p.Deltas[b.rx]) * b.unit)
		}
		if p.Kind == snapshot.PortIB {
			m.portWait.WithLabelValues(kind, p.Device, port).Add(float64(p.Deltas["port_xmit_wait"]))
		}
		for _, c := range errorCounters[p.Kind] {
			m.portErrors.WithLabelValues(kind, p.Device, port, c).Add(float64(p.Deltas[c]))
		}
	}
}

func (m *metrics) observeRAS(r *snapshot.RAS) {
	if r == nil || r.Err != "" {
		m.rasUp.Set(0)
		return
	}
	m.rasUp.Set(1)
	missing := 0
	for _, c := range r.Comms {
		missing += len(c.Missing)
	}
	m.rasMissing.Set(float64(missing))
}

// gpuCollector exports the latest NVML sample of each GPU. A reading NVML could not give
// is left out rather than exported as 0, and a GPU that left the sample leaves /metrics.
type gpuCollector struct{ s *Sidecar }

// gpuSeries are the per-GPU series: the sample field (its JSON name) each reads, how, and
// whether it counts up (NVML's volatile error counters reset only with the driver).
var gpuSeries = []struct {
	desc    *prometheus.Desc
	field   string
	counter bool
	value   func(g *snapshot.GPU) float64
}{
	{gpuDesc("utilization_ratio", "GPU utilization, 0 to 1 (NVML)."), "util", false,
		func(g *snapshot.GPU) float64 { return float64(g.Util) / 100 }},
	{gpuDesc("memory_utilization_ratio", "GPU memory bandwidth utilization, 0 to 1 (NVML)."), "memutil", false,
		func(g *snapshot.GPU) float64 { return float64(g.MemUtil) / 100 }},
	{gpuDesc("power_watts", "GPU power draw."), "pw", false, func(g *snapshot.GPU) float64 { return g.PowerW }},
	{gpuDesc("power_limit_watts", "GPU enforced power limit."), "pwmax", false, func(g *snapshot.GPU) float64 { return g.PowerLimitW }},
	{gpuDesc("sm_clock_hertz", "GPU SM clock."), "sm", false, func(g *snapshot.GPU) float64 { return float64(g.SMClockMHz) * 1e6 }},
	{gpuDesc("sm_max_clock_hertz", "GPU SM max clock."), "smmax", false, func(g *snapshot.GPU) float64 { return float64(g.SMMaxMHz) * 1e6 }},
	{gpuDesc("temperature_celsius", "GPU temperature."), "temp", false, func(g *snapshot.GPU) float64 { return float64(g.TempC) }},
	{gpuDesc("clock_event_reasons", "NVML clock event (throttle) reason bit mask."), "ce", false,
		func(g *snapshot.GPU) float64 { return float64(g.ClockEvents) }},
	{gpuDesc("ecc_uncorrected_errors_total", "Volatile uncorrected (double-bit) ECC errors since the driver loaded."), "dbe", true,
		func(g *snapshot.GPU) float64 { return float64(g.ECCVolatileDBE) }},
	{gpuDesc("ecc_corrected_errors_total", "Volatile corrected (single-bit) ECC errors since the driver loaded."), "sbe", true,
		func(g *snapshot.GPU) float64 { return float64(g.ECCVolatileSBE) }},
	{gpuDesc("nvlink_errors_total", "NVLink CRC, replay and recovery errors summed over links."), "nvlerr", true,
		func(g *snapshot.GPU) float64 { return float64(g.NVLinkErrors) }},
	{gpuDesc("pcie_replays_total", "PCIe replays."), "pcierep", true, func(g *snapshot.GPU) float64 { return float64(g.PCIeReplays) }},
	{gpuDesc("processes", "Processes with a compute context on the GPU, as NVML lists them (at most 16): more than the ranks using it means the GPU is shared."),
		"procs", false, func(g *snapshot.GPU) float64 { return float64(len(g.Procs)) }},
}

var descGPUState = prometheus.NewDesc("ncclwatch_gpu_state",
	"1 for the GPU's derived state: computing, waiting (spinning in a collective), idle.", []string{"gpu", "state"}, nil)

func gpuDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("ncclwatch_gpu_"+name, help, []string{"gpu"}, nil)
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range gpuSeries {
		ch <- x.desc
	}
	ch <- descGPUState
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	gpus := c.s.gpus // replaced, never changed in place
	c.s.mu.Unlock()
	for i := range gpus {
		g := &gpus[i]
		l := strconv.Itoa(g.Index)
		for _, x := range gpuSeries {
			if !g.Has(x.field) {
				continue
			}
			kind := prometheus.GaugeValue
			if x.counter {
				kind = prometheus.CounterValue
			}
			ch <- prometheus.MustNewConstMetric(x.desc, kind, x.value(g), l)
		}
		if g.Err != "" {
			continue
		}
		for _, st := range gpuStates {
			v := 0.0
			if g.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descGPUState, prometheus.GaugeValue, v, l, string(st))
		}
	}
}

// followCollector exports the log followers' counters.
type followCollector struct{ s *Sidecar }

var (
	descFiles       = prometheus.NewDesc("ncclwatch_files_followed", "NCCL log files followed now.", nil, nil)
	descFollowBytes = prometheus.NewDesc("ncclwatch_follow_bytes_total", "Bytes read from NCCL logs.", nil, nil)
	descFollowEv    = prometheus.NewDesc("ncclwatch_follow_events_total", "Log file events: truncations, rotations, deletions, read errors, dropped files, failed offset/checkpoint writes.", []string{"event"}, nil)
	descLogFreed    = prometheus.NewDesc("ncclwatch_log_freed_bytes_total", "Disk bytes of NCCL logs freed by the log bound (--log-keep-mib) once read.", nil, nil)
	descLogTrimFail = prometheus.NewDesc("ncclwatch_log_trim_failures_total", "Failures to free the read part of an NCCL log, by reason: unsupported (the filesystem cannot punch holes), denied (the log cannot be opened for writing), error.", []string{"reason"}, nil)
	descRankColl    = prometheus.NewDesc("ncclwatch_rank_collectives_total", "Collectives a rank issued, over its communicators.", []string{"rank", "pid"}, nil)
	descRankLast    = prometheus.NewDesc("ncclwatch_rank_last_op_timestamp_seconds", "Unix time of the rank's newest collective or p2p op.", []string{"rank", "pid"}, nil)
	descRankAlive   = prometheus.NewDesc("ncclwatch_rank_process_up", "1 while the rank's process runs, 0 once it exited (absent when not visible).", []string{"rank", "pid"}, nil)
	descRankComms   = prometheus.NewDesc("ncclwatch_rank_communicators", "Communicators a rank holds.", []string{"rank", "pid"}, nil)
)

func (c *followCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFiles
	ch <- descFollowBytes
	ch <- descFollowEv
	ch <- descLogFreed
	ch <- descLogTrimFail
}

func (c *followCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.follower.Stats()
	ch <- prometheus.MustNewConstMetric(descFiles, prometheus.GaugeValue, float64(st.Files))
	ch <- prometheus.MustNewConstMetric(descFollowBytes, prometheus.CounterValue, float64(st.Bytes))
	for name, v := range map[string]uint64{"truncated": st.Truncations, "rotated": st.Rotations, "deleted": st.Deletions,
		"renamed": st.Renames, "dropped": st.DroppedFiles, "read_error": st.ReadErrors, "watch_error": st.WatchErrors, "state_error": st.StateErrors} {
		ch <- prometheus.MustNewConstMetric(descFollowEv, prometheus.CounterValue, float64(v), name)
	}
	ch <- prometheus.MustNewConstMetric(descLogFreed, prometheus.CounterValue, float64(st.FreedBytes))
	for reason, v := range st.TrimFailures {
		ch <- prometheus.MustNewConstMetric(descLogTrimFail, prometheus.CounterValue, float64(v), reason.String())
	}
}

// rankCollector exports per-rank progress for the processes followed now.
type rankCollector struct{ s *Sidecar }

func (c *rankCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRankColl
	ch <- descRankLast
	ch <- descRankAlive
	ch <- descRankComms
}

func (c *rankCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	for _, r := range s.rankLogs() {
		r.mu.Lock()
		rank := r.tracker.GlobalRank()
		if r.info.EnvKnown && r.info.Env.Rank >= 0 {
			rank = r.info.Env.Rank
		}
		var total int64
		var last int64
		comms := r.tracker.Comms()
		for _, cm := range comms {
			total += cm.Count
			last = max(last, cm.LastT)
		}
		exited, watched := !r.exitedAt.IsZero(), r.watched
		r.mu.Unlock()
		lr, lp := strconv.Itoa(rank), strconv.Itoa(r.pid)
		ch <- prometheus.MustNewConstMetric(descRankColl, prometheus.CounterValue, float64(total), lr, lp)
		ch <- prometheus.MustNewConstMetric(descRankComms, prometheus.GaugeValue, float64(len(comms)), lr, lp)
		if last > 0 {
			ch <- prometheus.MustNewConstMetric(descRankLast, prometheus.GaugeValue, float64(last)/1e6, lr, lp)
		}
		if watched || exited {
			up := 1.0
			if exited {
				up = 0
			}
			ch <- prometheus.MustNewConstMetric(descRankAlive, prometheus.GaugeValue, up, lr, lp)
		}
	}
}
