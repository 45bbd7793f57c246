package heartbeat

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPHandler serves /metrics (from g), /healthz, /readyz and /api/v1/snapshot (the node's
// current snapshot as JSON).
//
// /healthz (liveness) answers as long as the process serves: etcd is never part of it, so
// an etcd outage restarts no sidecar. /readyz says whether snapshots reach etcd, for a
// person or a monitor; it must not be the sidecar's readiness probe: the sidecar lives in
// the training pod, whose readiness it would then tie to the monitoring's etcd.
func (s *Sidecar) HTTPHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	if g != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Publisher != nil {
			if h, ok := s.opts.Publisher.(interface{ Healthy() bool }); ok && !h.Healthy() {
				http.Error(w, "etcd unreachable: snapshots are not published", http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /api/v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		if err := enc.Encode(s.Snapshot()); err != nil {
			s.opts.Logger.Debug("write snapshot", "err", err)
		}
	})
	return mux
}
