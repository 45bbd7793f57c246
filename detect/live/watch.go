package live

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/backoff"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The detector's view of etcd: the watch of the jobs' and incidents' keys, the load after a
// gap, and what their changes mean for the state.

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

// watched are the trees every replica follows: the sidecars' node keys and the stored
// incidents (each in its own tree: snapshot/keys.go).
var watched = []string{snapshot.JobsPrefix, snapshot.IncidentsPrefix}

// watch applies the changes after rev until the watch fails. The etcd client resumes a
// broken watch stream by itself when etcd returns, so a closed channel is not how an
// outage shows: a read every ProbeEvery says whether etcd answers, and two failures in a
// row mark it unreachable (readiness, the monitoring incident, no judging).
func (d *Detector) watch(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	merged := make(chan clientv3.WatchResponse)
	closed := make(chan struct{}, len(watched))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, prefix := range watched {
		ch := d.opts.Client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for resp := range ch {
				select {
				case merged <- resp:
				case <-wctx.Done():
					return
				}
			}
			closed <- struct{}{} // one closed watch ends both: the next load reads everything again
		}()
	}
	probe := time.NewTicker(d.opts.ProbeEvery)
	defer probe.Stop()
	failed := 0
	for {
		select {
		case <-closed:
			return
		case resp := <-merged:
			if err := resp.Err(); err != nil {
				d.opts.Logger.Warn("etcd watch failed; reloading", "err", err)
				return
			}
			d.apply(resp.Events)
		case <-probe.C:
			octx, ocancel := context.WithTimeout(ctx, d.opts.ProbeEvery)
			start := time.Now()
			_, err := d.opts.Client.Get(octx, snapshot.LeaderKey, clientv3.WithCountOnly())
			d.timed("probe", start, err)
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

// load reads every watched key, at one revision, and rebuilds the state.
func (d *Detector) load(ctx context.Context) (int64, error) {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ops := make([]clientv3.Op, len(watched))
	for i, prefix := range watched {
		ops[i] = clientv3.OpGet(prefix, clientv3.WithPrefix())
	}
	resp, err := d.opts.Client.Txn(octx).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("load %v: %w", watched, err)
	}
	var chs []change
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			chs = append(chs, change{key: string(kv.Key), value: kv.Value})
		}
	}
	ready := d.prepare(chs)
	now := d.opts.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	lost := d.lostNodes()
	d.state = NewState()
	d.inbox = newInbox()
	d.incidents = map[string]incident.Incident{}
	for i, c := range chs {
		d.applyChange(c, ready[i], now)
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
	d.opts.hooks.run(func(h *hooks) func() { return h.apply })
	chs := make([]change, len(evs))
	for i, ev := range evs {
		chs[i] = change{key: string(ev.Kv.Key), value: ev.Kv.Value, del: ev.Type == clientv3.EventTypeDelete}
	}
	d.applyChanges(chs)
	d.m.events.Add(float64(len(evs)))
}

// nodeRemoved applies the deletion of a node key. A job judged elsewhere has its node
// decoded now, so that a loss is remembered when this replica takes the job over.
func (d *Detector) nodeRemoved(job, node string, now time.Time) {
	r := d.inbox.remove(job, node)
	if d.owned[job] == nil && r != nil && r.value != nil && !d.state.has(job, node) {
		if n, err := d.decode(job, node, r); err == nil {
			d.state.Put(n, now)
		}
	}
	d.nodeKeyDeleted(job, node, now)
}

// nodeKeyDeleted notes a node key that vanished; a lease that expired (no clean stop)
// counts as a loss for the mass-loss rule.
func (d *Detector) nodeKeyDeleted(job, node string, now time.Time) {
	if d.state.Delete(job, node, now) {
		d.lostTimes[job] = append(d.lostTimes[job], now)
		d.opts.Logger.Warn("node lease expired", "job", job, "node", node)
	}
}

// applyChange applies one change of a key, its value decoded ahead (prepare). Job and
// node always come from the key. Call with d.mu held.
func (d *Detector) applyChange(c change, rd ready, now time.Time) {
	if c.del {
		if job, node, ok := snapshot.ParseNodeKey(c.key); ok {
			d.nodeRemoved(job, node, now)
		} else if _, id, ok := snapshot.ParseIncidentKey(c.key); ok {
			delete(d.incidents, id)
		}
		// A base goes with its node (same lease); the node's entry keeps it until then,
		// in case the node is lost and its last value must be read.
		return
	}
	if job, node, ok := snapshot.ParseNodeKey(c.key); ok {
		r := d.inbox.node(job, node)
		r.value = c.value
		if d.owned[job] == nil {
			return
		}
		if !rd.done { // the job was taken over since prepare
			rd.node, rd.err = d.decode(job, node, r)
		}
		d.putDecoded(job, node, rd.node, rd.err, now)
		return
	}
	if job, node, ok := snapshot.ParseBaseKey(c.key); ok {
		if rd.err != nil || rd.base == nil {
			d.m.badSnapshots.Inc()
			d.opts.Logger.Warn("bad node snapshot base", "key", c.key, "err", rd.err)
			return
		}
		d.inbox.node(job, node).base = rd.base
		return
	}
	if _, _, ok := snapshot.ParseIncidentKey(c.key); ok {
		if inc, ok, _ := d.openIncident(context.Background(), c.key, c.value); ok {
			d.incidents[inc.ID] = inc
		}
	}
}
