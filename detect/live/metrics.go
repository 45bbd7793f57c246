package live

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

type metrics struct {
	open         *prometheus.GaugeVec
	latency      *prometheus.HistogramVec
	evalTime     prometheus.Histogram
	evalLag      prometheus.Gauge
	nodes, ranks prometheus.Gauge
	leader       prometheus.Gauge
	etcdUp       prometheus.Gauge
	etcdRequest  *prometheus.HistogramVec
	etcdP99      prometheus.Gauge
	events       prometheus.Counter
	badSnapshots prometheus.Counter
	storeErrors  prometheus.Counter
	watchLag     prometheus.Histogram
	openKeys     map[[2]string]bool
	spoofed      prometheus.Counter
	fencedWrites *prometheus.CounterVec
	ownership    *prometheus.CounterVec
	owned        prometheus.Gauge
	jobOwner     *prometheus.GaugeVec
	restored     prometheus.Counter
}

func newMetrics(d *Detector, reg prometheus.Registerer) *metrics {
	m := &metrics{openKeys: map[[2]string]bool{}}
	m.open = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_detector_open_incidents",
		Help: "Open incidents of every job by kind and severity, as stored in etcd (every replica reports them all)."}, []string{"kind", "severity"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ncclwatch_detector_detection_latency_seconds",
		Help:    "Time from a fault's estimated start (the culprit's last progress, a straggler's onset) to its incident.",
		Buckets: []float64{0.5, 1, 2, 3, 5, 8, 10, 12, 15, 20, 30, 45, 60, 120, 300}}, []string{"kind"})
	m.evalTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ncclwatch_detector_evaluation_seconds",
		Help: "Time to evaluate every job once.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)})
	m.evalLag = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_detector_evaluation_lag_seconds",
		Help: "Worst lateness of the detector's evaluations, or of the process itself (paused or starved), over the last 30 s: every job's windows are widened by it."})
	m.nodes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_detector_nodes_tracked", Help: "Nodes of every job whose snapshots the detector holds (every replica holds them all)."})
	m.ranks = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_detector_ranks_tracked", Help: "Rank processes of the jobs this replica owns and judges (sum over replicas for all)."})
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_detector_leader", Help: "1 on the replica that leads: it judges the watchdog's own monitoring job (each replica judges the jobs it owns)."})
	m.etcdUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_detector_etcd_up", Help: "1 while the detector's etcd watch works."})
	m.etcdRequest = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ncclwatch_detector_etcd_request_seconds",
		Help:    "Round trips to etcd that succeeded, by what they were for: probe (a read every probe interval), sync (the term's read of replicas and owners), heartbeat (the replica's write under its lease), store (incident writes).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"op"})
	m.etcdP99 = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_detector_etcd_p99_seconds",
		Help: "p99 of the detector's round trips to etcd in the last window judged (10 s): slow round trips (a window's p99 above 500 ms) for 30 s with no fast window between them open the monitoring incident that etcd is slow."})
	for _, op := range []string{"probe", "sync", "heartbeat", "store"} {
		m.etcdRequest.WithLabelValues(op)
	}
	m.events = prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_detector_watch_events_total", Help: "etcd watch events applied."})
	m.badSnapshots = prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_detector_bad_snapshots_total", Help: "Node snapshots that could not be decoded."})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_detector_store_errors_total", Help: "Failed incident writes to etcd."})
	m.watchLag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ncclwatch_detector_watch_lag_seconds",
		Help: "Time from a sidecar's publish to the detector applying it.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	m.spoofed = prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_detector_spoofed_snapshots_total",
		Help: "Node snapshots refused because their value names another job or node than their etcd key."})
	m.fencedWrites = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_detector_fenced_writes_total",
		Help: "Incident writes by result: ok, refused (this replica no longer owns the job: it was stale), error (etcd did not answer)."},
		[]string{"result"})
	m.ownership = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_detector_ownership_changes_total",
		Help: "Jobs this replica claimed, released (to the replica they prefer, or ended) and lost (its key was gone); replicas it evicted (their heartbeat stopped)."},
		[]string{"change"})
	m.owned = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_detector_jobs_owned", Help: "Jobs this replica owns and judges."})
	m.jobOwner = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_detector_job_owner",
		Help: "1 for each job and the replica that owns it, as this replica last read it from etcd (every replica reports every job)."},
		[]string{"ncclwatch_job", "replica"})
	for _, r := range []string{"ok", "refused", "error"} {
		m.fencedWrites.WithLabelValues(r)
	}
	m.restored = prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_detector_restored_incidents_total",
		Help: "Incidents restored at takeover from their sealed page record: their incident key was missing, garbled or behind what was paged."})
	for _, c := range []string{"claimed", "released", "lost", "evicted"} {
		m.ownership.WithLabelValues(c)
	}
	if reg != nil {
		reg.MustRegister(m.open, m.latency, m.evalTime, m.evalLag, m.nodes, m.ranks, m.leader, m.etcdUp, m.etcdRequest, m.etcdP99, m.events,
			m.badSnapshots, m.storeErrors, m.watchLag, m.spoofed, m.fencedWrites, m.ownership, m.owned, m.jobOwner, m.restored)
	}
	return m
}

// setOpen publishes open counts, zeroing combinations that closed.
func (m *metrics) setOpen(open map[[2]string]int) {
	for k := range m.openKeys {
		if open[k] == 0 {
			m.open.WithLabelValues(k[0], k[1]).Set(0)
		}
	}
	for k, n := range open {
		m.openKeys[k] = true
		m.open.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
}

// setOwners publishes who owns which job.
func (m *metrics) setOwners(owners map[string]owner) {
	m.jobOwner.Reset()
	for job, o := range owners {
		m.jobOwner.WithLabelValues(job, o.replica).Set(1)
	}
}

// TermGatherer gathers the metrics of the current leadership term's alert dispatcher, which
// registers afresh each term (term.go); serve it beside the main registry (prometheus.Gatherers).
func (d *Detector) TermGatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		d.mu.Lock()
		reg := d.termReg
		d.mu.Unlock()
		if reg == nil {
			return nil, nil
		}
		return reg.Gather()
	})
}
