package heartbeat

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

// metrics are the sidecar's Prometheus series. Every label set is bounded: kinds by the
// parser's kinds, GPUs and ports by the node's hardware, ranks by the processes followed now.
type metrics struct {
	lines       [logparse.NumKinds]prometheus.Counter
	cappedLines prometheus.Counter

	gpuUtil, gpuMemUtil, gpuPower, gpuPowerLimit *prometheus.GaugeVec
	gpuSM, gpuSMMax, gpuTemp, gpuClockEvents     *prometheus.GaugeVec
	gpuState                                     *prometheus.GaugeVec
	gpuDBE, gpuSBE, gpuNVLink, gpuPCIe, gpuXIDs  *prometheus.GaugeVec

	portRate, portUp, portTx, portRx, portWait *prometheus.GaugeVec
	portErrors                                 *prometheus.CounterVec

	rasUp      prometheus.Gauge
	rasMissing prometheus.Gauge
}

var gpuStates = []snapshot.GPUState{snapshot.GPUComputing, snapshot.GPUWaiting, snapshot.GPUIdle}

func newMetrics(s *Sidecar, reg prometheus.Registerer) *metrics {
	m := &metrics{}
	linesVec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_lines_total",
		Help: "NCCL and PyTorch log lines parsed, by kind (kind=\"unknown\": not a line we use)."}, []string{"kind"})
	for k := logparse.Kind(0); k < logparse.NumKinds; k++ {
		m.lines[k] = linesVec.WithLabelValues(k.String())
	}
	m.cappedLines = prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_lines_capped_total", Help: "Lines longer than the cap, cut."})
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m.gpuUtil = g("ncclwatch_gpu_utilization_percent", "GPU utilization (NVML).", "gpu")
	m.gpuMemUtil = g("ncclwatch_gpu_memory_utilization_percent", "GPU memory utilization (NVML).", "gpu")
	m.gpuPower = g("ncclwatch_gpu_power_watts", "GPU power draw.", "gpu")
	m.gpuPowerLimit = g("ncclwatch_gpu_power_limit_watts", "GPU enforced power limit.", "gpu")
	m.gpuSM = g("ncclwatch_gpu_sm_clock_mhz", "GPU SM clock.", "gpu")
	m.gpuSMMax = g("ncclwatch_gpu_sm_max_clock_mhz", "GPU SM max clock.", "gpu")
	m.gpuTemp = g("ncclwatch_gpu_temperature_celsius", "GPU temperature.", "gpu")
	m.gpuClockEvents = g("ncclwatch_gpu_clock_event_reasons", "NVML clock event (throttle) reason bit mask.", "gpu")
	m.gpuState = g("ncclwatch_gpu_state", "1 for the GPU's derived state: computing, waiting (spinning in a collective), idle.", "gpu", "state")
	m.gpuDBE = g("ncclwatch_gpu_ecc_uncorrected_errors", "Volatile uncorrected (double-bit) ECC errors.", "gpu")
	m.gpuSBE = g("ncclwatch_gpu_ecc_corrected_errors", "Volatile corrected (single-bit) ECC errors.", "gpu")
	m.gpuNVLink = g("ncclwatch_gpu_nvlink_errors", "NVLink CRC, replay and recovery errors summed over links.", "gpu")
	m.gpuPCIe = g("ncclwatch_gpu_pcie_replays", "PCIe replay counter.", "gpu")
	m.gpuXIDs = g("ncclwatch_gpu_recent_xids", "XID errors in the GPU's recent history.", "gpu")
	m.portRate = g("ncclwatch_port_rate_gbps", "Network port link rate.", "kind", "device", "port")
	m.portUp = g("ncclwatch_port_up", "1 when the port is ACTIVE (IB) or up (net).", "kind", "device", "port")
	m.portTx = g("ncclwatch_port_transmit_gbps", "Port transmit rate over the last sample.", "kind", "device", "port")
	m.portRx = g("ncclwatch_port_receive_gbps", "Port receive rate over the last sample.", "kind", "device", "port")
	m.portWait = g("ncclwatch_port_xmit_wait_per_second", "IB port_xmit_wait increase per second (congestion).", "kind", "device", "port")
	m.portErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_port_errors_total",
		Help: "Port error counter increases seen by the sidecar (symbol_error, link_downed, rx_errors, ...)."}, []string{"kind", "device", "port", "counter"})
	m.rasUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_ras_up", Help: "1 when the local NCCL RAS service answered the last poll."})
	m.rasMissing = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_ras_missing_ranks", Help: "Ranks RAS reports missing, over all communicators."})
	if reg == nil {
		return m
	}
	reg.MustRegister(linesVec, m.cappedLines, m.gpuUtil, m.gpuMemUtil, m.gpuPower, m.gpuPowerLimit,
		m.gpuSM, m.gpuSMMax, m.gpuTemp, m.gpuClockEvents, m.gpuState, m.gpuDBE, m.gpuSBE, m.gpuNVLink, m.gpuPCIe, m.gpuXIDs,
		m.portRate, m.portUp, m.portTx, m.portRx, m.portWait, m.portErrors, m.rasUp, m.rasMissing,
		&followCollector{s: s}, &rankCollector{s: s})
	return m
}

func (m *metrics) line(k logparse.Kind) {
	if k < logparse.NumKinds {
		m.lines[k].Inc()
	}
}

var errorCounters = map[string]bool{"symbol_error": true, "link_error_recovery": true, "link_downed": true,
	"port_rcv_errors": true, "port_xmit_discards": true, "local_link_integrity_errors": true,
	"excessive_buffer_overrun_errors": true, "rx_errors": true, "tx_errors": true, "rx_dropped": true,
	"tx_dropped": true, "carrier_changes": true}

func (m *metrics) observeGPUs(gpus []snapshot.GPU) {
	for _, g := range gpus {
		l := strconv.Itoa(g.Index)
		m.gpuUtil.WithLabelValues(l).Set(float64(g.Util))
		m.gpuMemUtil.WithLabelValues(l).Set(float64(g.MemUtil))
		m.gpuPower.WithLabelValues(l).Set(g.PowerW)
		m.gpuPowerLimit.WithLabelValues(l).Set(g.PowerLimitW)
		m.gpuSM.WithLabelValues(l).Set(float64(g.SMClockMHz))
		m.gpuSMMax.WithLabelValues(l).Set(float64(g.SMMaxMHz))
		m.gpuTemp.WithLabelValues(l).Set(float64(g.TempC))
		m.gpuClockEvents.WithLabelValues(l).Set(float64(g.ClockEvents))
		for _, st := range gpuStates {
			v := 0.0
			if g.State == st {
				v = 1
			}
			m.gpuState.WithLabelValues(l, string(st)).Set(v)
		}
		m.gpuDBE.WithLabelValues(l).Set(float64(g.ECCVolatileDBE))
		m.gpuSBE.WithLabelValues(l).Set(float64(g.ECCVolatileSBE))
		m.gpuNVLink.WithLabelValues(l).Set(float64(g.NVLinkErrors))
		m.gpuPCIe.WithLabelValues(l).Set(float64(g.PCIeReplays))
		m.gpuXIDs.WithLabelValues(l).Set(float64(len(g.XIDs)))
	}
}

func (m *metrics) observePorts(ports []snapshot.Port) {
	for _, p := range ports {
		port, kind := strconv.Itoa(p.Port), string(p.Kind)
		m.portRate.WithLabelValues(kind, p.Device, port).Set(p.RateGbps)
		up := 0.0
		if p.State == snapshot.PortActive || p.State == snapshot.NetUp {
			up = 1
		}
		m.portUp.WithLabelValues(kind, p.Device, port).Set(up)
		m.portTx.WithLabelValues(kind, p.Device, port).Set(p.XmitGbps)
		m.portRx.WithLabelValues(kind, p.Device, port).Set(p.RecvGbps)
		m.portWait.WithLabelValues(kind, p.Device, port).Set(p.XmitWaitPerS)
		for c, d := range p.Deltas {
			if errorCounters[c] && d > 0 {
				m.portErrors.WithLabelValues(kind, p.Device, port, c).Add(float64(d))
			}
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

// followCollector exports the log followers' counters.
type followCollector struct{ s *Sidecar }

var (
	descFiles       = prometheus.NewDesc("ncclwatch_files_followed", "NCCL log files followed now.", nil, nil)
	descFollowBytes = prometheus.NewDesc("ncclwatch_follow_bytes_total", "Bytes read from NCCL logs.", nil, nil)
	descFollowEv    = prometheus.NewDesc("ncclwatch_follow_events_total", "Log file events: truncations, rotations, deletions, read errors, dropped files, failed offset/checkpoint writes.", []string{"event"}, nil)
	descRankColl    = prometheus.NewDesc("ncclwatch_rank_collectives_total", "Collectives a rank issued, over its communicators.", []string{"rank", "pid"}, nil)
	descRankAge     = prometheus.NewDesc("ncclwatch_rank_last_op_age_seconds", "Time since the rank's newest collective or p2p op.", []string{"rank", "pid"}, nil)
	descRankAlive   = prometheus.NewDesc("ncclwatch_rank_process_up", "1 while the rank's process runs, 0 once it exited (absent when not visible).", []string{"rank", "pid"}, nil)
	descRankComms   = prometheus.NewDesc("ncclwatch_rank_communicators", "Communicators a rank holds.", []string{"rank", "pid"}, nil)
)

func (c *followCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFiles
	ch <- descFollowBytes
	ch <- descFollowEv
}

func (c *followCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.follower.Stats()
	ch <- prometheus.MustNewConstMetric(descFiles, prometheus.GaugeValue, float64(st.Files))
	ch <- prometheus.MustNewConstMetric(descFollowBytes, prometheus.CounterValue, float64(st.Bytes))
	for name, v := range map[string]uint64{"truncated": st.Truncations, "rotated": st.Rotations, "deleted": st.Deletions,
		"renamed": st.Renames, "dropped": st.DroppedFiles, "read_error": st.ReadErrors, "watch_error": st.WatchErrors, "state_error": st.StateErrors} {
		ch <- prometheus.MustNewConstMetric(descFollowEv, prometheus.CounterValue, float64(v), name)
	}
}

// rankCollector exports per-rank progress for the processes followed now.
type rankCollector struct{ s *Sidecar }

func (c *rankCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRankColl
	ch <- descRankAge
	ch <- descRankAlive
	ch <- descRankComms
}

func (c *rankCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	now := s.opts.Now()
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
			ch <- prometheus.MustNewConstMetric(descRankAge, prometheus.GaugeValue, now.Sub(snapshot.Micros(last).Time()).Seconds(), lr, lp)
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
