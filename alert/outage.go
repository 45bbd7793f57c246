package alert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ncclwatch/watchdog/incident"
)

// Outage delivers a lost etcd in-band, through a path that needs no etcd: the Dispatcher
// cannot (its delivery state lives in etcd, and the leader that runs it steps down when its
// election lease expires), so without this an etcd outage pages nobody. It asks its
// detector replica whether etcd is down and whether it leads; the replica that led when
// etcd went (no other can know: the election is in etcd) sends one incident to the
// notifiers the routes pick, directly, retrying until it is delivered, and resolves it
// when etcd returns.
type Outage struct {
	targets   []Target
	routes    []Route
	operators []string
	o         OutageOptions

	// Touched by Run's goroutine only.
	lastLead time.Time
	cur      *outageIncident
	orphans  []*outageIncident // resolves of dead replicas' outages still to deliver
}

// OutageOptions configure an Outage.
type OutageOptions struct {
	// Down says since when this replica cannot reach etcd (zero: it can); Leading whether
	// it leads (live.Detector.EtcdDownSince and Leading).
	Down    func() time.Time
	Leading func() bool
	// Replica names this replica in the incident (its election id).
	Replica string
	// ID, when set, is the incident id to report an outage under (live.Detector.OutageID:
	// the one its record in etcd names, which whoever leads next resolves if this replica
	// dies first); "" or nil: an id from the outage's start.
	ID func() string
	// Orphans, when set, returns outages other replicas reported and died before
	// resolving (live.Detector.OrphanedOutages), resolved: each is delivered as a resolve.
	Orphans func() []incident.Incident
	// Grace is how long etcd must stay unreachable before the outage is delivered
	// (default 10 s: an etcd restart for an upgrade pages nobody).
	Grace time.Duration
	// Every is how often Down and Leading are asked (default 1 s).
	Every  time.Duration
	Health *Health
	Logger *slog.Logger
	Clock  clockwork.Clock
}

// outageIncident is one outage as delivered: the incident and, per notifier, what it got.
type outageIncident struct {
	inc       incident.Incident
	delivered map[string]*Delivery // notifier -> its delivery of the open (nil: not yet)
	retryAt   time.Time
	attempts  int
}

// NewOutage readies the notifiers of cfg for in-band outage delivery: those of o.Health
// when it was made from cfg, else its own. A notifier that cannot be built fails its own
// attempts (retried, counted in Health) and is used once its secret is there.
func NewOutage(cfg *Config, b BuildOptions, o OutageOptions) (*Outage, error) {
	if o.Down == nil || o.Leading == nil {
		return nil, errors.New("alert: outage needs Down and Leading")
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	ls := []*liveNotifier(nil)
	if o.Health != nil && o.Health.cfg == cfg {
		ls = o.Health.live
	} else {
		ls = cfg.liveNotifiers(b, o.Health, o.Logger)
	}
	return &Outage{routes: cfg.routes(), operators: cfg.Operators, o: o, targets: cfg.liveTargets(ls)}, nil
}

// leadSlack is how long before etcd was found down this replica may have stopped leading
// and still be the one that reports it: finding an outage takes two failed probes.
const leadSlack = 10 * time.Second

// Run watches until ctx ends.
func (o *Outage) Run(ctx context.Context) {
	t := o.o.Clock.NewTicker(o.o.Every)
	defer t.Stop()
	for {
		o.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// step is one look at etcd and leadership, and what follows from it.
func (o *Outage) step(ctx context.Context) {
	now := o.o.Clock.Now()
	if o.o.Leading() {
		o.lastLead = now
	}
	since := o.o.Down()
	switch {
	case o.cur == nil && !since.IsZero() && now.Sub(since) >= o.o.Grace && !o.lastLead.IsZero() && !o.lastLead.Before(since.Add(-leadSlack)):
		inc := o.incident(since, now)
		if o.o.ID != nil {
			if id := o.o.ID(); id != "" {
				inc.ID = id
			}
		}
		o.cur = &outageIncident{inc: inc, delivered: map[string]*Delivery{}}
		o.o.Logger.Error("etcd lost: delivering it to the notifiers directly", "since", since.UTC(), "incident", o.cur.inc.ID)
	case o.cur != nil && since.IsZero() && o.cur.inc.State == incident.StateOpen:
		resolved := o.cur.inc
		at := now
		resolved.State, resolved.ResolvedAt, resolved.LastSeen, resolved.Revision = incident.StateResolved, &at, at, 2
		resolved.Summary = fmt.Sprintf("the detector reaches etcd again after %s", fmtDuration(now.Sub(o.cur.inc.FaultAt)))
		o.cur.inc, o.cur.attempts, o.cur.retryAt = resolved, 0, time.Time{}
		o.o.Logger.Info("etcd back: resolving the outage incident", "incident", resolved.ID)
	case o.cur != nil && !since.IsZero() && o.cur.inc.State == incident.StateResolved:
		// Lost again before the resolve went out everywhere: the old one is over.
		o.cur = nil
		return
	}
	o.adopt(ctx, now)
	if o.cur == nil || now.Before(o.cur.retryAt) {
		return
	}
	if done := o.deliver(ctx, o.cur, now); done && o.cur.inc.State == incident.StateResolved {
		o.cur = nil
	}
}

// maxOrphans bounds the dead replicas' outages waiting for delivery.
const maxOrphans = 64

// adopt delivers the resolves of outages that replicas which died reported: every
// notifier that would have been told of the open is told of the resolve (a PagerDuty
// resolve of a key that was never triggered changes nothing).
func (o *Outage) adopt(ctx context.Context, now time.Time) {
	if o.o.Orphans != nil {
		for _, inc := range o.o.Orphans() {
			if len(o.orphans) >= maxOrphans {
				break
			}
			opened := &Delivery{IncidentID: inc.ID, Kind: inc.Kind, Revision: 1, State: incident.StateOpen}
			cur := &outageIncident{inc: inc, delivered: map[string]*Delivery{}}
			for _, t := range o.targets {
				cur.delivered[t.Notifier.Name()] = opened
			}
			o.o.Logger.Info("resolving the etcd outage a replica reported before it died", "incident", inc.ID)
			o.orphans = append(o.orphans, cur)
		}
	}
	kept := o.orphans[:0]
	for _, cur := range o.orphans {
		if now.Before(cur.retryAt) || !o.deliver(ctx, cur, now) {
			kept = append(kept, cur)
		}
	}
	o.orphans = kept
}

// incident describes an outage that began at since.
func (o *Outage) incident(since, now time.Time) incident.Incident {
	return incident.Incident{
		ID:       "etcd-outage-" + since.UTC().Format("20060102T150405Z"),
		Key:      incident.KeyEtcdUnreachable,
		Kind:     incident.KindMonitoring,
		State:    incident.StateOpen,
		Severity: incident.SeverityWarning,
		Job:      "_ncclwatch",
		Culprits: []incident.Culprit{},
		Summary: fmt.Sprintf("the detector cannot reach etcd since %s: no job is judged and no other incident can be delivered until it returns",
			since.UTC().Format(time.RFC3339)),
		Evidence: []string{fmt.Sprintf("detector replica %s, which led, lost etcd at %s; this message was sent without etcd", o.o.Replica,
			since.UTC().Format(time.RFC3339))},
		OpenedAt: now, LastSeen: now, FaultAt: since, Revision: 1,
	}
}

// deliver sends the current state to each notifier that still needs it; it returns
// whether all have it. Failures are retried with backoff (1 s doubling to 1 min).
func (o *Outage) deliver(ctx context.Context, cur *outageIncident, now time.Time) bool {
	inc := cur.inc
	targets := targetsFor(o.routes, o.operators, inc)
	all := true
	for _, t := range o.targets {
		name := t.Notifier.Name()
		prev, opened := cur.delivered[name]
		ev := EventOpen
		if inc.State == incident.StateResolved {
			if !opened || prev == nil || prev.State == incident.StateResolved {
				continue // never told of the outage, or already told it ended
			}
			ev = EventResolve
		} else if (targets != nil && !targets[name]) || (opened && prev != nil) {
			continue
		}
		if f, ok := t.Notifier.(EventFilter); ok && !f.Accepts(ev) {
			continue
		}
		n := &Notification{Incident: inc, Event: ev, Previous: prev}
		nctx, cancel := context.WithTimeout(ctx, t.Settings.withDefaults().Timeout)
		_, err := safeNotify(nctx, t.Notifier, []*Notification{n})
		cancel()
		if err != nil && !n.delivered {
			all = false
			o.o.Health.failure(name, 1)
			o.o.Logger.Warn("alert: in-band etcd outage notification failed; will retry", "notifier", name, "event", ev, "err", err)
			continue
		}
		o.o.Health.success(name, 1, now)
		d := &Delivery{Notifier: name, IncidentID: inc.ID, Kind: inc.Kind, Revision: inc.Revision, State: inc.State,
			Message: n.ref, DeliveredAt: now}
		if d.Message == nil && prev != nil {
			d.Message = prev.Message
		}
		cur.delivered[name] = d
	}
	if all {
		cur.attempts = 0
		return true
	}
	cur.attempts++
	cur.retryAt = now.Add(min(time.Second<<min(cur.attempts-1, 6), time.Minute))
	return false
}
