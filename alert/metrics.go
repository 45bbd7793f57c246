package alert

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the dispatcher; labels are bounded (notifier names from config, incident kinds).
type metrics struct {
	sent        *prometheus.CounterVec
	failed      *prometheus.CounterVec
	retries     *prometheus.CounterVec
	dropped     *prometheus.CounterVec
	queue       *prometheus.GaugeVec
	latency     *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	// The dead-man's check (Dispatcher.Undelivered).
	undelivered prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ncclwatch_alert_notifications_sent_total",
			Help: "Incident state changes delivered, by notifier and incident kind.",
		}, []string{"notifier", "kind"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ncclwatch_alert_notifications_failed_total",
			Help: "Failed delivery attempts of incident state changes, by notifier and incident kind.",
		}, []string{"notifier", "kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ncclwatch_alert_retries_total",
			Help: "Batches scheduled for another attempt after a retryable failure.",
		}, []string{"notifier"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ncclwatch_alert_dropped_total",
			Help: "Incidents not queued because the notifier's queue was full, or dropped after a permanent failure.",
		}, []string{"notifier", "reason"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ncclwatch_alert_queue_length",
			Help: "Incidents waiting for delivery, by notifier.",
		}, []string{"notifier"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ncclwatch_alert_delivery_latency_seconds",
			Help:    "Time from submission of an incident state change to its delivery.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}, []string{"notifier"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ncclwatch_alert_store_errors_total",
			Help: "Errors reading or writing delivery state, by operation.",
		}, []string{"op"}),
		undelivered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ncclwatch_alert_undelivered_incidents",
			Help: "Open incidents that no notifier delivered within the delivery deadline (the dead-man's check: paging is dead for them).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	reg2 := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	reg2(func() (e error) { m.sent, e = register(reg, m.sent); return })
	reg2(func() (e error) { m.failed, e = register(reg, m.failed); return })
	reg2(func() (e error) { m.retries, e = register(reg, m.retries); return })
	reg2(func() (e error) { m.dropped, e = register(reg, m.dropped); return })
	reg2(func() (e error) { m.queue, e = register(reg, m.queue); return })
	reg2(func() (e error) { m.latency, e = register(reg, m.latency); return })
	reg2(func() (e error) { m.storeErrors, e = register(reg, m.storeErrors); return })
	reg2(func() (e error) { m.undelivered, e = register(reg, m.undelivered); return })
	if err != nil {
		return nil, fmt.Errorf("register alert metrics: %w", err)
	}
	return m, nil
}

// register registers c, or returns the collector already registered under the same name
// (a dispatcher rebuilt after a leader failover reuses its predecessor's metrics).
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing, nil
		}
	}
	return c, err
}
