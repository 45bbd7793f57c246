// Package publish keeps one node's snapshot in etcd: a single key under the lease of an
// etcd concurrency.Session, rewritten when the snapshot changes and at most once per
// interval. etcd outages never block the caller: the publisher retries with backoff, and
// when its session ends (the lease expired during an outage) it opens a new one and
// republishes the full state.
//
// With a snapshot.Wire, values travel compressed against a base (snapshot/wire.go): the
// publisher writes a base beside the key (BaseKey, same lease) in the same transaction as
// the key whenever a new session starts, the base is BaseEvery old, or the value grew past
// half the base's size, and otherwise only the key, compressed against that base.
package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ncclwatch/watchdog/internal/backoff"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Options configure a Publisher.
type Options struct {
	Key string
	// Wire, when set, compresses each body against a base kept at BaseKey; nil writes
	// bodies as they are (and BaseKey is unused).
	Wire    *snapshot.Wire
	BaseKey string
	// BaseEvery is the longest a base serves before a new one is written (default 1 min).
	BaseEvery time.Duration
	// TTL of the lease: the key disappears this long after the sidecar dies (default 10 s).
	TTL time.Duration
	// Interval is the shortest time between two writes (default 1 s).
	Interval time.Duration
	// OpTimeout bounds one etcd call (default 3 s).
	OpTimeout time.Duration
	// MaxBackoff caps the wait between failed attempts (default 2 s). Each wait is random
	// up to a cap that doubles per failure (full jitter), so the sidecars of a cluster that
	// all lost etcd at once do not all retry at once; the cap is low because the snapshot
	// is republished within about one cap of etcd's return (with the client's connection
	// backoff, internal/etcdconn), and until then the detector judges stale state.
	MaxBackoff time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Publisher writes a node key under a lease.
type Publisher struct {
	cli  *clientv3.Client
	opts Options
	m    metrics

	mu      sync.Mutex
	sess    *concurrency.Session // nil until the first write, and after its lease is lost
	last    []byte
	lastPut time.Time
	healthy bool
	wake    chan struct{}
	// base is what values are compressed against under sess (nil: none yet), written at
	// baseAt, baseSize bytes on the wire.
	base     *snapshot.Base
	baseAt   time.Time
	baseSize int
	writes   int64 // etcd writes (a transaction of base and key counts once)
	written  int64 // bytes of values written
}

type metrics struct {
	writes   *prometheus.CounterVec
	latency  prometheus.Histogram
	bytes    prometheus.Gauge
	leases   prometheus.Counter
	up       prometheus.Gauge
	lastSucc prometheus.Gauge
	bases    prometheus.Counter
	written  prometheus.Counter
}

// New returns a publisher; Run starts it.
func New(cli *clientv3.Client, opts Options) *Publisher {
	if opts.TTL <= 0 {
		opts.TTL = 10 * time.Second
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = 3 * time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 2 * time.Second
	}
	if opts.BaseEvery <= 0 {
		opts.BaseEvery = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Publisher{cli: cli, opts: opts, wake: make(chan struct{}, 1)}
	p.m = metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_publish_total",
			Help: "Snapshot writes to etcd by result (ok, error, unchanged)."}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ncclwatch_publish_latency_seconds",
			Help: "Latency of one snapshot write to etcd.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_publish_bytes",
			Help: "Size of the last published node snapshot as written to etcd (compressed, with its base when one was written)."}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_publish_written_bytes_total",
			Help: "Bytes of node snapshot values written to etcd."}),
		bases: prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_publish_base_writes_total",
			Help: "Writes that carried a new base (the full snapshot that later values are compressed against)."}),
		leases: prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_publish_lease_grants_total",
			Help: "Leases granted (more than one means etcd outages or lease expiry)."}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_publish_etcd_up",
			Help: "1 when the last etcd write succeeded."}),
		lastSucc: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_publish_last_success_timestamp_seconds",
			Help: "Unix time of the last successful write."}),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{p.m.writes, p.m.latency, p.m.bytes, p.m.leases, p.m.up, p.m.lastSucc, p.m.written, p.m.bases} {
			opts.Registerer.MustRegister(c)
		}
	}
	return p
}

// Every is the time between two writes: the sidecar measures how late they run.
func (p *Publisher) Every() time.Duration { return p.opts.Interval }

// Poke asks for a write soon (still at most once per Interval); it never blocks.
func (p *Publisher) Poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Stats says how many writes the publisher made to etcd and how many bytes of values they
// carried (the load generator sums them).
func (p *Publisher) Stats() (writes, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes, p.written
}

// Healthy reports whether the last write succeeded.
func (p *Publisher) Healthy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healthy
}

// Run publishes until ctx ends. src builds the current snapshot body; it must be cheap and
// never block on I/O. The lease then stays until Close revokes it or its TTL runs
// out, which is what a killed sidecar looks like.
func (p *Publisher) Run(ctx context.Context, src func() ([]byte, error)) error {
	bo := backoff.Backoff{Base: 250 * time.Millisecond, Max: p.opts.MaxBackoff}
	var retryIn time.Duration
	tick := time.NewTicker(p.opts.Interval)
	defer tick.Stop()
	for {
		if bo.Failing() {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(retryIn):
			}
		} else {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			case <-p.wake:
			case <-p.lost():
				// The lease is gone: the next write opens a new session with the full state.
			}
			// At most one write per Interval, whatever woke us.
			p.mu.Lock()
			wait := p.opts.Interval - p.opts.Now().Sub(p.lastPut)
			p.mu.Unlock()
			if wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		}
		body, err := src()
		if err != nil {
			p.opts.Logger.Error("build snapshot", "err", err)
			retryIn = bo.Next()
			continue
		}
		if err := p.publish(ctx, body); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !bo.Failing() {
				p.opts.Logger.Warn("publish to etcd failed; retrying with backoff", "key", p.opts.Key, "err", err)
			}
			retryIn = bo.Next()
			continue
		}
		if bo.Failing() {
			p.opts.Logger.Info("publish to etcd recovered", "key", p.opts.Key)
		}
		bo.Reset()
	}
}

// lost is closed when the current session's lease is lost; nil without a session.
func (p *Publisher) lost() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sess == nil {
		return nil
	}
	return p.sess.Done()
}

// publish writes body unless it equals the last write under a live lease.
func (p *Publisher) publish(ctx context.Context, body []byte) error {
	sess, err := p.session(ctx)
	if err != nil {
		p.fail()
		return err
	}
	p.mu.Lock()
	same := len(p.last) > 0 && bytes.Equal(body, p.last)
	p.mu.Unlock()
	if same {
		p.m.writes.WithLabelValues("unchanged").Inc()
		return nil
	}
	start := p.opts.Now()
	ops, base, size, err := p.values(body, start, sess.Lease())
	if err != nil {
		p.fail()
		return err
	}
	octx, cancel := context.WithTimeout(ctx, p.opts.OpTimeout)
	if len(ops) == 1 {
		_, err = p.cli.Do(octx, ops[0])
	} else {
		_, err = p.cli.Txn(octx).Then(ops...).Commit()
	}
	cancel()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// Expired before the keep-alive noticed: the next write opens a new session.
			p.drop(sess)
		}
		p.fail()
		return fmt.Errorf("put %s: %w", p.opts.Key, err)
	}
	now := p.opts.Now()
	p.m.latency.Observe(now.Sub(start).Seconds())
	p.m.writes.WithLabelValues("ok").Inc()
	p.m.bytes.Set(float64(size))
	p.m.written.Add(float64(size))
	p.m.up.Set(1)
	p.m.lastSucc.Set(float64(now.UnixNano()) / 1e9)
	p.mu.Lock()
	p.last = append(p.last[:0], body...)
	p.lastPut = now
	p.healthy = true
	p.writes++
	p.written += int64(size)
	if base != nil {
		p.base, p.baseAt, p.baseSize = base, now, len(ops[0].ValueBytes())
	}
	p.mu.Unlock()
	if base != nil {
		p.m.bases.Inc()
	}
	return nil
}

// values are the puts that publish body: the key's value alone, or, with a Wire, the
// value compressed against the current base, or a new base and the value against it when
// one is due. base is the new base (nil: none), size the bytes written.
func (p *Publisher) values(body []byte, now time.Time, lease clientv3.LeaseID) (ops []clientv3.Op, base *snapshot.Base, size int, err error) {
	w := p.opts.Wire
	if w == nil {
		return []clientv3.Op{clientv3.OpPut(p.opts.Key, string(body), clientv3.WithLease(lease))}, nil, len(body), nil
	}
	p.mu.Lock()
	cur, age, curSize := p.base, now.Sub(p.baseAt), p.baseSize
	p.mu.Unlock()
	if cur != nil && age < p.opts.BaseEvery {
		v, err := w.Delta(body, cur)
		if err != nil {
			return nil, nil, 0, err
		}
		// A value that grew past half its base says the node changed a lot since: a new
		// base costs less from now on.
		if len(v) <= curSize/2 {
			return []clientv3.Op{clientv3.OpPut(p.opts.Key, string(v), clientv3.WithLease(lease))}, nil, len(v), nil
		}
	}
	base = snapshot.NewBase(append([]byte(nil), body...))
	full, err := w.Full(body)
	if err != nil {
		return nil, nil, 0, err
	}
	v, err := w.Delta(body, base)
	if err != nil {
		return nil, nil, 0, err
	}
	ops = []clientv3.Op{clientv3.OpPut(p.opts.BaseKey, string(full), clientv3.WithLease(lease)),
		clientv3.OpPut(p.opts.Key, string(v), clientv3.WithLease(lease))}
	return ops, base, len(full) + len(v), nil
}

func (p *Publisher) fail() {
	p.m.writes.WithLabelValues("error").Inc()
	p.m.up.Set(0)
	p.mu.Lock()
	p.healthy = false
	p.mu.Unlock()
}

// session returns the live session, or opens a new one when there is none or its lease
// is lost; a new session's first write carries the full state.
//
// The lease is granted here and handed to concurrency.NewSession (WithLease), which then
// makes no call to etcd, rather than letting NewSession grant it: NewSession grants with
// the context that afterwards keeps the lease alive (WithContext, default the client's),
// so its grant cannot be given a timeout without ending the keep-alive at that timeout;
// and without one, while etcd is down, it returns only when that context ends (the client
// waits for a connection), so Close could not give up after OpTimeout, and the failures
// would be neither counted nor logged. Granted under OpTimeout, a failed grant is a failed
// write, retried with backoff. From then on the session keeps the lease alive and Done
// says when it is lost.
func (p *Publisher) session(ctx context.Context) (*concurrency.Session, error) {
	p.mu.Lock()
	sess := p.sess
	p.mu.Unlock()
	if sess != nil {
		select {
		case <-sess.Done():
			p.drop(sess)
		default:
			return sess, nil
		}
	}
	ttl := int((p.opts.TTL + time.Second - 1) / time.Second)
	octx, cancel := context.WithTimeout(ctx, p.opts.OpTimeout)
	g, err := p.cli.Grant(octx, int64(ttl))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	sess, err = concurrency.NewSession(p.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(ttl))
	if err != nil {
		return nil, fmt.Errorf("keep lease alive: %w", err)
	}
	p.m.leases.Inc()
	p.mu.Lock()
	p.sess = sess
	p.last = p.last[:0]
	p.base = nil
	p.mu.Unlock()
	return sess, nil
}

// drop forgets a session whose lease is lost, so that the next write opens a new one.
func (p *Publisher) drop(sess *concurrency.Session) {
	p.mu.Lock()
	if p.sess == sess {
		p.sess = nil
		p.last = p.last[:0]
		p.base = nil
	}
	p.mu.Unlock()
	sess.Orphan()
}

// Close writes a final body (a snapshot that says the sidecar is stopping, so the detector
// does not take the vanishing key for a lost node), then revokes the lease so the key goes
// at once. Best effort: etcd may be down.
func (p *Publisher) Close(final []byte) {
	if final != nil {
		ctx, cancel := context.WithTimeout(context.Background(), p.opts.OpTimeout)
		if err := p.publish(ctx, final); err != nil {
			p.opts.Logger.Debug("final snapshot", "err", err)
		}
		cancel()
	}
	p.mu.Lock()
	sess := p.sess
	p.sess = nil
	p.mu.Unlock()
	if sess == nil {
		return
	}
	// Not sess.Close: it waits up to the whole TTL for the revoke, and a stopping sidecar
	// waits at most OpTimeout on an etcd that is down.
	sess.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.OpTimeout)
	defer cancel()
	if _, err := p.cli.Revoke(ctx, sess.Lease()); err != nil {
		p.opts.Logger.Debug("revoke lease at shutdown", "err", err)
	}
}
