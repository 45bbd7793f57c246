package live

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/etcdfence"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Liveness of replicas rests on what only detector credentials can write, never on a
// lease alone. etcd lets any authenticated user keep any lease alive (LeaseKeepAlive
// checks no permission, in 3.4 as in 3.6), so a sidecar's credential could keep a dead
// replica's lease, and with it its owner and election keys, alive for as long as it
// likes: its jobs would never be taken over (issue 34: a hang paged 37 s after the fault
// instead of 11 s). So each replica rewrites its replica key (its heartbeat) every third
// of its TTL, and the others judge it by the key's modification revision: one that has
// not moved for a whole TTL of this replica's successful reads is dead, whatever its
// lease says. The first replica to see it removes its replica key (conditioned on the
// revision it saw), and every owner and election key under a lease that no live replica
// key holds is removed as an orphan (conditioned on its create revision): its jobs are
// claimed in the same cycle, and the next in the election leads. The dead replica's
// fences (its owner keys, its replica key) are gone with them, so if it was only frozen
// its writes are refused when it resumes, as after a lease expiry.
//
// Time is this replica's own: it measures how long it saw the same revision, so no
// clocks need agree. An etcd outage stops every heartbeat at once: a failed read forgets
// what was seen, so that no replica is judged dead for the time etcd was away.

// beat is the last heartbeat revision seen of a replica and when this replica saw it change.
type beat struct {
	rev   int64
	since time.Time
}

// replicaKV is a replica key as read.
type replicaKV struct {
	id          string
	modRev      int64
	createRev   int64
	lease       int64
	heartbeatOK bool // its heartbeat moved within a TTL (or it is this replica)
}

// heartbeat rewrites the term's replica key under its lease, conditioned on the key being
// the one the term created: refused, the others judged this replica dead (or its lease is
// gone) and the term ends.
func (d *Detector) heartbeat(ctx context.Context, t *term) error {
	octx, cancel := context.WithTimeout(ctx, termOpTimeout)
	defer cancel()
	start := time.Now()
	resp, err := d.opts.Client.Txn(octx).If(etcdfence.KeyAt(t.replicaKey, t.rev)).
		Then(clientv3.OpPut(t.replicaKey, d.opts.ID, clientv3.WithLease(t.lease))).Commit()
	d.timed("heartbeat", start, err)
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		t.end("its replica key was removed: the other replicas judged it dead")
	}
	return nil
}

// judge updates the term's view of the replicas' heartbeats from one read and says which
// are alive. Call after every successful read; forget after every failed one.
func (d *Detector) judge(t *term, kvs []replicaKV, now time.Time) {
	seen := make(map[string]bool, len(kvs))
	for i := range kvs {
		r := &kvs[i]
		seen[r.id] = true
		b, ok := t.beats[r.id]
		if !ok || b.rev != r.modRev || b.since.IsZero() {
			b = beat{rev: r.modRev, since: now}
			t.beats[r.id] = b
		}
		r.heartbeatOK = r.id == d.opts.ID || now.Sub(b.since) < d.opts.LeaseTTL
	}
	for id := range t.beats {
		if !seen[id] {
			delete(t.beats, id)
		}
	}
}

// forget makes every heartbeat count from the next successful read (etcd did not answer:
// nobody could beat meanwhile).
func (t *term) forget() {
	for id, b := range t.beats {
		b.since = time.Time{}
		t.beats[id] = b
	}
}

// evict removes the replica key of a replica whose heartbeat stopped, if it still has the
// revision seen. It says whether the key is gone.
func (d *Detector) evict(ctx context.Context, r replicaKV) bool {
	octx, cancel := context.WithTimeout(ctx, termOpTimeout)
	defer cancel()
	key := snapshot.ReplicaKey(r.id)
	resp, err := d.opts.Client.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.modRev)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil || !resp.Succeeded {
		return false
	}
	d.m.ownership.WithLabelValues("evicted").Inc()
	d.opts.Logger.Warn("a detector replica's heartbeat stopped: removed its keys, taking its jobs over (its lease may still be kept alive)",
		"replica", r.id, "silent_for", d.opts.LeaseTTL, "id", d.opts.ID)
	return true
}

// orphanKV is an owner or election key whose lease no live replica key holds.
type orphanKV struct {
	key       string
	createRev int64
}

// removeOrphans deletes keys left by replicas that are gone, each only if it is still
// the key that was read; it returns those it deleted.
func (d *Detector) removeOrphans(ctx context.Context, orphans []orphanKV) map[string]bool {
	gone := map[string]bool{}
	for start := 0; start < len(orphans); start += maxTxnOps {
		chunk := orphans[start:min(start+maxTxnOps, len(orphans))]
		cmps := make([]clientv3.Cmp, len(chunk))
		ops := make([]clientv3.Op, len(chunk))
		for i, o := range chunk {
			cmps[i] = etcdfence.KeyAt(o.key, o.createRev)
			ops[i] = clientv3.OpDelete(o.key)
		}
		octx, cancel := context.WithTimeout(ctx, termOpTimeout)
		resp, err := d.opts.Client.Txn(octx).If(cmps...).Then(ops...).Commit()
		cancel()
		if err != nil || !resp.Succeeded {
			continue // changed since the read: the next cycle reads again
		}
		for _, o := range chunk {
			gone[o.key] = true
		}
	}
	return gone
}
