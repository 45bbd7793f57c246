package live

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/incident/seal"
)

// IncidentCodec turns the incidents the detector stores into etcd values and back;
// opening refuses an incident the detectors did not write (incident/seal.Sealer, the
// default: a forged open incident must never be paged by a standby taking over).
type IncidentCodec interface {
	Seal(ctx context.Context, key string, inc incident.Incident) ([]byte, error)
	Open(ctx context.Context, key string, value []byte) (incident.Incident, error)
}

// refusals counts and logs the stored incidents the codec refused, once per key.
type refusals struct {
	log     *slog.Logger
	counter *prometheus.CounterVec

	mu     sync.Mutex
	logged map[string]bool
}

// maxRefusalsLogged bounds the keys remembered for logging once.
const maxRefusalsLogged = 10000

func newRefusals(log *slog.Logger, reg prometheus.Registerer) *refusals {
	r := &refusals{log: log, logged: map[string]bool{},
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_detector_refused_incidents_total",
			Help: "Incidents read from etcd and refused: no seal, or a seal that does not match (written by someone else than a detector)."},
			[]string{"reason"})}
	for _, reason := range []string{"unsealed", "bad_seal", "undecodable"} {
		r.counter.WithLabelValues(reason)
	}
	if reg != nil {
		reg.MustRegister(r.counter)
	}
	return r
}

// openIncident decodes a stored incident. ok is false for a refused one; err is set only
// when it could not be judged yet (no key: etcd unreachable), which the caller retries.
func (d *Detector) openIncident(ctx context.Context, key string, value []byte) (inc incident.Incident, ok bool, err error) {
	inc, err = d.opts.Incidents.Open(ctx, key, value)
	switch {
	case err == nil:
		return inc, true, nil
	case errors.Is(err, seal.ErrNoKey):
		return inc, false, err
	case errors.Is(err, seal.ErrUnsealed):
		d.refused.refuse(key, "unsealed", err)
	case errors.Is(err, seal.ErrBadSeal):
		d.refused.refuse(key, "bad_seal", err)
	default:
		d.refused.refuse(key, "undecodable", err)
	}
	return inc, false, nil
}

func (r *refusals) refuse(key, reason string, err error) {
	r.counter.WithLabelValues(reason).Inc()
	r.mu.Lock()
	first := !r.logged[key]
	if first && len(r.logged) < maxRefusalsLogged {
		r.logged[key] = true
	}
	r.mu.Unlock()
	if first {
		r.log.Warn("stored incident refused: not written by a detector (docs/security.md)", "key", key, "reason", reason, "err", err)
	}
}
