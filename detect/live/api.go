package live

import (
	"encoding/json"
	"maps"
	"net/http"
	"sort"
	"strings"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// JobView is GET /api/v1/jobs/<job>: ranks and communicators with their progress.
type JobView struct {
	Job           string              `json:"job"`
	Time          string              `json:"time"`
	Nodes         []NodeView          `json:"nodes"`
	Communicators []CommView          `json:"communicators"`
	Paused        []string            `json:"paused"`
	Incidents     []incident.Incident `json:"incidents"`
}

// NodeView is one node.
type NodeView struct {
	Node  string          `json:"node"`
	State string          `json:"state"` // reporting, lost
	Ranks []RankView      `json:"ranks"`
	GPUs  []snapshot.GPU  `json:"gpus,omitempty"`
	Ports []snapshot.Port `json:"ports,omitempty"`
}

// RankView is one rank process.
type RankView struct {
	Rank     int               `json:"rank"`
	Host     string            `json:"host"`
	PID      int               `json:"pid"`
	State    string            `json:"state,omitempty"` // the process state, or "lost" with its node
	GPUState snapshot.GPUState `json:"gpu_state,omitempty"`
	Comms    int               `json:"communicators"`
}

// CommView is one communicator across its ranks.
type CommView struct {
	ID      string       `json:"id"`
	NRanks  int          `json:"nranks"`
	Members []MemberView `json:"members"`
}

// MemberView is one rank's progress on a communicator.
type MemberView struct {
	// Rank is the rank in this communicator; GlobalRank the process's rank in the job
	// (-1 when unknown), the number incident summaries name.
	Rank       int               `json:"rank"`
	GlobalRank int               `json:"global_rank"`
	Host       string            `json:"host"`
	PID        int               `json:"pid"`
	Count      int64             `json:"collectives"`
	Behind     int64             `json:"behind"`
	LastOp     *snapshot.Op      `json:"last_op,omitempty"`
	AgeS       float64           `json:"last_op_age_seconds,omitempty"`
	Waiting    bool              `json:"waiting,omitempty"`
	GPUState   snapshot.GPUState `json:"gpu_state,omitempty"`
}

// Handler serves the API: /api/v1/incidents[?job=&state=], /api/v1/jobs, /api/v1/jobs/<job>,
// /api/v1/leader (the leader, and which replica owns which job); every replica answers
// for every job. And the probes: /healthz (liveness: never depends on etcd) and /readyz
// (readiness: 503 while etcd is unreachable).
func (d *Detector) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/incidents", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, d.Incidents(r.URL.Query().Get("job"), r.URL.Query().Get("state")))
	})
	mux.HandleFunc("GET /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		known := d.knownJobs()
		d.mu.Unlock()
		jobs := make([]string, 0, len(known))
		for j := range known {
			jobs = append(jobs, j)
		}
		sort.Strings(jobs)
		writeJSON(w, jobs)
	})
	mux.HandleFunc("GET /api/v1/jobs/{job}", func(w http.ResponseWriter, r *http.Request) {
		v, ok := d.JobView(r.PathValue("job"))
		if !ok {
			http.Error(w, "no such job", http.StatusNotFound)
			return
		}
		writeJSON(w, v)
	})
	mux.HandleFunc("GET /api/v1/leader", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		owned := make([]string, 0, len(d.owned))
		for j := range d.owned {
			owned = append(owned, j)
		}
		sort.Strings(owned)
		v := map[string]any{"leader": d.leaderID, "self": d.opts.ID, "leading": d.leader, "owns": owned, "owners": maps.Clone(d.owners)}
		d.mu.Unlock()
		writeJSON(w, v)
	})
	// Liveness says only that this process serves: restarting a replica never brings etcd
	// back, and an etcd outage would otherwise restart every replica at once.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	// Readiness is etcd (a replica that never read it, or cannot now, serves an empty or
	// stale view of the jobs) and the notifiers (one that cannot page is not ready): Ready.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := d.Ready(); err != nil {
			http.Error(w, "not ready: "+strings.ReplaceAll(err.Error(), "\n", "; "), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// JobView renders one job's progress.
func (d *Detector) JobView(job string) (JobView, bool) {
	now := d.opts.Now()
	d.mu.Lock()
	st := d.state
	if d.owned[job] == nil {
		// Judged by another replica: its nodes as they are now, decoded for this answer
		// outside the lock.
		raws := d.rawOf(job)
		d.mu.Unlock()
		st = d.viewOf(job, raws, now)
		d.mu.Lock()
	}
	j := st.jobs[job]
	if j == nil {
		d.mu.Unlock()
		return JobView{}, false
	}
	view := st.View(job, now)
	paused := append([]string{}, d.paused[job]...)
	var nodes []NodeView
	for _, n := range view.Nodes {
		nv := NodeView{Node: n.Node, State: "reporting", GPUs: n.GPUs, Ports: n.Ports}
		for _, p := range n.Processes {
			nv.Ranks = append(nv.Ranks, RankView{Rank: p.Rank, Host: p.Host, PID: p.PID, State: string(p.State), GPUState: p.GPUState, Comms: len(p.Comms)})
		}
		nodes = append(nodes, nv)
	}
	for _, n := range view.Lost {
		nv := NodeView{Node: n.Node, State: "lost"}
		for _, p := range n.Processes {
			nv.Ranks = append(nv.Ranks, RankView{Rank: p.Rank, Host: p.Host, PID: p.PID, State: "lost"})
		}
		nodes = append(nodes, nv)
	}
	d.mu.Unlock()
	sort.Slice(nodes, func(a, b int) bool { return nodes[a].Node < nodes[b].Node })
	out := JobView{Job: job, Time: now.UTC().Format("2006-01-02T15:04:05.000Z07:00"), Nodes: nodes, Paused: paused,
		Incidents: d.Incidents(job, "")}
	for _, g := range view.Groups {
		out.Communicators = append(out.Communicators, commView(g, now, view))
	}
	if out.Communicators == nil {
		out.Communicators = []CommView{}
	}
	return out, true
}

func commView(g *detect.Group, now interface{ UnixMicro() int64 }, j *detect.Job) CommView {
	cv := CommView{ID: g.ID, NRanks: g.NRanks}
	var top int64
	for _, m := range g.Members {
		top = max(top, m.Comm.Count)
	}
	for _, m := range g.Members {
		mv := MemberView{Rank: m.Comm.Rank, GlobalRank: m.Proc.Rank, Host: m.Proc.Host, PID: m.Proc.PID, Count: m.Comm.Count,
			Behind: top - m.Comm.Count, LastOp: m.Comm.Last, Waiting: m.Comm.Waiting, GPUState: m.Proc.GPUState}
		if m.Comm.Last != nil && m.Comm.Last.T != 0 {
			mv.AgeS = float64(now.UnixMicro()-int64(m.Comm.Last.T)) / 1e6
		}
		cv.Members = append(cv.Members, mv)
	}
	return cv
}
