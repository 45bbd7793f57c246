package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/incident/seal"
	"github.com/ncclwatch/watchdog/internal/backoff"
	"github.com/ncclwatch/watchdog/internal/incidentkey"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Alerts receives incident changes (alert.Dispatcher). One is made per leadership term.
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
	// LeaseTTL of the leader election session: a dead leader is replaced within it
	// (default 10 s).
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
	// ID names this replica in the election (default hostname:pid).
	ID         string
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
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

// Detector is one replica of the central detector.
type Detector struct {
	opts Options
	m    *metrics

	mu        sync.Mutex // guards everything below
	state     *State
	life      *detect.Lifecycle
	incidents map[string]incident.Incident // every incident in etcd, by id (all replicas)
	paused    map[string][]string          // job -> paused communicators
	leader    bool
	leaderID  string
	reached   bool                   // etcd was read once since start (readiness)
	etcdDown  time.Time              // when etcd became unreachable (zero: reachable)
	etcdBack  time.Time              // when it became reachable again after an outage
	lostTimes map[string][]time.Time // per job, when its node leases expired (detect.Job.LeaseLosses)
	termReg   *prometheus.Registry
	refused   *refusals
}

// New returns a detector; Run starts it.
func New(opts Options) (*Detector, error) {
	if opts.Client == nil {
		return nil, errors.New("detector: no etcd client")
	}
	opts.defaults()
	d := &Detector{opts: opts, state: NewState(), life: detect.NewLifecycle(opts.ResolveAfter),
		incidents: map[string]incident.Incident{}, paused: map[string][]string{}, lostTimes: map[string][]time.Time{}}
	d.m = newMetrics(d, opts.Registerer)
	d.refused = newRefusals(opts.Logger, opts.Registerer)
	return d, nil
}

// Run watches etcd and, while this replica leads, evaluates and alerts, until ctx ends.
func (d *Detector) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.watchLoop(ctx) }()
	go func() { defer wg.Done(); d.electionLoop(ctx) }()
	wg.Wait()
	return nil
}

// watchLoop keeps the state in step with etcd: a full read, then a watch from its revision;
// on any watch failure it reads everything again. Failed reads are retried after a jittered
// wait capped at watchRetryMax, so that after an outage the replicas read again within
// about that long of etcd's return, not all at once.
func (d *Detector) watchLoop(ctx context.Context) {
	bo := backoff.Backoff{Base: 250 * time.Millisecond, Max: watchRetryMax}
	for ctx.Err() == nil {
		rev, err := d.load(ctx)
		if err != nil {
			d.etcdUnreachable(err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(bo.Next()):
			}
			continue
		}
		bo.Reset()
		d.etcdReachable()
		d.watch(ctx, rev)
		if ctx.Err() == nil {
			d.etcdUnreachable(errors.New("watch closed"))
		}
	}
}

// watchRetryMax caps the wait between two failed reads of etcd.
const watchRetryMax = 2 * time.Second

// watch applies the changes after rev until the watch fails. The etcd client resumes a
// broken watch stream by itself when etcd returns, so a closed channel is not how an
// outage shows: a read every ProbeEvery says whether etcd answers, and two failures in a
// row mark it unreachable (readiness, the monitoring incident, no judging).
func (d *Detector) watch(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := d.opts.Client.Watch(wctx, snapshot.JobsPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV())
	probe := time.NewTicker(d.opts.ProbeEvery)
	defer probe.Stop()
	failed := 0
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				return
			}
			if err := resp.Err(); err != nil {
				d.opts.Logger.Warn("etcd watch failed; reloading", "err", err)
				return
			}
			d.apply(resp.Events)
		case <-probe.C:
			octx, ocancel := context.WithTimeout(ctx, d.opts.ProbeEvery)
			_, err := d.opts.Client.Get(octx, snapshot.LeaderKey, clientv3.WithCountOnly())
			ocancel()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				if failed++; failed >= 2 {
					d.etcdUnreachable(fmt.Errorf("probe: %w", err))
				}
			default:
				failed = 0
				d.etcdReachable()
			}
		}
	}
}

// load reads every key under the jobs prefix and rebuilds the state.
func (d *Detector) load(ctx context.Context) (int64, error) {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := d.opts.Client.Get(octx, snapshot.JobsPrefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("load %s: %w", snapshot.JobsPrefix, err)
	}
	now := d.opts.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	lost := d.lostNodes()
	d.state = NewState()
	d.incidents = map[string]incident.Incident{}
	for _, kv := range resp.Kvs {
		d.applyKV(string(kv.Key), kv.Value, now)
	}
	// A node that was lost before the reload has no key any more: keep it lost.
	for _, l := range lost {
		if j := d.state.jobs[l.Job]; j != nil && j.nodes[l.Node] == nil {
			d.state.Put(l, now)
			d.state.Delete(l.Job, l.Node, now)
		}
	}
	return resp.Header.Revision, nil
}

func (d *Detector) lostNodes() []*snapshot.Node {
	var out []*snapshot.Node
	for _, j := range d.state.jobs {
		for _, ns := range j.nodes {
			if !ns.lostAt.IsZero() && ns.snap != nil {
				out = append(out, ns.snap)
			}
		}
	}
	return out
}

func (d *Detector) apply(evs []*clientv3.Event) {
	now := d.opts.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		if ev.Type == clientv3.EventTypeDelete {
			if job, node, ok := snapshot.ParseNodeKey(key); ok {
				d.nodeKeyDeleted(job, node, now)
			} else if _, id, ok := snapshot.ParseIncidentKey(key); ok {
				delete(d.incidents, id)
			}
			continue
		}
		d.applyKV(key, ev.Kv.Value, now)
	}
	d.m.events.Add(float64(len(evs)))
}

// nodeKeyDeleted notes a node key that vanished; a lease that expired (no clean stop)
// counts as a loss for the mass-loss rule.
func (d *Detector) nodeKeyDeleted(job, node string, now time.Time) {
	if d.state.Delete(job, node, now) {
		d.lostTimes[job] = append(d.lostTimes[job], now)
		d.opts.Logger.Warn("node lease expired", "job", job, "node", node)
	}
}

func (d *Detector) applyKV(key string, value []byte, now time.Time) {
	if _, _, ok := snapshot.ParseNodeKey(key); ok {
		n, err := snapshot.Decode(value)
		if err != nil {
			d.m.badSnapshots.Inc()
			d.opts.Logger.Warn("bad node snapshot", "key", key, "err", err)
			return
		}
		if n.Time != 0 {
			d.m.watchLag.Observe(max(0, now.Sub(n.Time.Time()).Seconds()))
		}
		d.state.Put(n, now)
		return
	}
	if _, _, ok := snapshot.ParseIncidentKey(key); ok {
		if inc, ok, _ := d.openIncident(context.Background(), key, value); ok {
			d.incidents[inc.ID] = inc
		}
	}
}

func (d *Detector) etcdUnreachable(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.etcdDown.IsZero() {
		d.etcdDown = d.opts.Now()
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

// electionLoop campaigns for leadership and leads while elected.
func (d *Detector) electionLoop(ctx context.Context) {
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(d.opts.Client, concurrency.WithTTL(int((d.opts.LeaseTTL+time.Second-1)/time.Second)), concurrency.WithContext(ctx))
		if err != nil {
			d.opts.Logger.Debug("election session", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		el := concurrency.NewElection(sess, snapshot.LeaderKey)
		go d.observeLeader(ctx, el)
		if err := el.Campaign(ctx, d.opts.ID); err != nil {
			sess.Close()
			continue
		}
		d.opts.Logger.Info("leading the detector", "id", d.opts.ID)
		d.lead(ctx, sess)
		d.opts.Logger.Info("no longer leading", "id", d.opts.ID)
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = el.Resign(rctx)
		cancel()
		sess.Close()
	}
}

func (d *Detector) observeLeader(ctx context.Context, el *concurrency.Election) {
	for resp := range el.Observe(ctx) {
		if len(resp.Kvs) > 0 {
			d.mu.Lock()
			d.leaderID = string(resp.Kvs[0].Value)
			d.mu.Unlock()
		}
	}
}

// lead evaluates every Interval until the session ends or ctx does.
func (d *Detector) lead(ctx context.Context, sess *concurrency.Session) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-lctx.Done():
		}
	}()
	// Continue the open incidents the previous leader stored: same ids, no second page.
	known, err := d.storedIncidents(lctx)
	if err != nil {
		d.opts.Logger.Error("read incidents at takeover", "err", err)
		return
	}
	d.mu.Lock()
	d.life = detect.NewLifecycle(d.opts.ResolveAfter)
	d.life.Restore(known)
	d.leader = true
	d.m.leader.Set(1)
	d.termReg = prometheus.NewRegistry()
	reg := d.termReg
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.leader = false
		d.m.leader.Set(0)
		d.mu.Unlock()
	}()
	var alerts Alerts
	if d.opts.NewAlerts != nil {
		a, err := d.opts.NewAlerts(reg)
		if err != nil {
			d.opts.Logger.Error("alert dispatcher", "err", err)
		} else if err := a.Start(lctx, known); err != nil {
			d.opts.Logger.Error("start alert dispatcher", "err", err)
		} else {
			alerts = a
			defer a.Close()
		}
	}
	t := time.NewTicker(d.opts.Interval)
	defer t.Stop()
	for {
		d.evaluate(lctx, alerts)
		select {
		case <-lctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Detector) storedIncidents(ctx context.Context) ([]incident.Incident, error) {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := d.opts.Client.Get(octx, snapshot.JobsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []incident.Incident
	for _, kv := range resp.Kvs {
		if _, _, ok := snapshot.ParseIncidentKey(string(kv.Key)); !ok {
			continue
		}
		inc, ok, err := d.openIncident(ctx, string(kv.Key), kv.Value)
		if err != nil {
			return nil, err // not judged yet: take over later rather than page it again
		}
		if ok {
			out = append(out, inc)
		}
	}
	return out, nil
}

// evaluate runs the rules on every job once.
func (d *Detector) evaluate(ctx context.Context, alerts Alerts) {
	start := time.Now()
	now := d.opts.Now()
	d.mu.Lock()
	var notify, store []incident.Incident
	mon := detect.NewJob(monitoringJob, now, nil, nil)
	mon.EtcdDownSince = d.etcdDown
	n, s := d.life.Update(monitoringJob, detect.Evaluate(mon, d.opts.Rules, detect.TimingOK).Findings, now)
	notify, store = append(notify, n...), append(store, s...)
	// With etcd unreachable, every communicator looks still: judging would page for every
	// rank, where the monitoring incident above already says why. Just after an outage the
	// snapshots are as old as it was long until the sidecars have written again: wait
	// for them (Settle).
	if d.etcdDown.IsZero() && now.Sub(d.etcdBack) >= d.opts.Settle {
		for _, job := range d.state.Jobs() {
			findings, paused := d.evaluateJob(job, now)
			d.paused[job] = paused
			n, s := d.life.Update(job, findings, now)
			notify, store = append(notify, n...), append(store, s...)
		}
		for _, job := range d.state.Forget(now, time.Hour) {
			n := d.life.ResolveJob(job, now)
			notify, store = append(notify, n...), append(store, n...)
			delete(d.paused, job)
			delete(d.lostTimes, job)
		}
	}
	open := d.life.Open()
	_, nodes, ranks := d.state.Counts()
	d.mu.Unlock()

	for _, inc := range notify {
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
	d.persist(ctx, store)
	d.m.setOpen(open)
	d.m.nodes.Set(float64(nodes))
	d.m.ranks.Set(float64(ranks))
	d.m.evalTime.Observe(time.Since(start).Seconds())
}

// evaluateJob runs the rules on one job's view, with the lease losses the watch saw.
func (d *Detector) evaluateJob(job string, now time.Time) ([]detect.Finding, []string) {
	d.lostTimes[job] = d.opts.Rules.RecentLosses(d.lostTimes[job], now)
	view := d.state.View(job, now)
	view.LeaseLosses = d.lostTimes[job]
	res := detect.Evaluate(view, d.opts.Rules, detect.TimingOK)
	return res.Findings, res.Paused
}

// persist stores changed incidents; resolved ones expire after a day.
func (d *Detector) persist(ctx context.Context, incs []incident.Incident) {
	for _, inc := range incs {
		octx, cancel := context.WithTimeout(ctx, 3*time.Second)
		b, err := d.opts.Incidents.Seal(octx, snapshot.IncidentKey(inc.Job, inc.ID), inc)
		if err != nil {
			cancel()
			d.m.storeErrors.Inc()
			d.opts.Logger.Warn("store incident", "id", inc.ID, "err", err)
			continue
		}
		var opts []clientv3.OpOption
		if inc.State == incident.StateResolved {
			if g, err := d.opts.Client.Grant(octx, int64((24 * time.Hour).Seconds())); err == nil {
				opts = append(opts, clientv3.WithLease(g.ID))
			}
		}
		if _, err := d.opts.Client.Put(octx, snapshot.IncidentKey(inc.Job, inc.ID), string(b), opts...); err != nil {
			d.m.storeErrors.Inc()
			d.opts.Logger.Warn("store incident", "id", inc.ID, "err", err)
		}
		cancel()
		d.mu.Lock()
		d.incidents[inc.ID] = inc
		d.mu.Unlock()
	}
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
