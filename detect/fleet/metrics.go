package fleet

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics: aggregates by part kind, and the N worst parts of each kind, never one series
// per job and node.
type metrics struct {
	partLost    *prometheus.GaugeVec
	roots       *prometheus.GaugeVec
	lost        *prometheus.GaugeVec
	open        *prometheus.GaugeVec
	exposure    prometheus.Gauge
	nodes       prometheus.Gauge
	writes      *prometheus.CounterVec
	badRecords  prometheus.Counter
	recordBytes prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		partLost: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_fleet_part_lost_job_seconds",
			Help: "Job time lost to the worst node parts of each kind over the fleet window (top N per kind; part is the GPU bus id, NIC port or empty)."},
			[]string{"part_kind", "node", "part"}),
		roots: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_fleet_roots",
			Help: "Roots booked against node parts over the fleet window, by part kind."}, []string{"part_kind"}),
		lost: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_fleet_lost_job_seconds",
			Help: "Job time lost to roots on node parts over the fleet window, by part kind."}, []string{"part_kind"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_fleet_node_incidents_open",
			Help: "Open node incidents (a part that is the root across jobs), by part kind."}, []string{"part_kind"}),
		exposure: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_fleet_exposure_job_seconds",
			Help: "Job time that ran on the fleet's nodes over the fleet window, one job on one node for one second counting 1 (the exposure roots are judged against)."}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_fleet_nodes",
			Help: "Nodes in the fleet ledger over its window (with exposure or roots)."}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_fleet_ledger_writes_total",
			Help: "Fleet ledger writes by result: ok, refused (the fence did not hold: no longer the job's owner or the leader), error."},
			[]string{"result"}),
		badRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_fleet_bad_records_total",
			Help: "Fleet ledger values that could not be read (skipped)."}),
		recordBytes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ncclwatch_fleet_record_bytes",
			Help: "Size of the job records written to the fleet ledger.", Buckets: prometheus.ExponentialBuckets(256, 4, 8)}),
	}
	for _, k := range PartKinds {
		m.roots.WithLabelValues(string(k))
		m.lost.WithLabelValues(string(k))
		m.open.WithLabelValues(string(k))
	}
	for _, r := range []string{"ok", "refused", "error"} {
		m.writes.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.partLost, m.roots, m.lost, m.open, m.exposure, m.nodes, m.writes, m.badRecords, m.recordBytes)
	}
	return m
}

// set publishes a view.
func (m *metrics) set(v *View, topN int) {
	roots, lost, open := map[PartKind]int{}, map[PartKind]float64{}, map[PartKind]int{}
	byKind := map[PartKind][]*PartView{}
	for _, pv := range v.parts {
		roots[pv.Part.Kind] += pv.Roots
		lost[pv.Part.Kind] += pv.Lost.Seconds()
		byKind[pv.Part.Kind] = append(byKind[pv.Part.Kind], pv)
	}
	for _, ni := range v.Incidents {
		if ni.Incident.State == "open" {
			open[ni.Part.Kind]++
		}
	}
	m.partLost.Reset()
	for _, k := range PartKinds {
		m.roots.WithLabelValues(string(k)).Set(float64(roots[k]))
		m.lost.WithLabelValues(string(k)).Set(lost[k])
		m.open.WithLabelValues(string(k)).Set(float64(open[k]))
		ps := byKind[k]
		sort.Slice(ps, func(a, b int) bool {
			if ps[a].Lost != ps[b].Lost {
				return ps[a].Lost > ps[b].Lost
			}
			return ps[a].Part.Key() < ps[b].Part.Key()
		})
		for i, pv := range ps {
			if i == topN {
				break
			}
			m.partLost.WithLabelValues(string(k), pv.Part.Node, pv.Part.ID).Set(pv.Lost.Seconds())
		}
	}
	m.exposure.Set(v.ExposureHours * 3600)
	m.nodes.Set(float64(len(v.Nodes)))
}
