package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/incident/seal"
	"github.com/ncclwatch/watchdog/internal/incidentkey"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Alerts receives incident changes (alert.Dispatcher). One is made per term of this
// replica (term.go), and started with a context that carries the term's fence
// (internal/etcdfence), which its delivery-state writes must pass.
type Alerts interface {
	Start(ctx context.Context, known []incident.Incident) error
	Submit(inc incident.Incident)
	Close()
}

// Options configure a Detector.
type Options struct {
	Client *clientv3.Client
	// Rules configures every rule; mass-loss settings left zero take detect's defaults.
	Rules detect.Config
	// Interval between evaluations (default 1 s).
	Interval time.Duration
	// ResolveAfter: a condition must stay clear this long before its incident resolves
	// (default 5 s).
	ResolveAfter time.Duration
	// LeaseTTL of this replica's lease, under which it holds its election key and its
	// jobs: a dead replica's jobs and leadership pass to the others within it (default 10 s).
	LeaseTTL time.Duration
	// NewAlerts makes the alert dispatcher of a leadership term (nil: no notifications).
	NewAlerts func(reg prometheus.Registerer) (Alerts, error)
	// ProbeEvery is how often the detector asks etcd whether it answers (default 2 s): two
	// failures in a row mark it unreachable (/readyz 503, the monitoring incident).
	ProbeEvery time.Duration
	// Settle is how long after an etcd outage jobs stay unjudged, while the sidecars write
	// their snapshots again (default 5 s: they do within about 3 s, make bench-reconnect).
	Settle time.Duration
	// Incidents seals the incidents stored in etcd and refuses, on reading, those no
	// detector sealed (default: incident/seal with the key internal/incidentkey keeps in etcd).
	Incidents IncidentCodec
	// Ready, when set, is part of readiness (Detector.Ready): the alert notifiers built.
	Ready func() error
	// Fleet, when set, books the owned jobs' roots across jobs (fleet.go).
	Fleet Fleet
	// ID names this replica in the election (default hostname:pid).
	ID         string
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time

	hooks *hooks // tests only: freeze the replica as SIGSTOP would
}

// hooks let tests freeze a replica in-process; each runs, when set, before the step it names.
type hooks struct {
	evaluate  func() // an evaluation (after the ownership check of the same cycle)
	keepAlive func() // a lease renewal
	apply     func() // applying watch events
	// blindSync, when it returns true, makes an ownership check fail as if etcd did not
	// answer (a resumed replica whose first reads are slow).
	blindSync func() bool
}

func (h *hooks) run(f func(*hooks) func()) {
	if h != nil {
		if fn := f(h); fn != nil {
			fn()
		}
	}
}

func (o *Options) defaults() {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.ResolveAfter <= 0 {
		o.ResolveAfter = 5 * time.Second
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.ProbeEvery <= 0 {
		o.ProbeEvery = 2 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 5 * time.Second
	}
	// The mass-loss settings are no YAML keys, so a caller that builds Rules field by field
	// leaves them zero, which would call every single loss a mass loss.
	def := detect.DefaultConfig().LostConfig
	if o.Rules.MassLossNodes <= 0 {
		o.Rules.MassLossNodes = def.MassLossNodes
	}
	if o.Rules.MassLossFraction <= 0 {
		o.Rules.MassLossFraction = def.MassLossFraction
	}
	if o.Rules.MassLossWindow <= 0 {
		o.Rules.MassLossWindow = def.MassLossWindow
	}
	if o.Incidents == nil {
		o.Incidents = seal.New(incidentkey.Etcd(o.Client))
	}
	if o.ID == "" {
		h, _ := os.Hostname()
		o.ID = fmt.Sprintf("%s:%d", h, os.Getpid())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// monitoringJob holds incidents about the watchdog itself.
const monitoringJob = "_ncclwatch"

// Detector is one replica of the central detector. Replicas share the jobs (ownership.go):
// each judges the jobs it owns and decodes only their snapshots; the one elected leader
// also judges the monitoring job. Every replica watches every key, so that any of them
// answers the API.
type Detector struct {
	opts Options
	m    *metrics
	wire snapshot.Wire
	// changed wakes the term's loop when the watch applied snapshots: a job is judged
	// within half an interval of new evidence, not up to a whole interval later.
	changed chan struct{}

	mu        sync.Mutex // guards everything below
	state     *State     // the decoded nodes of the jobs this replica owns
	inbox     *inbox     // every node's latest value, as the watch delivered it
	owned     map[string]*ownedJob
	monitor   *detect.Lifecycle            // the monitoring job's incidents, while leading
	incidents map[string]incident.Incident // every incident in etcd, by id (all replicas)
	paused    map[string][]string          // job -> paused communicators
	leader    bool
	leaderID  string
	leaderKey string            // this replica's election key and its create revision, while leading:
	leaderRev int64             // the fence of the monitoring job's writes
	owners    map[string]string // job -> owning replica, as last read from etcd
	lastSync  time.Time         // when ownership was last read from etcd
	reached   bool              // etcd was read once since start (readiness)
	refused   *refusals
	etcdDown  time.Time              // when etcd became unreachable (zero: reachable)
	etcdBack  time.Time              // when it became reachable again after an outage
	lostTimes map[string][]time.Time // per job, when its node leases expired (detect.Job.LeaseLosses)
	termReg   *prometheus.Registry
	// The etcd outage (outage.go): the incident id this replica pages one under, the
	// outages of dead replicas to resolve, and when etcd was last found unreachable.
	outageID        string
	orphanedOutages []incident.Incident
	outageSeen      time.Time
	prevLease       clientv3.LeaseID // the lease of the last term (term loop only)
	// How late the evaluations run: it widens every job's windows.
	lastEval time.Time
	evalLag  lagPeak
}

// New returns a detector; Run starts it.
func New(opts Options) (*Detector, error) {
	if opts.Client == nil {
		return nil, errors.New("detector: no etcd client")
	}
	opts.defaults()
	d := &Detector{opts: opts, changed: make(chan struct{}, 1), state: NewState(), inbox: newInbox(), owned: map[string]*ownedJob{},
		incidents: map[string]incident.Incident{}, paused: map[string][]string{}, lostTimes: map[string][]time.Time{},
		owners: map[string]string{}}
	d.m = newMetrics(d, opts.Registerer)
	d.refused = newRefusals(opts.Logger, opts.Registerer)
	return d, nil
}

// Run watches etcd and judges the jobs this replica owns (and, while it leads, the
// monitoring job), until ctx ends.
func (d *Detector) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.watchLoop(ctx) }()
	go func() { defer wg.Done(); d.termLoop(ctx) }()
	wg.Wait()
	return nil
}

func (d *Detector) etcdUnreachable(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.etcdDown.IsZero() {
		d.etcdDown = d.opts.Now()
		d.outageSeen = d.etcdDown
		d.opts.Logger.Error("etcd unreachable", "err", err)
	}
	d.m.etcdUp.Set(0)
}

func (d *Detector) etcdReachable() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.etcdDown.IsZero() {
		d.opts.Logger.Info("etcd reachable again", "down_for", d.opts.Now().Sub(d.etcdDown).Round(time.Millisecond))
		d.etcdBack = d.opts.Now()
	}
	d.etcdDown = time.Time{}
	d.reached = true
	d.m.etcdUp.Set(1)
}

// evaluate runs the rules once on every job this replica owns, and on the monitoring job
// while it leads. What changed is stored first, each job's incidents in one transaction
// fenced on this replica's ownership of the job (fence.go); only what was stored is
// announced, so a replica that lost its jobs unawares (frozen past its lease) pages for
// nothing.
func (d *Detector) evaluate(ctx context.Context, t *term, alerts Alerts) {
	start := time.Now()
	now := d.opts.Now()
	d.mu.Lock()
	if !d.lastEval.IsZero() {
		d.evalLag.observe(start, max(0, start.Sub(d.lastEval)-d.opts.Interval))
	}
	d.lastEval = start
	evalLag := d.evalLag.worst(start)
	d.m.evalLag.Set(evalLag.Seconds())
	changed := map[string]*jobChanges{}
	add := func(job string, notify, store []incident.Incident) {
		if len(notify)+len(store) == 0 {
			return
		}
		c := changed[job]
		if c == nil {
			c = &jobChanges{}
			changed[job] = c
		}
		c.notify, c.store = append(c.notify, notify...), append(c.store, store...)
	}
	if d.leader && d.monitor != nil {
		mon := detect.NewJob(monitoringJob, now, nil, nil)
		mon.EtcdDownSince = d.etcdDown
		findings := detect.Evaluate(mon, d.opts.Rules, detect.TimingOK).Findings
		if u, ok := alerts.(undelivered); ok {
			findings = append(findings, detect.Undelivered(u.Undelivered())...)
		}
		findings = append(findings, detect.Late("detector:"+d.opts.ID, "the detector ("+d.opts.ID+")", evalLag, now.Add(-evalLag))...)
		n, s := d.monitor.Update(monitoringJob, findings, now)
		add(monitoringJob, n, s)
	}
	// With etcd unreachable, every communicator looks still: judging would page for every
	// rank, where the monitoring incident above already says why. Just after an outage the
	// snapshots are as old as it was long until the sidecars have written again: wait
	// for them (Settle).
	if d.etcdDown.IsZero() && now.Sub(d.etcdBack) >= d.opts.Settle {
		for _, job := range d.state.Jobs() {
			o := d.owned[job]
			if o == nil {
				continue // lost nodes of a job judged elsewhere, kept for a takeover
			}
			findings, paused := d.evaluateJob(job, now, evalLag)
			d.paused[job] = paused
			n, s := o.life.Update(job, findings, now)
			add(job, n, s)
		}
		for _, job := range d.state.Forget(now, time.Hour) {
			if o := d.owned[job]; o != nil {
				n := o.life.ResolveJob(job, now)
				add(job, n, n)
			}
			delete(d.paused, job)
			delete(d.lostTimes, job)
		}
	}
	_, _, ranks := d.state.Counts()
	nodes := d.inbox.count()
	d.mu.Unlock()

	for job, c := range changed {
		// The monitoring job's incidents are about etcd itself (unreachable): they are
		// announced when they could not be stored, never when the fence refused them.
		if r := d.persist(ctx, t, job, c.store, c.notify); r == stored || (r == storeFailed && job == monitoringJob) {
			for _, inc := range c.notify {
				d.announce(inc, alerts)
			}
		}
	}
	d.observeFleet(ctx, alerts)
	d.mu.Lock()
	open := d.openCounts()
	d.mu.Unlock()
	d.m.setOpen(open)
	d.m.nodes.Set(float64(nodes))
	d.m.ranks.Set(float64(ranks))
	d.m.evalTime.Observe(time.Since(start).Seconds())
}

// jobChanges are one evaluation's changes to a job's incidents.
type jobChanges struct{ notify, store []incident.Incident }

// announce logs an incident change and hands it to the term's alerts.
func (d *Detector) announce(inc incident.Incident, alerts Alerts) {
	if inc.State == incident.StateOpen && inc.Revision == 1 {
		lat := inc.OpenedAt.Sub(inc.FaultAt)
		if !inc.FaultAt.IsZero() && lat >= 0 {
			d.m.latency.WithLabelValues(string(inc.Kind)).Observe(lat.Seconds())
		}
		d.opts.Logger.Warn("incident opened", "id", inc.ID, "job", inc.Job, "kind", inc.Kind, "summary", inc.Summary)
	} else if inc.State == incident.StateResolved {
		d.opts.Logger.Info("incident resolved", "id", inc.ID, "job", inc.Job, "kind", inc.Kind)
	}
	if alerts != nil {
		alerts.Submit(inc)
	}
}

// openCounts counts the open incidents of every job by kind and severity, as etcd holds
// them (this replica's view through its watch): every replica exports the same numbers,
// whichever owns the jobs, so dashboards that take the leader's (ncclwatch_detector_leader)
// see them all. Call with d.mu held.
func (d *Detector) openCounts() map[[2]string]int {
	all := maps.Clone(d.incidents)
	if d.monitor != nil {
		// The leader's own monitoring incidents, those it could not store included (etcd
		// unreachable).
		for _, inc := range d.monitor.Incidents(monitoringJob) {
			all[inc.ID] = inc
		}
	}
	open := map[[2]string]int{}
	for _, inc := range all {
		if inc.State == incident.StateOpen {
			open[[2]string{string(inc.Kind), string(inc.Severity)}]++
		}
	}
	return open
}

// evaluateJob runs the rules on one job's view, with the lease losses the watch saw and
// its windows widened by how late its inputs are: the detector's own evaluation lag and the
// worst lag its sidecars report. A sidecar late enough to matter is a monitoring finding.
func (d *Detector) evaluateJob(job string, now time.Time, evalLag time.Duration) ([]detect.Finding, []string) {
	d.lostTimes[job] = d.opts.Rules.RecentLosses(d.lostTimes[job], now)
	view := d.state.View(job, now)
	view.LeaseLosses = d.lostTimes[job]
	var late []detect.Finding
	var sidecarLag time.Duration
	for _, name := range slices.Sorted(maps.Keys(view.Nodes)) {
		lag := time.Duration(view.Nodes[name].LagMS) * time.Millisecond
		sidecarLag = max(sidecarLag, lag)
		late = append(late, detect.Late("sidecar:"+job+":"+name, "node "+name+"'s sidecar", lag, now.Add(-lag))...)
	}
	view.InputLag = evalLag + sidecarLag
	res, err := detect.EvaluateSafely(view, d.opts.Rules, detect.TimingOK)
	if err != nil {
		d.opts.Logger.Error("a rule failed: this job is not judged this cycle", "job", job, "err", err)
	}
	return append(res.Findings, late...), res.Paused
}

// Incidents lists the incidents known to this replica (from etcd), newest first.
func (d *Detector) Incidents(job, state string) []incident.Incident {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]incident.Incident, 0, len(d.incidents))
	for _, inc := range d.incidents {
		if (job == "" || inc.Job == job) && (state == "" || string(inc.State) == state) {
			out = append(out, inc)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].OpenedAt.Equal(out[b].OpenedAt) {
			return out[a].OpenedAt.After(out[b].OpenedAt)
		}
		return out[a].ID < out[b].ID
	})
	return out
}
