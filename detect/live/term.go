package live

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/backoff"
	"github.com/ncclwatch/watchdog/internal/etcdfence"
	"github.com/ncclwatch/watchdog/snapshot"
)

// A term is one membership of this replica: a lease, which the replica keeps alive itself,
// and under it the replica's key (ReplicaKey), its election key (concurrency.Election's
// layout: LeaderKey/<lease hex>, so older replicas take part in the same election) and the
// owner keys of its jobs. Each interval the term reads who is there (ownership.go), then
// judges its jobs. A term ends when etcd says its lease is gone, when one of its fenced
// writes is refused, or when the detector stops; the next term starts with a new lease.
//
// The replica renews the lease itself (not concurrency.Session) for two reasons. Through an
// etcd outage it keeps trying every 250 ms instead of giving the lease up after its TTL: etcd
// renews every lease when it starts again, so the term, its leadership and its jobs go on
// as soon as etcd answers (issue 26: a leader was missing for 11 s after etcd's return,
// while a new campaign waited for the old key's lease to run out). And tests can freeze
// the renewal, as SIGSTOP does. Safety never rests on the replica's belief that it still
// holds its keys: every write is fenced on them (fence.go).
type term struct {
	lease       clientv3.LeaseID
	replicaKey  string
	electionKey string
	rev         int64 // create revision of both keys (one transaction)

	seen    map[string]time.Time // replicas, since when this term has seen them
	beats   map[string]beat      // replicas' heartbeats as last read (liveness.go)
	unowned map[string]time.Time // jobs without an owner, since when

	done   chan struct{}
	once   sync.Once
	reason string
}

// end ends the term (once); the reason is logged.
func (t *term) end(reason string) {
	t.once.Do(func() {
		t.reason = reason
		close(t.done)
	})
}

func (t *term) ended() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// fence is what the term's delivery-state writes must pass: its replica key still there.
func (t *term) fence() etcdfence.Fence {
	return etcdfence.Fence{Cmps: []clientv3.Cmp{etcdfence.KeyAt(t.replicaKey, t.rev)},
		Refused: func() { t.end("a fenced delivery-state write was refused") }}
}

// termOpTimeout bounds one etcd call of the term's own bookkeeping.
const termOpTimeout = 3 * time.Second

// termLoop runs terms one after the other until ctx ends.
func (d *Detector) termLoop(ctx context.Context) {
	bo := backoff.Backoff{Base: 250 * time.Millisecond, Max: watchRetryMax}
	for ctx.Err() == nil {
		t, err := d.startTerm(ctx)
		if err != nil {
			if ctx.Err() == nil && !bo.Failing() {
				d.opts.Logger.Warn("cannot start a detector term; retrying", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(bo.Next()):
			}
			continue
		}
		bo.Reset()
		d.opts.Logger.Info("detector term started", "id", d.opts.ID, "lease", fmt.Sprintf("%x", int64(t.lease)))
		d.runTerm(ctx, t)
		d.endTerm(t)
	}
}

// startTerm grants a lease and registers the replica and its election key under it.
func (d *Detector) startTerm(ctx context.Context) (*term, error) {
	ttl := int64((d.opts.LeaseTTL + time.Second - 1) / time.Second)
	octx, cancel := context.WithTimeout(ctx, termOpTimeout)
	defer cancel()
	g, err := d.opts.Client.Grant(octx, ttl)
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	t := &term{lease: g.ID, replicaKey: snapshot.ReplicaKey(d.opts.ID),
		electionKey: fmt.Sprintf("%s/%x", snapshot.LeaderKey, int64(g.ID)),
		seen:        map[string]time.Time{}, beats: map[string]beat{}, unowned: map[string]time.Time{}, done: make(chan struct{})}
	for attempt := 0; attempt < 2; attempt++ {
		resp, err := d.opts.Client.Txn(octx).
			If(clientv3.Compare(clientv3.CreateRevision(t.replicaKey), "=", 0)).
			Then(clientv3.OpPut(t.replicaKey, d.opts.ID, clientv3.WithLease(g.ID)),
				clientv3.OpPut(t.electionKey, d.opts.ID, clientv3.WithLease(g.ID))).
			Else(clientv3.OpGet(t.replicaKey)).Commit()
		if err != nil {
			d.revoke(g.ID)
			return nil, fmt.Errorf("register replica: %w", err)
		}
		if resp.Succeeded {
			t.rev = resp.Header.Revision
			return t, nil
		}
		// The key of this replica's earlier term, whose lease could not be revoked (etcd
		// was down as it ended): revoke it now, with the keys it holds, rather than wait out
		// its TTL. Another process's key is never touched.
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].Lease == 0 || clientv3.LeaseID(kvs[0].Lease) != d.prevLease {
			d.revoke(g.ID)
			return nil, fmt.Errorf("replica id %q is in use by another detector: give each replica its own --id", d.opts.ID)
		}
		d.opts.Logger.Info("revoking the lease of this replica's earlier term", "id", d.opts.ID)
		if _, err := d.opts.Client.Revoke(octx, d.prevLease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			d.revoke(g.ID)
			return nil, fmt.Errorf("revoke the earlier term's lease: %w", err)
		}
	}
	d.revoke(g.ID)
	return nil, fmt.Errorf("replica key %s could not be registered", t.replicaKey)
}

// runTerm keeps the lease, and each interval syncs the jobs' ownership and evaluates, until
// the term or ctx ends.
func (d *Detector) runTerm(ctx context.Context, t *term) {
	tctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); d.keepAlive(tctx, t) }()

	reg := prometheus.NewRegistry()
	d.mu.Lock()
	d.termReg = reg
	d.mu.Unlock()
	var alerts Alerts
	if d.opts.NewAlerts != nil {
		a, err := d.opts.NewAlerts(reg)
		if err != nil {
			d.opts.Logger.Error("alert dispatcher", "err", err)
		} else if err := a.Start(etcdfence.With(tctx, t.fence()), nil); err != nil {
			d.opts.Logger.Error("start alert dispatcher", "err", err)
		} else {
			alerts = a
			defer a.Close()
		}
	}
	// Lateness counts from this term's first evaluation: the time between terms (a lost
	// lease, an etcd outage) is no evaluation running late.
	d.mu.Lock()
	d.lastEval = time.Time{}
	d.mu.Unlock()
	tick := time.NewTicker(d.opts.Interval)
	defer tick.Stop()
	for {
		if h := d.opts.hooks; h == nil || h.blindSync == nil || !h.blindSync() {
			d.sync(tctx, t, alerts)
		}
		if t.ended() || tctx.Err() != nil {
			return
		}
		d.opts.hooks.run(func(h *hooks) func() { return h.evaluate })
		evaluated := time.Now()
		d.evaluate(tctx, t, alerts)
		tick.Reset(d.opts.Interval)
		select {
		case <-tctx.Done():
			return
		case <-t.done:
			return
		case <-tick.C:
		case <-d.changed:
			// New evidence: judge it half an interval after the last evaluation began at
			// the soonest, so that a busy watch at most doubles the evaluations.
			select {
			case <-tctx.Done():
				return
			case <-t.done:
				return
			case <-time.After(d.opts.Interval/2 - time.Since(evaluated)):
			}
		}
	}
}

// keepAlive renews the term's lease and rewrites its heartbeat (liveness.go) every third
// of its TTL. While etcd does not answer it retries every 250 ms; when etcd says the lease
// is gone, or the heartbeat is refused, the term ends.
func (d *Detector) keepAlive(ctx context.Context, t *term) {
	every := max(d.opts.LeaseTTL/3, 100*time.Millisecond)
	wait := every
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.done:
			return
		case <-time.After(wait):
		}
		d.opts.hooks.run(func(h *hooks) func() { return h.keepAlive })
		octx, cancel := context.WithTimeout(ctx, every)
		resp, err := d.opts.Client.KeepAliveOnce(octx, t.lease)
		cancel()
		if err == nil && resp.TTL > 0 {
			err = d.heartbeat(ctx, t)
			if t.ended() {
				return
			}
		}
		switch {
		case err == nil && resp.TTL > 0:
			wait = every
		case err == nil || errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound):
			t.end("its lease expired")
			return
		case ctx.Err() != nil:
			return
		default:
			wait = 250 * time.Millisecond
		}
	}
}

// endTerm drops what the term held: leadership, jobs and their decoded state. Unless the
// lease is already gone, it is revoked so that the other replicas take over at once.
func (d *Detector) endTerm(t *term) {
	t.end("the detector stopped")
	d.mu.Lock()
	jobs := make([]string, 0, len(d.owned))
	for job := range d.owned {
		jobs = append(jobs, job)
	}
	for _, job := range jobs {
		d.releaseLocked(job)
	}
	d.setLeaderLocked(false, "", 0, nil)
	_, _, ranks := d.state.Counts()
	d.mu.Unlock()
	d.m.owned.Set(0)
	d.m.ranks.Set(float64(ranks))
	d.opts.Logger.Info("detector term ended", "id", d.opts.ID, "why", t.reason, "jobs", len(jobs))
	d.prevLease = t.lease
	d.revoke(t.lease)
}

// revoke gives a lease up, best effort.
func (d *Detector) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = d.opts.Client.Revoke(ctx, id)
}
