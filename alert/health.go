package alert

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Health is the state of every configured notifier over the detector's whole life (the
// dispatcher's own metrics exist only on the leader, from its first term): whether it can
// be built (its secret is there), when it last delivered, how often it failed. Every
// series exists from the start, at zero, so a rule can read them before anything happens
// (deploy/prometheus: NcclwatchNotifierUnbuilt, NcclwatchNotificationsFailing). A notifier
// that cannot be built makes the detector not ready (Ready), saying why.
//
// Health owns one live notifier per configured one (live.go): the dispatchers of the
// detector's terms and the in-band outage deliver through them, so a secret that appears
// later is seen by the metric, the readiness and the deliveries at once.
type Health struct {
	cfg  *Config
	log  *slog.Logger
	live []*liveNotifier

	built     *prometheus.GaugeVec
	lastOK    *prometheus.GaugeVec
	delivered *prometheus.CounterVec
	failures  *prometheus.CounterVec

	mu       sync.Mutex
	problems map[string]error // notifier -> why it cannot be built
}

// NewHealth builds every notifier of cfg once (secrets read, nothing sent), logs each one
// that cannot be built with the reason, and registers the ncclwatch_alert_notifier_*
// metrics on reg (nil: none).
func NewHealth(cfg *Config, b BuildOptions, log *slog.Logger, reg prometheus.Registerer) (*Health, error) {
	if log == nil {
		log = slog.Default()
	}
	h := &Health{cfg: cfg, log: log, problems: map[string]error{},
		built: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_alert_notifier_built",
			Help: "1 when the notifier could be built (its secret is there), 0 when it cannot: nothing reaches it."}, []string{"notifier", "type"}),
		lastOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_alert_notifier_last_success_timestamp_seconds",
			Help: "When the notifier last delivered something (Unix time; 0: never since start)."}, []string{"notifier"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_alert_notifier_deliveries_total",
			Help: "Incident state changes the notifier delivered, since start."}, []string{"notifier"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_alert_notifier_failures_total",
			Help: "Incident state changes the notifier failed to deliver (each failed attempt, a missing secret included), since start."}, []string{"notifier"}),
	}
	for _, nc := range cfg.Notifiers {
		h.lastOK.WithLabelValues(nc.Name)
		h.delivered.WithLabelValues(nc.Name)
		h.failures.WithLabelValues(nc.Name)
	}
	h.live = cfg.liveNotifiers(b, h, log)
	if reg != nil {
		for _, c := range []prometheus.Collector{h.built, h.lastOK, h.delivered, h.failures} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register notifier health: %w", err)
			}
		}
	}
	return h, nil
}

// setBuilt records whether a notifier could be built (nil Health: nothing).
func (h *Health) setBuilt(name, typ string, err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.problems[name] = err
		h.built.WithLabelValues(name, typ).Set(0)
		return
	}
	delete(h.problems, name)
	h.built.WithLabelValues(name, typ).Set(1)
}

// Ready says whether every configured notifier can be built, and if not which and why. It
// reads the secrets again where their last read is older than BuildOptions.Recheck.
func (h *Health) Ready() error {
	for _, l := range h.live {
		l.refresh(false)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, nc := range h.cfg.Notifiers {
		if err := h.problems[nc.Name]; err != nil {
			errs = append(errs, fmt.Errorf("alert notifier %q cannot be built: %w", nc.Name, err))
		}
	}
	return errors.Join(errs...)
}

// success records deliveries by notifier name (nil Health: nothing).
func (h *Health) success(name string, n int, at time.Time) {
	if h == nil || n == 0 {
		return
	}
	h.delivered.WithLabelValues(name).Add(float64(n))
	h.lastOK.WithLabelValues(name).Set(float64(at.UnixNano()) / 1e9)
}

// failure records failed deliveries.
func (h *Health) failure(name string, n int) {
	if h == nil || n == 0 {
		return
	}
	h.failures.WithLabelValues(name).Add(float64(n))
}
