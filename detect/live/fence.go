package live

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdfence"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Fenced writes: every incident this replica stores is part of an etcd transaction
// conditioned on the key that gives it the right to write it still existing at the
// revision it created it at (etcdfence): the job's owner key, or for the monitoring job
// its election key. Both live under the replica's lease; a replica frozen or cut off past
// the lease's TTL has lost them, and a successor may have created them anew, so its
// transactions fail whatever its memory says, and it ends its term (term.go). Delivery
// state is fenced the same way on the replica's own key (term.fence).

// storeResult is what became of one job's incident writes.
type storeResult int

const (
	stored       storeResult = iota
	storeRefused             // the fence did not hold: the job is no longer this replica's
	storeFailed              // etcd did not answer
)

// maxTxnOps stays under etcd's default limit of 128 operations per transaction; a chunk
// of incidents writes at most two keys each.
const maxTxnOps = 100

// fenceOf is the comparison a write about job must pass; false when this replica holds
// no right to write it. Call with d.mu held.
func (d *Detector) fenceOf(job string) (clientv3.Cmp, bool) {
	if job == monitoringJob {
		if !d.leader || d.leaderKey == "" {
			return clientv3.Cmp{}, false
		}
		return etcdfence.KeyAt(d.leaderKey, d.leaderRev), true
	}
	o := d.owned[job]
	if o == nil {
		return clientv3.Cmp{}, false
	}
	return etcdfence.KeyAt(snapshot.OwnerKey(job), o.rev), true
}

// persist stores a job's changed incidents, fenced; resolved ones expire after a day. The
// incidents notifiers are told of (paged) also get their sealed page record (PageKey), in
// the same transaction: what a new owner restores an incident from when its incident key
// was deleted or garbled, so that it continues the page under its id (and resolves it)
// instead of paging the same fault again under a new one. A refusal ends the term: the
// replica is stale.
func (d *Detector) persist(ctx context.Context, t *term, job string, incs, paged []incident.Incident) storeResult {
	if len(incs) == 0 {
		return stored
	}
	pages := make(map[string]bool, len(paged))
	for _, inc := range paged {
		pages[inc.ID] = true
	}
	d.mu.Lock()
	cmp, ok := d.fenceOf(job)
	d.mu.Unlock()
	if !ok {
		d.m.fencedWrites.WithLabelValues("refused").Inc()
		return storeRefused
	}
	var lease clientv3.LeaseID
	for start := 0; start < len(incs); start += maxTxnOps / 2 {
		chunk := incs[start:min(start+maxTxnOps/2, len(incs))]
		ops := make([]clientv3.Op, 0, 2*len(chunk))
		for _, inc := range chunk {
			b, err := d.opts.Incidents.Seal(ctx, snapshot.IncidentKey(inc.Job, inc.ID), inc)
			if err != nil {
				d.opts.Logger.Warn("seal incident", "id", inc.ID, "err", err)
				continue
			}
			var page []byte
			if pages[inc.ID] {
				if page, err = d.opts.Incidents.Seal(ctx, snapshot.PageKey(inc.Job, inc.ID), inc); err != nil {
					d.opts.Logger.Warn("seal page record", "id", inc.ID, "err", err)
					continue
				}
			}
			var opts []clientv3.OpOption
			if inc.State == incident.StateResolved {
				if lease == 0 {
					gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					if g, err := d.opts.Client.Grant(gctx, int64((24 * time.Hour).Seconds())); err == nil {
						lease = g.ID
					}
					cancel()
				}
				if lease != 0 {
					opts = append(opts, clientv3.WithLease(lease))
				}
			}
			ops = append(ops, clientv3.OpPut(snapshot.IncidentKey(inc.Job, inc.ID), string(b), opts...))
			if page != nil {
				ops = append(ops, clientv3.OpPut(snapshot.PageKey(inc.Job, inc.ID), string(page), opts...))
			}
		}
		octx, cancel := context.WithTimeout(ctx, 3*time.Second)
		start := time.Now()
		resp, err := d.opts.Client.Txn(octx).If(cmp).Then(ops...).Commit()
		d.timed("store", start, err)
		cancel()
		switch {
		case err != nil:
			d.m.storeErrors.Inc()
			d.m.fencedWrites.WithLabelValues("error").Inc()
			d.opts.Logger.Warn("store incidents", "job", job, "incidents", len(ops), "err", err)
			return storeFailed
		case !resp.Succeeded:
			d.m.fencedWrites.WithLabelValues("refused").Inc()
			d.opts.Logger.Warn("incident write refused: this replica no longer owns the job (its lease expired); ending its term",
				"job", job, "replica", d.opts.ID)
			t.end("a fenced incident write was refused")
			return storeRefused
		}
		d.m.fencedWrites.WithLabelValues("ok").Inc()
		d.mu.Lock()
		for _, inc := range chunk {
			d.incidents[inc.ID] = inc
		}
		d.mu.Unlock()
	}
	return stored
}
