package fleet

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// ServeHTTP answers GET /api/v1/nodes (the fleet's nodes ranked by lost job time;
// ?limit=N, default 100; ?node=NAME for one node with its evidence per job) and
// GET /api/v1/nodes/{node}.
func (l *Ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	v, err := l.View(r.Context(), time.Now())
	if err != nil {
		http.Error(w, "fleet ledger: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	node := r.PathValue("node")
	if node == "" {
		node = r.URL.Query().Get("node")
	}
	if node != "" {
		for _, n := range v.Nodes {
			if n.Node == node {
				writeJSON(w, n)
				return
			}
		}
		http.Error(w, "no such node in the fleet ledger", http.StatusNotFound)
		return
	}
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			http.Error(w, "limit: a count", http.StatusBadRequest)
			return
		}
		limit = n
	}
	out := *v
	if limit > 0 && len(out.Nodes) > limit {
		out.Nodes = out.Nodes[:limit]
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
