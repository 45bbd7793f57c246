package alert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ncclwatch/watchdog/incident"
)

// Settings tune one notifier's worker. Zero GroupWait and RateEvery mean "none"; other
// zero fields take the defaults of DefaultSettings.
type Settings struct {
	// GroupWait collects a burst: a batch goes out when its oldest incident has waited
	// this long, listing everything that arrived meanwhile.
	GroupWait time.Duration
	// MaxBatch caps the incidents of one Notify call.
	MaxBatch int
	// QueueSize caps the incidents waiting for this notifier; more are dropped (and
	// counted) rather than blocking the detector. Resolves may fill twice this.
	QueueSize int
	// RateEvery and RateBurst are a token bucket on Notify calls: at most RateBurst at
	// once, then one per RateEvery.
	RateEvery time.Duration
	RateBurst int
	// Timeout bounds one Notify call.
	Timeout time.Duration
	// BackoffInitial doubles after each failed attempt up to BackoffMax, unless the
	// server said Retry-After.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
}

// DefaultSettings suit a chat or paging service: bursts within 2 s become one message,
// at most 3 messages at once and then one per second.
func DefaultSettings() Settings {
	return Settings{
		GroupWait:      2 * time.Second,
		MaxBatch:       1000,
		QueueSize:      10000,
		RateEvery:      time.Second,
		RateBurst:      3,
		Timeout:        2 * time.Minute,
		BackoffInitial: time.Second,
		BackoffMax:     5 * time.Minute,
	}
}

func (s Settings) withDefaults() Settings {
	d := DefaultSettings()
	if s.MaxBatch <= 0 {
		s.MaxBatch = d.MaxBatch
	}
	if s.QueueSize <= 0 {
		s.QueueSize = d.QueueSize
	}
	if s.RateEvery > 0 && s.RateBurst <= 0 {
		s.RateBurst = 1
	}
	if s.Timeout <= 0 {
		s.Timeout = d.Timeout
	}
	if s.BackoffInitial <= 0 {
		s.BackoffInitial = d.BackoffInitial
	}
	if s.BackoffMax <= 0 {
		s.BackoffMax = d.BackoffMax
	}
	s.BackoffMax = max(s.BackoffMax, s.BackoffInitial)
	return s
}

// Target is a notifier with the settings of its worker.
type Target struct {
	Notifier Notifier
	Settings Settings
}

// Options configure a Dispatcher.
type Options struct {
	// Store keeps delivery state (NewEtcdStore); required.
	Store Store
	// Routes pick notifiers per incident; nil sends every incident to every notifier.
	// Resolves go to every notifier that delivered the incident, whatever the routes say
	// now (a severity may have changed since).
	Routes []Route
	// Operators, when set, are the notifiers that get the monitoring incidents (the
	// watchdog's own trouble, incident.Kind.Monitoring) instead of what Routes say: the
	// people who run the watchdog, not the job's on-call.
	Operators []string
	// DeliveryDeadline is the dead-man's check: an open incident that no notifier delivered
	// within it is counted (ncclwatch_alert_undelivered_incidents) and listed by
	// Undelivered, from which the detector opens a monitoring incident (default 60 s).
	DeliveryDeadline time.Duration
	// Registerer receives the ncclwatch_alert_* metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Clock drives group waits, rate limits and backoff; default the real clock.
	Clock clockwork.Clock
	// Health, when set, is told of every delivery and failure (NewHealth: the notifiers'
	// metrics over the detector's life, beyond this dispatcher's term).
	Health *Health
	// OutageInBand says an Outage delivers the etcd outage (without etcd, which this
	// dispatcher's delivery state needs): the incident of incident.KeyEtcdUnreachable is
	// then not delivered here too.
	OutageInBand bool
}

// Dispatcher routes incidents to notifiers, each behind its own worker and queue.
//
// Create one when this replica becomes the detector leader and Close it when leadership
// is lost: Start reads the delivery state that the previous leader left in the Store.
type Dispatcher struct {
	workers      []*worker
	routes       []Route
	operators    []string
	log          *slog.Logger
	outageInBand bool
	clock        clockwork.Clock
	deadline     time.Duration
	m            *metrics

	pendMu  sync.Mutex
	pending map[string]time.Time // open incidents no notifier delivered yet -> submitted

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// notifierName keeps names usable as an etcd key segment and a metric label.
var notifierName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// NewDispatcher returns a dispatcher for targets; call Start to run it.
func NewDispatcher(opts Options, targets ...Target) (*Dispatcher, error) {
	if opts.Store == nil {
		return nil, errors.New("alert: dispatcher needs a delivery store")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	if opts.DeliveryDeadline <= 0 {
		opts.DeliveryDeadline = time.Minute
	}
	d := &Dispatcher{routes: opts.Routes, operators: opts.Operators, log: opts.Logger, outageInBand: opts.OutageInBand,
		clock: opts.Clock, deadline: opts.DeliveryDeadline, m: m, pending: map[string]time.Time{}}
	names := map[string]bool{}
	for _, t := range targets {
		if t.Notifier == nil {
			return nil, errors.New("alert: nil notifier")
		}
		name := t.Notifier.Name()
		if !notifierName.MatchString(name) {
			return nil, fmt.Errorf("alert: notifier name %q: want letters, digits, _ . -", name)
		}
		if names[name] {
			return nil, fmt.Errorf("alert: two notifiers named %q", name)
		}
		names[name] = true
		w := newWorker(t, opts, m)
		w.delivered = d.delivered
		d.workers = append(d.workers, w)
	}
	for i, r := range opts.Routes {
		if err := r.validate(names); err != nil {
			return nil, fmt.Errorf("alert: route %d: %w", i+1, err)
		}
	}
	for _, n := range opts.Operators {
		if !names[n] {
			return nil, fmt.Errorf("alert: operators name unknown notifier %q", n)
		}
	}
	return d, nil
}

// Start loads delivery state, starts one worker per notifier and submits the incidents
// known now (open and recently resolved): only what was not delivered yet goes out. The
// workers stop when ctx ends or on Close.
func (d *Dispatcher) Start(ctx context.Context, known []incident.Incident) error {
	d.mu.Lock()
	if d.started {
		d.mu.Unlock()
		return errors.New("alert: dispatcher already started")
	}
	d.started = true
	ctx, d.cancel = context.WithCancel(ctx)
	d.mu.Unlock()

	for _, w := range d.workers {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := w.preload(lctx); err != nil {
			// Not fatal: deliveries are then read one by one when needed.
			d.log.Warn("alert: cannot preload delivery state", "notifier", w.name, "err", err)
		}
		cancel()
	}
	for _, w := range d.workers {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			w.run(ctx)
		}()
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.deadMan(ctx)
	}()
	for _, inc := range known {
		d.Submit(inc)
	}
	return nil
}

// Close stops the workers and waits for them; delivery state already acknowledged is
// written first.
func (d *Dispatcher) Close() {
	d.mu.Lock()
	cancel := d.cancel
	d.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	d.wg.Wait()
}

// Submit hands a new state of an incident to the notifiers it routes to, bounded
// (incident.Bound). It never blocks
// on a notifier: a full queue drops the incident (counted in metrics). Revisions of one
// incident waiting in a queue collapse into the newest.
func (d *Dispatcher) Submit(inc incident.Incident) {
	if inc.ID == "" {
		d.log.Warn("alert: incident without id ignored", "kind", inc.Kind, "job", inc.Job)
		return
	}
	if d.outageInBand && inc.Key == incident.KeyEtcdUnreachable {
		return
	}
	if inc.Kind.Monitoring() && inc.Severity.Rank() < incident.MonitoringSeverity.Rank() {
		// The watchdog's own trouble never pages as a job failure, whoever made it.
		inc.Severity = incident.MonitoringSeverity
	}
	// Bound copies, so the detector may keep changing its own; every notifier renders
	// the same size-independent incident (ops grouped by signature at any job size).
	inc = incident.Bound(inc)
	targets := targetsFor(d.routes, d.operators, inc)
	sent := 0
	for _, w := range d.workers {
		if targets == nil || targets[w.name] || inc.State == incident.StateResolved {
			w.enqueue(inc)
			sent++
		}
	}
	d.track(inc, sent > 0)
}

// targetsFor returns the notifiers an incident goes to (nil: every one): the operators
// for monitoring incidents when there are any, else what the routes say.
func targetsFor(routes []Route, operators []string, inc incident.Incident) map[string]bool {
	if inc.Kind.Monitoring() && len(operators) > 0 {
		out := map[string]bool{}
		for _, n := range operators {
			out[n] = true
		}
		return out
	}
	if routes == nil {
		return nil
	}
	return routeTargets(routes, inc)
}

// track keeps the open incidents that some notifier must deliver until one does (the
// dead-man's check); a resolve ends the wait.
func (d *Dispatcher) track(inc incident.Incident, routed bool) {
	d.pendMu.Lock()
	defer d.pendMu.Unlock()
	switch {
	case inc.State != incident.StateOpen || inc.Key == incident.KeyAlertsUndelivered:
		delete(d.pending, inc.ID)
	case !routed:
	case len(d.pending) < maxKnown:
		if _, ok := d.pending[inc.ID]; !ok {
			d.pending[inc.ID] = d.clock.Now()
		}
	}
}

// delivered ends the dead-man's wait of an incident: a notifier delivered it.
func (d *Dispatcher) delivered(id string) {
	d.pendMu.Lock()
	delete(d.pending, id)
	d.pendMu.Unlock()
}

// Undelivered lists the open incidents that no notifier delivered within the delivery
// deadline (sorted), and when the oldest of them was submitted: paging is dead for them,
// whatever each notifier's health says.
func (d *Dispatcher) Undelivered() (ids []string, since time.Time) {
	now := d.clock.Now()
	d.pendMu.Lock()
	defer d.pendMu.Unlock()
	for id, at := range d.pending {
		if now.Sub(at) < d.deadline {
			continue
		}
		ids = append(ids, id)
		if since.IsZero() || at.Before(since) {
			since = at
		}
	}
	sort.Strings(ids)
	return ids, since
}

// deadMan exports the dead-man's check every second until ctx ends.
func (d *Dispatcher) deadMan(ctx context.Context) {
	t := d.clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		ids, _ := d.Undelivered()
		d.m.undelivered.Set(float64(len(ids)))
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// idle reports whether every queue is empty and nothing is in flight or unsaved.
func (d *Dispatcher) idle() bool {
	for _, w := range d.workers {
		if !w.idle() {
			return false
		}
	}
	return true
}

// entry is one incident waiting in a worker's queue.
type entry struct {
	inc       incident.Incident
	queuedAt  time.Time // group wait and latency count from here
	notBefore time.Time // backoff after a failure
	attempts  int
}

// maxKnown bounds the per-notifier cache of delivery state; the Store stays the truth.
const maxKnown = 100000

// saveAfterAcks persists acknowledgements during a long batch every this many.
const saveAfterAcks = 64

type worker struct {
	name    string
	n       Notifier
	accepts func(Event) bool
	s       Settings
	store   Store
	clock   clockwork.Clock
	log     *slog.Logger
	m       *metrics
	health  *Health
	// delivered is told of each incident this notifier delivered (the dead-man's check).
	delivered func(id string)

	mu       sync.Mutex
	pending  map[string]*entry
	inflight int
	dropping bool
	wake     chan struct{}

	// Touched by the worker goroutine only (and acks, which run on it).
	pausedUntil time.Time
	tokens      float64
	tokensAt    time.Time

	stateMu     sync.Mutex
	known       map[string]Delivery
	unsaved     map[string]Delivery
	saveRetryAt time.Time
}

func newWorker(t Target, opts Options, m *metrics) *worker {
	w := &worker{
		name:    t.Notifier.Name(),
		n:       t.Notifier,
		s:       t.Settings.withDefaults(),
		store:   opts.Store,
		clock:   opts.Clock,
		log:     opts.Logger.With("notifier", t.Notifier.Name()),
		m:       m,
		health:  opts.Health,
		pending: map[string]*entry{},
		wake:    make(chan struct{}, 1),
		known:   map[string]Delivery{},
		unsaved: map[string]Delivery{},
	}
	if f, ok := t.Notifier.(EventFilter); ok {
		w.accepts = f.Accepts
	}
	w.tokens = float64(w.s.RateBurst)
	return w
}

func (w *worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) enqueue(inc incident.Incident) {
	now := w.clock.Now()
	w.mu.Lock()
	if e, ok := w.pending[inc.ID]; ok {
		if inc.Revision >= e.inc.Revision {
			e.inc = inc
		}
		w.mu.Unlock()
		w.signal()
		return
	}
	limit := w.s.QueueSize
	if inc.State == incident.StateResolved {
		// A lost resolve leaves a page open: resolves may use twice the room.
		limit *= 2
	}
	if len(w.pending) >= limit {
		first := !w.dropping
		w.dropping = true
		w.mu.Unlock()
		w.m.dropped.WithLabelValues(w.name, "queue_full").Inc()
		if first {
			w.log.Warn("alert: queue full, dropping incidents", "queue_size", w.s.QueueSize, "incident", inc.ID)
		}
		return
	}
	w.dropping = false
	w.pending[inc.ID] = &entry{inc: inc, queuedAt: now}
	n := len(w.pending)
	w.mu.Unlock()
	w.m.queue.WithLabelValues(w.name).Set(float64(n))
	w.signal()
}

// requeue puts back an entry that was taken but not delivered. A newer revision that
// arrived meanwhile wins, inheriting the backoff.
func (w *worker) requeue(e *entry, notBefore time.Time) {
	w.mu.Lock()
	if cur, ok := w.pending[e.inc.ID]; ok {
		cur.attempts = e.attempts
		if notBefore.After(cur.notBefore) {
			cur.notBefore = notBefore
		}
		if e.queuedAt.Before(cur.queuedAt) {
			cur.queuedAt = e.queuedAt
		}
	} else {
		e.notBefore = notBefore
		w.pending[e.inc.ID] = e
	}
	n := len(w.pending)
	w.mu.Unlock()
	w.m.queue.WithLabelValues(w.name).Set(float64(n))
}

func (w *worker) idle() bool {
	w.mu.Lock()
	busy := len(w.pending) > 0 || w.inflight > 0
	w.mu.Unlock()
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	return !busy && len(w.unsaved) == 0
}

func (w *worker) run(ctx context.Context) {
	defer func() {
		// Persist what was delivered before stopping, so the next leader does not repeat it.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		w.stateMu.Lock()
		w.saveRetryAt = time.Time{}
		w.stateMu.Unlock()
		w.save(fctx)
	}()
	for {
		if ctx.Err() != nil {
			return
		}
		w.save(ctx)
		batch, wait := w.take(w.clock.Now())
		if len(batch) > 0 {
			w.process(ctx, batch)
			continue
		}
		if sw := w.saveWait(); sw > 0 && (wait == 0 || sw < wait) {
			wait = sw
		}
		var timer clockwork.Timer
		var fire <-chan time.Time
		if wait > 0 {
			timer = w.clock.NewTimer(wait)
			fire = timer.Chan()
		}
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// take removes the next batch from the queue, or says how long until one may be due (0:
// the queue is empty, wait for a submission).
func (w *worker) take(now time.Time) ([]*entry, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		return nil, 0
	}
	if now.Before(w.pausedUntil) {
		return nil, w.pausedUntil.Sub(now)
	}
	var ready []*entry
	var next time.Time
	for _, e := range w.pending {
		if e.notBefore.After(now) {
			if next.IsZero() || e.notBefore.Before(next) {
				next = e.notBefore
			}
			continue
		}
		ready = append(ready, e)
	}
	if len(ready) == 0 {
		return nil, next.Sub(now)
	}
	sort.Slice(ready, func(i, j int) bool {
		if !ready[i].queuedAt.Equal(ready[j].queuedAt) {
			return ready[i].queuedAt.Before(ready[j].queuedAt)
		}
		return ready[i].inc.ID < ready[j].inc.ID
	})
	if due := ready[0].queuedAt.Add(w.s.GroupWait); due.After(now) {
		if !next.IsZero() && next.Before(due) {
			due = next
		}
		return nil, due.Sub(now)
	}
	if wait := w.rateWait(now); wait > 0 {
		return nil, wait
	}
	if len(ready) > w.s.MaxBatch {
		ready = ready[:w.s.MaxBatch]
	}
	for _, e := range ready {
		delete(w.pending, e.inc.ID)
	}
	w.inflight++
	w.m.queue.WithLabelValues(w.name).Set(float64(len(w.pending)))
	return ready, 0
}

// rateWait takes a token of the bucket, or says how long until one is there.
func (w *worker) rateWait(now time.Time) time.Duration {
	if w.s.RateEvery <= 0 {
		return 0
	}
	if !w.tokensAt.IsZero() {
		w.tokens += float64(now.Sub(w.tokensAt)) / float64(w.s.RateEvery)
	}
	w.tokens = min(w.tokens, float64(w.s.RateBurst))
	w.tokensAt = now
	if w.tokens >= 1 {
		w.tokens--
		return 0
	}
	return time.Duration((1 - w.tokens) * float64(w.s.RateEvery))
}

func (w *worker) backoff(attempts int) time.Duration {
	d := w.s.BackoffInitial
	for i := 1; i < attempts && d < w.s.BackoffMax; i++ {
		d *= 2
	}
	return min(d, w.s.BackoffMax)
}

// process decides what each entry needs, notifies, records deliveries, and schedules
// retries.
func (w *worker) process(ctx context.Context, batch []*entry) {
	defer func() {
		w.mu.Lock()
		w.inflight--
		w.mu.Unlock()
	}()
	var notes []*Notification
	entries := map[*Notification]*entry{}
	for _, e := range batch {
		prev, err := w.delivery(ctx, e.inc.ID)
		if err != nil {
			w.m.storeErrors.WithLabelValues("get").Inc()
			w.log.Warn("alert: cannot read delivery state; will retry", "incident", e.inc.ID, "err", err)
			e.attempts++
			w.requeue(e, w.clock.Now().Add(w.backoff(e.attempts)))
			continue
		}
		ev, ok := decide(prev, e.inc)
		if !ok {
			w.done(e.inc) // delivered before (by a previous leader)
			continue
		}
		if w.accepts != nil && !w.accepts(ev) {
			w.remember(e.inc, prev, nil)
			w.done(e.inc) // nothing to send: PagerDuty takes no updates
			continue
		}
		n := &Notification{Incident: e.inc, Event: ev, Previous: prev}
		n.ack = func(n *Notification) { w.acked(ctx, n, e) }
		entries[n] = e
		notes = append(notes, n)
	}
	if len(notes) == 0 {
		return
	}
	sort.SliceStable(notes, func(i, j int) bool {
		a, b := notes[i].Incident, notes[j].Incident
		if a.Severity.Rank() != b.Severity.Rank() {
			return a.Severity.Rank() < b.Severity.Rank()
		}
		return a.ID < b.ID
	})

	nctx, cancel := context.WithTimeout(ctx, w.s.Timeout)
	retry, err := safeNotify(nctx, w.n, notes)
	cancel()
	var failed []*Notification
	for _, n := range notes {
		switch {
		case n.delivered:
		case err == nil:
			n.Delivered(nil)
		default:
			failed = append(failed, n)
		}
	}
	w.save(ctx)
	if err == nil {
		return
	}
	for _, n := range failed {
		w.m.failed.WithLabelValues(w.name, string(n.Incident.Kind)).Inc()
	}
	w.health.failure(w.name, len(failed))
	if ctx.Err() != nil {
		for _, n := range failed {
			w.requeue(entries[n], time.Time{})
		}
		return
	}
	if !retry {
		w.m.dropped.WithLabelValues(w.name, "permanent_error").Add(float64(len(failed)))
		w.log.Error("alert: notification failed, not retrying", "incidents", len(failed), "err", err)
		return
	}
	now := w.clock.Now()
	var after time.Duration
	var ra *RetryAfterError
	if errors.As(err, &ra) && ra.After > 0 {
		after = ra.After
		w.pausedUntil = now.Add(after)
	}
	w.m.retries.WithLabelValues(w.name).Inc()
	var wait time.Duration
	for _, n := range failed {
		e := entries[n]
		e.attempts++
		wait = after
		if wait == 0 {
			wait = w.backoff(e.attempts)
		}
		w.requeue(e, now.Add(wait))
	}
	if isNotBuilt(err) {
		// Said once by the notifier itself, and counted as failures above.
		w.log.Debug("alert: notifier not built, will retry", "incidents", len(failed), "retry_in", wait, "err", err)
		return
	}
	w.log.Warn("alert: notification failed, will retry", "incidents", len(failed), "retry_in", wait, "err", err)
}

func safeNotify(ctx context.Context, n Notifier, notes []*Notification) (retry bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			retry, err = false, fmt.Errorf("notifier %s panicked: %v", n.Name(), r)
		}
	}()
	return n.Notify(ctx, notes...)
}

// done tells the dead-man's check that this notifier has what it needs of an open incident.
func (w *worker) done(inc incident.Incident) {
	if w.delivered != nil && inc.State == incident.StateOpen {
		w.delivered(inc.ID)
	}
}

// acked records a delivery reported by the notifier.
func (w *worker) acked(ctx context.Context, n *Notification, e *entry) {
	unsaved := w.remember(n.Incident, n.Previous, n.ref)
	w.m.sent.WithLabelValues(w.name, string(n.Incident.Kind)).Inc()
	w.done(n.Incident)
	w.health.success(w.name, 1, w.clock.Now())
	w.m.latency.WithLabelValues(w.name).Observe(w.clock.Since(e.queuedAt).Seconds())
	if unsaved >= saveAfterAcks {
		w.save(ctx)
	}
}

// remember caches a delivery and marks it for saving; it returns how many are unsaved.
func (w *worker) remember(inc incident.Incident, prev *Delivery, ref *MessageRef) int {
	d := Delivery{
		Schema:      deliverySchema,
		Notifier:    w.name,
		IncidentID:  inc.ID,
		Job:         inc.Job,
		Kind:        inc.Kind,
		Revision:    inc.Revision,
		State:       inc.State,
		Message:     ref,
		DeliveredAt: w.clock.Now().UTC(),
	}
	if ref == nil && prev != nil {
		d.Message = prev.Message
	}
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	if len(w.known) >= maxKnown {
		clear(w.known)
	}
	w.known[inc.ID] = d
	w.unsaved[inc.ID] = d
	return len(w.unsaved)
}

// delivery returns what this notifier delivered of an incident (nil: nothing).
func (w *worker) delivery(ctx context.Context, id string) (*Delivery, error) {
	w.stateMu.Lock()
	d, ok := w.known[id]
	w.stateMu.Unlock()
	if ok {
		return &d, nil
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, found, err := w.store.Get(gctx, w.name, id)
	if err != nil || !found {
		return nil, err
	}
	w.stateMu.Lock()
	if _, ok := w.known[id]; !ok && len(w.known) < maxKnown {
		w.known[id] = d
	}
	w.stateMu.Unlock()
	return &d, nil
}

func (w *worker) preload(ctx context.Context) error {
	ds, err := w.store.List(ctx, w.name)
	if err != nil {
		w.m.storeErrors.WithLabelValues("list").Inc()
		return err
	}
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	for _, d := range ds {
		if len(w.known) >= maxKnown {
			break
		}
		w.known[d.IncidentID] = d
	}
	return nil
}

// saveRetryDelay spaces attempts to write delivery state while the store is down.
const saveRetryDelay = 2 * time.Second

// save writes unsaved deliveries to the store. On failure they stay cached (this process
// will not repeat them) and are retried.
func (w *worker) save(ctx context.Context) {
	w.stateMu.Lock()
	if len(w.unsaved) == 0 || w.clock.Now().Before(w.saveRetryAt) {
		w.stateMu.Unlock()
		return
	}
	recs := make([]Delivery, 0, len(w.unsaved))
	for _, d := range w.unsaved {
		recs = append(recs, d)
	}
	w.stateMu.Unlock()

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := w.store.Put(sctx, recs...)
	cancel()

	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	if err != nil {
		w.m.storeErrors.WithLabelValues("put").Inc()
		w.saveRetryAt = w.clock.Now().Add(saveRetryDelay)
		w.log.Warn("alert: cannot save delivery state; will retry", "records", len(recs), "err", err)
		return
	}
	for _, r := range recs {
		if u, ok := w.unsaved[r.IncidentID]; ok && u.Revision == r.Revision && u.State == r.State {
			delete(w.unsaved, r.IncidentID)
		}
	}
}

// saveWait is how long until unsaved deliveries should be retried (0: nothing to save).
func (w *worker) saveWait() time.Duration {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	if len(w.unsaved) == 0 {
		return 0
	}
	return max(w.saveRetryAt.Sub(w.clock.Now()), time.Millisecond)
}
