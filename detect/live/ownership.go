package live

import (
	"context"
	"hash/fnv"
	"slices"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdfence"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Sharding: replicas share the jobs through etcd. Each job has at most one owner, named by
// its owner key (snapshot.OwnerKey), created only if absent and held under the owner's
// lease: a dead owner's keys vanish with its lease, and the others take its jobs within the
// TTL and one interval. Which replica should own a job is rendezvous hashing over the live
// replicas (ReplicaKey): each job prefers the replica with the highest hash of (replica,
// job), so the replicas agree without talking, and a replica that comes or goes moves only
// the jobs it wins or held. The preferred replica claims an unowned job at once, any other
// after claimAfter (a preferred replica that is registered but stuck). A job moves to a
// newly preferred replica only once that replica has lived settleAfter, and only while it
// has no open incident: the new owner continues incidents under their ids, but a move
// while a page is in flight could repeat it.
//
// A replica that takes a job over reads its incidents from etcd (the lifecycle continues
// them: same ids, no second page) and decodes its nodes' latest snapshots from the inbox.

// ownedJob is a job this replica owns: the create revision of its owner key (the fence of
// its writes) and its incidents.
type ownedJob struct {
	rev  int64
	life *detect.Lifecycle
}

// owner is a job's owner as read from etcd.
type owner struct {
	replica string
	rev     int64
}

// Bounds of one sync, so that a replica starting among thousands of jobs spreads its
// claims over a few intervals rather than one burst of transactions.
const (
	maxClaimsPerSync   = 256
	maxReleasesPerSync = 16
)

// preferred is the replica a job prefers among replicas (rendezvous hashing).
func preferred(job string, replicas []string) string {
	var best string
	var bestScore uint64
	j := fnv64(job)
	for _, r := range replicas {
		if s := mix(fnv64(r) ^ j*0x9e3779b97f4a7c15); best == "" || s > bestScore || (s == bestScore && r < best) {
			best, bestScore = r, s
		}
	}
	return best
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// mix is splitmix64's finalizer: FNV alone ranks similar names ("replica0", "replica1")
// the same way for every job.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// sync reads the replicas, the owners and the election, then claims, keeps or gives up
// jobs. A failed read changes nothing: while etcd does not answer the replica keeps what it
// had (its writes are fenced), so it goes on at once when etcd returns.
func (d *Detector) sync(ctx context.Context, t *term, alerts Alerts) {
	octx, cancel := context.WithTimeout(ctx, termOpTimeout)
	start := time.Now()
	resp, err := d.opts.Client.Txn(octx).Then(
		clientv3.OpGet(snapshot.ShardPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(snapshot.LeaderKey+"/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
	).Commit()
	d.timed("sync", start, err)
	cancel()
	if err != nil {
		t.forget()
		return
	}
	now := d.opts.Now()
	var kvsOfReplicas []replicaKV
	type ownerKV struct {
		job string
		owner
		lease int64
	}
	var ownerKVs []ownerKV
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		key := string(kv.Key)
		if id, ok := snapshot.ParseReplicaKey(key); ok {
			kvsOfReplicas = append(kvsOfReplicas, replicaKV{id: id, modRev: kv.ModRevision, createRev: kv.CreateRevision, lease: kv.Lease})
		} else if job, ok := snapshot.ParseOwnerKey(key); ok {
			ownerKVs = append(ownerKVs, ownerKV{job: job, owner: owner{replica: string(kv.Value), rev: kv.CreateRevision}, lease: kv.Lease})
		}
	}
	// Liveness (liveness.go): replicas whose heartbeat stopped are removed, and with them
	// every key under a lease no live replica holds.
	d.judge(t, kvsOfReplicas, now)
	self := false
	live := map[int64]bool{}
	var replicas []string
	for _, r := range kvsOfReplicas {
		if r.id == d.opts.ID {
			self = r.createRev == t.rev
		}
		if !r.heartbeatOK && d.evict(ctx, r) {
			delete(t.beats, r.id)
			continue
		}
		live[r.lease] = true
		replicas = append(replicas, r.id)
	}
	if !self {
		t.end("its replica key is gone: the other replicas judged it dead")
		return
	}
	var orphans []orphanKV
	for _, o := range ownerKVs {
		if !live[o.lease] {
			orphans = append(orphans, orphanKV{key: snapshot.OwnerKey(o.job), createRev: o.rev})
		}
	}
	elections := resp.Responses[1].GetResponseRange().Kvs
	for _, kv := range elections {
		if !live[kv.Lease] {
			orphans = append(orphans, orphanKV{key: string(kv.Key), createRev: kv.CreateRevision})
		}
	}
	gone := d.removeOrphans(ctx, orphans)
	owners := map[string]owner{}
	for _, o := range ownerKVs {
		if !gone[snapshot.OwnerKey(o.job)] {
			owners[o.job] = o.owner
		}
	}
	for _, id := range replicas {
		if _, ok := t.seen[id]; !ok {
			t.seen[id] = now
		}
	}
	sort.Strings(replicas)
	for id := range t.seen {
		if !slices.Contains(replicas, id) {
			delete(t.seen, id)
		}
	}
	var leaderID string
	leading := false
	for _, kv := range elections {
		if !gone[string(kv.Key)] {
			leaderID = string(kv.Value)
			leading = string(kv.Key) == t.electionKey
			break
		}
	}

	d.mu.Lock()
	wasLeading := d.leader
	d.mu.Unlock()
	// A new leader continues the monitoring incidents its predecessor stored.
	var stored []incident.Incident
	if leading && !wasLeading {
		octx, cancel := context.WithTimeout(ctx, termOpTimeout)
		stored, err = d.storedIncidents(octx, monitoringJob)
		cancel()
		if err != nil {
			return
		}
	}

	d.mu.Lock()
	d.lastSync = now
	d.leaderID = leaderID
	if leading != d.leader {
		if leading {
			d.opts.Logger.Info("leading the detector", "id", d.opts.ID)
		} else {
			d.opts.Logger.Info("no longer leading", "id", d.opts.ID)
		}
		for _, inc := range d.setLeaderLocked(leading, t.electionKey, t.rev, stored) {
			if alerts != nil {
				alerts.Submit(inc)
			}
		}
	}
	for job, o := range d.owned {
		if w, ok := owners[job]; !ok || w.rev != o.rev {
			d.opts.Logger.Warn("ownership of a job lost", "job", job, "id", d.opts.ID, "owner", w.replica)
			d.m.ownership.WithLabelValues("lost").Inc()
			d.releaseLocked(job)
		}
	}
	d.owners = map[string]string{}
	for job, w := range owners {
		d.owners[job] = w.replica
	}
	jobs := d.knownJobs()
	var claim, release, ended []string
	for job := range jobs {
		if job == monitoringJob {
			continue
		}
		if _, ok := owners[job]; ok {
			delete(t.unowned, job)
			continue
		}
		since, ok := t.unowned[job]
		if !ok {
			since = now
			t.unowned[job] = now
		}
		if preferred(job, replicas) == d.opts.ID || now.Sub(since) >= d.claimAfter() {
			claim = append(claim, job)
		}
	}
	for job, o := range d.owned {
		if !jobs[job] {
			ended = append(ended, job)
			continue
		}
		p := preferred(job, replicas)
		if p != d.opts.ID && p != "" && now.Sub(t.seen[p]) >= d.settleAfter() && len(o.life.Open()) == 0 {
			release = append(release, job)
		}
	}
	for job := range t.unowned {
		if !jobs[job] {
			delete(t.unowned, job)
		}
	}
	etcdUp := d.etcdDown.IsZero()
	d.mu.Unlock()
	d.m.setOwners(owners)
	if leading && !wasLeading {
		d.armOutage(ctx, t)
	}
	if leading && etcdUp {
		d.adoptOutages(ctx, t, live)
	}

	sort.Strings(claim)
	sort.Strings(release)
	for i, job := range claim {
		if i >= maxClaimsPerSync {
			break
		}
		d.claim(ctx, t, job, alerts)
	}
	for i, job := range append(ended, release...) {
		if i >= maxReleasesPerSync {
			break
		}
		d.giveUp(ctx, job)
	}
	d.mu.Lock()
	n := len(d.owned)
	d.mu.Unlock()
	d.m.owned.Set(float64(n))
}

// claimAfter is how long a job may wait for its preferred replica before any replica
// claims it.
func (d *Detector) claimAfter() time.Duration { return 3 * d.opts.Interval }

// settleAfter is how long a new replica must have lived before jobs move to it.
func (d *Detector) settleAfter() time.Duration { return 2 * d.opts.LeaseTTL }

// claim creates a job's owner key under the term's lease if it has none, then takes the
// job over: its stored incidents, and its nodes' snapshots decoded from the inbox.
func (d *Detector) claim(ctx context.Context, t *term, job string, alerts Alerts) {
	key := snapshot.OwnerKey(job)
	octx, cancel := context.WithTimeout(ctx, termOpTimeout)
	defer cancel()
	resp, err := d.opts.Client.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, d.opts.ID, clientv3.WithLease(t.lease))).Commit()
	if err != nil || !resp.Succeeded {
		return // another replica was quicker, or etcd did not answer: next sync
	}
	rev := resp.Header.Revision
	incs, err := d.storedIncidents(octx, job)
	if err != nil {
		// Without its incidents the job could be paged again: give it back, try later.
		d.opts.Logger.Warn("read a job's incidents at takeover; giving the job back", "job", job, "err", err)
		d.deleteOwnerKey(ctx, job, rev)
		return
	}
	now := d.opts.Now()
	d.mu.Lock()
	life := detect.NewLifecycle(d.opts.ResolveAfter)
	life.Restore(incs)
	d.owned[job] = &ownedJob{rev: rev, life: life}
	d.owners[job] = d.opts.ID
	d.mu.Unlock()
	d.adopt(job)
	d.m.ownership.WithLabelValues("claimed").Inc()
	d.opts.Logger.Info("owning a job", "job", job, "id", d.opts.ID, "incidents", len(incs))
	// What the previous owner stored but may not have delivered: the dispatcher sends only
	// what its delivery state says is still due.
	if alerts != nil {
		for _, inc := range incs {
			if due(inc, now) {
				alerts.Submit(inc)
			}
		}
	}
}

// due says whether a stored incident may still need delivering after a takeover: open,
// or resolved within the last hour.
func due(inc incident.Incident, now time.Time) bool {
	return inc.State == incident.StateOpen || (inc.ResolvedAt != nil && now.Sub(*inc.ResolvedAt) < time.Hour)
}

// giveUp stops judging a job and deletes its owner key (fenced: only ours), so that its
// preferred replica claims it.
func (d *Detector) giveUp(ctx context.Context, job string) {
	d.mu.Lock()
	o := d.owned[job]
	if o != nil {
		d.releaseLocked(job)
	}
	d.mu.Unlock()
	if o == nil {
		return
	}
	d.m.ownership.WithLabelValues("released").Inc()
	d.opts.Logger.Info("giving a job up", "job", job, "id", d.opts.ID)
	d.deleteOwnerKey(ctx, job, o.rev)
}

func (d *Detector) deleteOwnerKey(ctx context.Context, job string, rev int64) {
	octx, cancel := context.WithTimeout(ctx, termOpTimeout)
	defer cancel()
	key := snapshot.OwnerKey(job)
	_, _ = d.opts.Client.Txn(octx).If(etcdfence.KeyAt(key, rev)).Then(clientv3.OpDelete(key)).Commit()
}

// releaseLocked forgets a job's ownership and its decoded state (its values stay in the
// inbox; its lost nodes in the state). Call with d.mu held.
func (d *Detector) releaseLocked(job string) {
	delete(d.owned, job)
	delete(d.paused, job)
	d.state.Release(job)
}

// setLeaderLocked makes this replica lead (with its election key and revision, the fence
// of the monitoring job) or not. Taking the lead restores the monitoring job's stored
// incidents (known) and returns those that may still need delivering. Call with d.mu held.
func (d *Detector) setLeaderLocked(leading bool, key string, rev int64, known []incident.Incident) []incident.Incident {
	d.leader = leading
	if !leading {
		d.monitor, d.leaderKey, d.leaderRev = nil, "", 0
		d.m.leader.Set(0)
		return nil
	}
	d.monitor = detect.NewLifecycle(d.opts.ResolveAfter)
	d.monitor.Restore(known)
	d.leaderKey, d.leaderRev = key, rev
	d.m.leader.Set(1)
	now := d.opts.Now()
	var out []incident.Incident
	for _, inc := range known {
		if due(inc, now) {
			out = append(out, inc)
		}
	}
	return out
}

// storedIncidents reads a job's incidents from etcd, with their page records (fence.go):
// an incident whose key is missing, garbled or older than its page record is restored
// from the page record, counted and logged, so that it goes on under its id.
func (d *Detector) storedIncidents(ctx context.Context, job string) ([]incident.Incident, error) {
	resp, err := d.opts.Client.Txn(ctx).Then(
		clientv3.OpGet(snapshot.IncidentKey(job, ""), clientv3.WithPrefix()),
		clientv3.OpGet(snapshot.PageKey(job, ""), clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, err
	}
	byID := map[string]incident.Incident{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		inc, ok, err := d.openIncident(ctx, string(kv.Key), kv.Value)
		if err != nil {
			return nil, err // not judged yet: take over later rather than page it again
		}
		if _, id, _ := snapshot.ParseIncidentKey(string(kv.Key)); ok && inc.ID == id && inc.Job == job {
			byID[inc.ID] = inc
		}
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		page, ok, err := d.openIncident(ctx, string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		_, id, _ := snapshot.ParsePageKey(string(kv.Key))
		if !ok || page.ID != id || page.Job != job {
			continue
		}
		if inc, found := byID[id]; found && inc.Revision >= page.Revision {
			continue
		}
		d.m.restored.Inc()
		d.opts.Logger.Warn("an incident's stored record is missing, garbled or behind what was paged: restored from its sealed page record",
			"job", job, "id", id, "state", page.State, "revision", page.Revision)
		byID[id] = page
	}
	out := make([]incident.Incident, 0, len(byID))
	for _, inc := range byID {
		out = append(out, inc)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}
