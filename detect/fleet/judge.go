package fleet

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// Config is how the fleet ledger books and judges. Zero values take the defaults.
type Config struct {
	// Window is how far back roots and exposure are judged (default 7 days).
	Window time.Duration `yaml:"window"`
	// MinJobs: a part must be the root in at least this many jobs (default 2) ...
	MinJobs int `yaml:"min_jobs"`
	// RepeatInJob: ... or, for hardware causes, this many times in one job (default 3).
	RepeatInJob int `yaml:"repeat_in_job"`
	// FalseAlarms is the node incidents the fleet may open by chance per window: each
	// part's roots must be that unlikely under its share of the fleet's roots per job-hour
	// (a Poisson tail below FalseAlarms / parts judged). Default 0.01.
	FalseAlarms float64 `yaml:"false_alarms"`
	// CleanHours is the job-hours a node must run without a root on the part before its
	// node incident resolves (default 24).
	CleanHours float64 `yaml:"clean_job_hours"`
	// Retention bounds what etcd keeps (default 14 days); KeepRoots how long a resolved
	// root stays one by one before it becomes an hourly count (default 24 h).
	Retention time.Duration `yaml:"retention"`
	KeepRoots time.Duration `yaml:"keep_roots"`
	// FlushEvery: a job's exposure is written at least this often (default 5 min); a new
	// root is written at once.
	FlushEvery time.Duration `yaml:"flush_every"`
	// JudgeEvery: how often the ledger is read back, judged (by the leading replica) and
	// its metrics refreshed (default 1 min).
	JudgeEvery time.Duration `yaml:"judge_every"`
	// MaxGap: a node unseen for longer was away; the gap is not exposure (default 10 min).
	MaxGap time.Duration `yaml:"max_gap"`
	// TopN bounds the per-part metric series: the N worst parts of each kind (default 10).
	TopN int `yaml:"top_n"`
	// Actions says what to suggest, and what to do, when a node incident opens.
	Actions ActionConfig `yaml:"actions"`
}

// DefaultConfig is the configuration with every default filled.
func DefaultConfig() Config {
	var c Config
	c.Defaults()
	return c
}

// Defaults fills the zero fields.
func (c *Config) Defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Window, 7*24*time.Hour)
	def(&c.Retention, 14*24*time.Hour)
	def(&c.KeepRoots, 24*time.Hour)
	def(&c.FlushEvery, 5*time.Minute)
	def(&c.JudgeEvery, time.Minute)
	def(&c.MaxGap, 10*time.Minute)
	if c.MinJobs <= 0 {
		c.MinJobs = 2
	}
	if c.RepeatInJob <= 0 {
		c.RepeatInJob = 3
	}
	if c.FalseAlarms <= 0 {
		c.FalseAlarms = 0.01
	}
	if c.CleanHours <= 0 {
		c.CleanHours = 24
	}
	if c.TopN <= 0 {
		c.TopN = 10
	}
	c.Window = min(c.Window, c.Retention)
}

// JobEvidence is what one job says about a part.
type JobEvidence struct {
	Job       string           `json:"job"`
	Roots     int              `json:"roots"`
	Lost      time.Duration    `json:"lost_ns"`
	Incidents []string         `json:"incidents"`
	Causes    []incident.Cause `json:"causes,omitempty"`
	Peers     []string         `json:"peers,omitempty"` // links: the other ends
	First     time.Time        `json:"first"`
	Last      time.Time        `json:"last"`
	sameJob   bool
}

// PartView is one part's roots in the window.
type PartView struct {
	Part        Part          `json:"part"`
	Roots       int           `json:"roots"`
	Lost        time.Duration `json:"lost_ns"`
	LostSeconds float64       `json:"lost_seconds"`
	Jobs        []JobEvidence `json:"jobs"`
	Last        time.Time     `json:"last"`
	// ByClass counts the roots by class (their cause, or their kind when it says more:
	// a lost node).
	ByClass map[string]int `json:"by_class"`
	// Expected is the roots the part would have at the fleet's rate for its kind over its
	// node's exposure.
	Expected float64 `json:"expected"`
	// PValue is how likely its roots of its likeliest-blamed class are by chance, at the
	// rate the rest of the fleet shows for that class.
	PValue float64 `json:"p_value"`
}

// classOf is the class a root is judged in: background rates differ by cause (a host
// stall is common, a lost node rare), and a rare class must not hide behind a common one.
func classOf(kind incident.Kind, cause incident.Cause) string {
	if kind == incident.KindLostNode || cause == incident.CauseUnknown {
		return string(kind)
	}
	return string(cause)
}

// NodeView is one node of the fleet over the window.
type NodeView struct {
	Node        string        `json:"node"`
	Lost        time.Duration `json:"lost_ns"`
	LostSeconds float64       `json:"lost_seconds"`
	Roots       int           `json:"roots"`
	Jobs        int           `json:"jobs"`
	// ExposureHours is the job-hours that ran on the node; RootsPer100JobHours its roots
	// per exposure.
	ExposureHours       float64         `json:"exposure_job_hours"`
	RootsPer100JobHours float64         `json:"roots_per_100_job_hours"`
	Parts               []PartView      `json:"parts"`
	Incidents           []*NodeIncident `json:"incidents,omitempty"`
}

// View is the fleet over the window: nodes ranked by lost job time.
type View struct {
	At            time.Time       `json:"at"`
	Window        time.Duration   `json:"window_ns"`
	ExposureHours float64         `json:"exposure_job_hours"`
	Roots         int             `json:"roots"`
	Lost          time.Duration   `json:"lost_ns"`
	Jobs          int             `json:"jobs"`
	Nodes         []NodeView      `json:"nodes"`
	Incidents     []*NodeIncident `json:"incidents"`

	parts   map[string]*PartView // by bucket key
	records []*JobRecord
}

// NodeIncident is a node part that recurs as a root: the incident, the part, the evidence
// per job and the actions.
type NodeIncident struct {
	Incident incident.Incident `json:"incident"`
	Part     Part              `json:"part"`
	Jobs     []JobEvidence     `json:"jobs"`
	Actions  []Action          `json:"actions"`
	// Since: evidence before it (a previous incident's resolution) is not counted again.
	Since time.Time `json:"since,omitzero"`
}

// FleetJob is the job name node incidents carry.
const FleetJob = "_fleet"

// bucket is the unit judged: a link root counts against all the links of its node (with
// the peer kept), so that the end that recurs with different peers stands out.
func bucket(p Part) Part {
	if p.Kind == PartLink {
		return Part{Kind: PartLink, Node: p.Node}
	}
	return p
}

// Aggregate renders the records into the fleet's view at now: per node and part, the
// roots and lost time in the window, the exposure, the chance of so many roots, and the
// node incidents.
func Aggregate(records []*JobRecord, incidents []*NodeIncident, now time.Time, cfg Config) *View {
	cfg.Defaults()
	from := now.Add(-cfg.Window)
	v := &View{At: now, Window: cfg.Window, parts: map[string]*PartView{}, Incidents: []*NodeIncident{}, Nodes: []NodeView{},
		records: records}
	nodes := map[string]*NodeView{}
	nodeJobs := map[string]map[string]bool{}
	node := func(n string) *NodeView {
		nv := nodes[n]
		if nv == nil {
			nv = &NodeView{Node: n}
			nodes[n] = nv
			nodeJobs[n] = map[string]bool{}
		}
		return nv
	}
	type jobKey struct{ part, job string }
	evidence := map[jobKey]*JobEvidence{}
	add := func(job string, p Part, kind incident.Kind, cause incident.Cause, sameJob bool, at time.Time, n int, lost time.Duration, ids []string) {
		b := bucket(p)
		pv := v.parts[b.Key()]
		if pv == nil {
			pv = &PartView{Part: b, ByClass: map[string]int{}}
			v.parts[b.Key()] = pv
		}
		pv.Roots += n
		pv.ByClass[classOf(kind, cause)] += n
		pv.Lost += lost
		if at.After(pv.Last) {
			pv.Last = at
		}
		k := jobKey{b.Key(), job}
		e := evidence[k]
		if e == nil {
			e = &JobEvidence{Job: job, First: at, Last: at}
			evidence[k] = e
		}
		e.Roots += n
		e.Lost += lost
		e.sameJob = e.sameJob || sameJob
		for _, id := range ids {
			if len(e.Incidents) < 8 && !slices.Contains(e.Incidents, id) {
				e.Incidents = append(e.Incidents, id)
			}
		}
		if cause != "" && !slices.Contains(e.Causes, cause) {
			e.Causes = append(e.Causes, cause)
		}
		if p.Kind == PartLink && p.ID != "" && !slices.Contains(e.Peers, p.ID) {
			e.Peers = append(e.Peers, p.ID)
		}
		if at.Before(e.First) {
			e.First = at
		}
		if at.After(e.Last) {
			e.Last = at
		}
		nv := node(b.Node)
		nv.Roots += n
		nv.Lost += lost
		nodeJobs[b.Node][job] = true
	}
	// A link root names both ends; which end is bad shows across roots: the end whose
	// links failed with more distinct peers. Link roots wait until every peer is known.
	type linkRoot struct {
		job     string
		p       Part
		kind    incident.Kind
		cause   incident.Cause
		sameJob bool
		at      time.Time
		n       int
		lost    time.Duration
		ids     []string
	}
	var links []linkRoot
	book := func(l linkRoot) {
		if l.p.Kind == PartLink {
			links = append(links, l)
			return
		}
		add(l.job, l.p, l.kind, l.cause, l.sameJob, l.at, l.n, l.lost, l.ids)
	}
	for _, r := range records {
		jobHasRoot := false
		for _, rt := range r.Roots {
			if rt.At.Before(from) || rt.At.After(now) {
				continue
			}
			jobHasRoot = true
			for _, p := range rt.Parts {
				book(linkRoot{r.Job, p, rt.Kind, rt.Cause, rt.SameJob, rt.At, 1, rt.Lost, []string{rt.Incident}})
			}
		}
		for _, h := range r.Hourly {
			if h.Hour.Add(time.Hour).Before(from) || h.Hour.After(now) {
				continue
			}
			jobHasRoot = true
			book(linkRoot{r.Job, h.Part, h.Kind, h.Cause, h.SameJob, h.Hour, h.Count, h.Lost, h.Incidents})
		}
		exposed := false
		for n, s := range r.nodes {
			if e := prorate(s, from, now); e > 0 {
				node(n).ExposureHours += e
				v.ExposureHours += e
				exposed = true
			}
		}
		if exposed || jobHasRoot {
			v.Jobs++
		}
	}
	peers := map[string]map[string]bool{}
	for _, l := range links {
		if peers[l.p.Node] == nil {
			peers[l.p.Node] = map[string]bool{}
		}
		peers[l.p.Node][l.p.ID] = true
	}
	for _, l := range links {
		// The far end failed with more peers: it is the likelier culprit, and this root
		// is its evidence, not this node's.
		if len(peers[l.p.Node]) < len(peers[l.p.ID]) {
			continue
		}
		add(l.job, l.p, l.kind, l.cause, l.sameJob, l.at, l.n, l.lost, l.ids)
	}
	for k, e := range evidence {
		pv := v.parts[k.part]
		pv.Jobs = append(pv.Jobs, *e)
	}
	for _, pv := range v.parts {
		pv.PValue = v.pValue(pv)
	}
	// The fleet's rate of roots per job-hour, by part kind.
	rootsByKind := map[PartKind]int{}
	for _, pv := range v.parts {
		rootsByKind[pv.Part.Kind] += pv.Roots
		v.Roots += pv.Roots
		v.Lost += pv.Lost
	}
	for _, pv := range v.parts {
		sort.Slice(pv.Jobs, func(a, b int) bool { return pv.Jobs[a].First.Before(pv.Jobs[b].First) })
		pv.LostSeconds = pv.Lost.Seconds()
		if v.ExposureHours > 0 {
			pv.Expected = float64(rootsByKind[pv.Part.Kind]) * node(pv.Part.Node).ExposureHours / v.ExposureHours
		}
		nv := node(pv.Part.Node)
		nv.Parts = append(nv.Parts, *pv)
	}
	for _, inc := range incidents {
		v.Incidents = append(v.Incidents, inc)
		nv := node(inc.Part.Node)
		nv.Incidents = append(nv.Incidents, inc)
	}
	for n, nv := range nodes {
		nv.Jobs = len(nodeJobs[n])
		nv.LostSeconds = nv.Lost.Seconds()
		if nv.ExposureHours > 0 {
			nv.RootsPer100JobHours = 100 * float64(nv.Roots) / nv.ExposureHours
		}
		sort.Slice(nv.Parts, func(a, b int) bool {
			if nv.Parts[a].Lost != nv.Parts[b].Lost {
				return nv.Parts[a].Lost > nv.Parts[b].Lost
			}
			return nv.Parts[a].Part.Key() < nv.Parts[b].Part.Key()
		})
		v.Nodes = append(v.Nodes, *nv)
	}
	sort.Slice(v.Nodes, func(a, b int) bool {
		x, y := v.Nodes[a], v.Nodes[b]
		if x.Lost != y.Lost {
			return x.Lost > y.Lost
		}
		if x.Roots != y.Roots {
			return x.Roots > y.Roots
		}
		return x.Node < y.Node
	})
	sort.Slice(v.Incidents, func(a, b int) bool { return v.Incidents[a].Incident.OpenedAt.After(v.Incidents[b].Incident.OpenedAt) })
	return v
}

// Judge decides the node incidents at now from the view's evidence: it returns those that
// open, change (a new job's evidence) or resolve, with their revisions advanced. open
// holds the node incidents stored so far (open and resolved), by part key.
func Judge(v *View, stored map[string]*NodeIncident, now time.Time, cfg Config) []*NodeIncident {
	cfg.Defaults()
	judged := max(1, len(v.Nodes)*len(PartKinds))
	alpha := cfg.FalseAlarms / float64(judged)
	var out []*NodeIncident
	keys := make([]string, 0, len(v.parts))
	for k := range v.parts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		pv := v.parts[k]
		prev := stored[k]
		open := prev != nil && prev.Incident.State == incident.StateOpen
		since := time.Time{}
		if prev != nil {
			since = prev.Since
			if !open && prev.Incident.ResolvedAt != nil {
				since = *prev.Incident.ResolvedAt
			}
		}
		jobs := evidenceSince(pv.Jobs, since)
		if open {
			if len(jobs) > len(prev.Jobs) || rootsOf(jobs) > rootsOf(prev.Jobs) {
				next := *prev
				next.Jobs = jobs
				next.Incident = describe(prev.Incident, pv, jobs, now)
				next.Incident.Revision++
				next.Incident.Evidence = append(next.Incident.Evidence, actionLines(prev.Actions)...)
				out = append(out, &next)
			}
			continue
		}
		if !qualifies(pv.Part, jobs, cfg) {
			continue
		}
		// Roots since the last resolution, against the node's share of the fleet's rate.
		if pv.PValue >= alpha {
			continue
		}
		ni := &NodeIncident{Part: pv.Part, Jobs: jobs, Since: since}
		ni.Incident = describe(incident.Incident{
			ID: fmt.Sprintf("node-%s-%d", shortHash(pv.Part.Key()), now.Unix()), Key: "node:" + pv.Part.Key(),
			Kind: incident.KindNode, State: incident.StateOpen, Severity: incident.SeverityWarning, Job: FleetJob,
			Culprits: []incident.Culprit{culpritOf(pv.Part)}, OpenedAt: now, FaultAt: jobs[0].First, Cause: causeOf(jobs)}, pv, jobs, now)
		ni.Incident.Revision = 1
		ni.Actions = Suggest(ni, cfg.Actions)
		ni.Incident.Evidence = append(ni.Incident.Evidence, actionLines(ni.Actions)...)
		out = append(out, ni)
	}
	// Resolve the open ones whose node ran clean long enough since its part's last root.
	for _, k := range sortedKeys(stored) {
		prev := stored[k]
		if prev.Incident.State != incident.StateOpen {
			continue
		}
		last := prev.Incident.FaultAt
		for _, j := range prev.Jobs {
			if j.Last.After(last) {
				last = j.Last
			}
		}
		if pv := v.parts[k]; pv != nil && pv.Last.After(last) {
			last = pv.Last
		}
		if v.cleanHours(prev.Part.Node, last, now) < cfg.CleanHours {
			continue
		}
		next := *prev
		next.Incident.State = incident.StateResolved
		t := now
		next.Incident.ResolvedAt = &t
		next.Incident.LastSeen = now
		next.Incident.Revision++
		next.Incident.Evidence = append(slices.Clone(prev.Incident.Evidence),
			fmt.Sprintf("resolved: %.0f job-hours ran on %s without a root on this part since %s", v.cleanHours(prev.Part.Node, last, now),
				prev.Part.Node, last.UTC().Format(time.RFC3339)))
		out = append(out, &next)
	}
	return out
}

func sortedKeys(m map[string]*NodeIncident) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
