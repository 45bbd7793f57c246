package live

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdfence"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The etcd outage incident belongs to the detectors, not to the memory of the replica
// that reported it. An outage is reported in-band (alert.Outage), without etcd, by the
// replica that led when etcd went; nothing can be written to etcd then. So the record is
// written before: each replica, when it takes the lead, stores an outage record
// (OutageKey, no lease: it outlives its writer) naming the incident id it will page an
// outage under (OutageID). After an outage, whoever leads reads the records: one whose
// replica is gone (its heartbeat removed, liveness.go) belongs to a reporter that may
// have paged and died before it could resolve; the leader resolves that incident in-band
// (OrphanedOutages, which alert.Outage polls) when it saw etcd unreachable itself since
// the record was written, and removes the record. A record of a replica that is alive is
// its own to resolve.

// outageRecord is what OutageKey holds.
type outageRecord struct {
	Replica  string    `json:"replica"`
	Incident string    `json:"incident"`
	ArmedAt  time.Time `json:"armed_at"`
}

// maxOrphanedOutages bounds the resolves waiting for the in-band notifier.
const maxOrphanedOutages = 64

// OutageID is the incident id this replica pages an etcd outage under: the one its
// outage record in etcd names ("" before it first led).
func (d *Detector) OutageID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outageID
}

// OrphanedOutages returns, once each, the outage incidents of replicas that died before
// resolving them, resolved: for the in-band notifier to deliver (alert.OutageOptions).
func (d *Detector) OrphanedOutages() []incident.Incident {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.orphanedOutages
	d.orphanedOutages = nil
	return out
}

// armOutage stores the outage record of the term that just took the lead, fenced on its
// election key.
func (d *Detector) armOutage(ctx context.Context, t *term) {
	leaseHex := fmt.Sprintf("%x", int64(t.lease))
	rec := outageRecord{Replica: d.opts.ID, Incident: "etcd-outage-" + leaseHex, ArmedAt: d.opts.Now().UTC()}
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	octx, cancel := context.WithTimeout(ctx, termOpTimeout)
	defer cancel()
	resp, err := d.opts.Client.Txn(octx).If(etcdfence.KeyAt(t.electionKey, t.rev)).
		Then(clientv3.OpPut(snapshot.OutageKey(leaseHex), string(b))).Commit()
	if err != nil || !resp.Succeeded {
		d.opts.Logger.Warn("store the outage record; an outage this replica reports would be resolved only by itself", "err", err)
		return
	}
	d.mu.Lock()
	d.outageID = rec.Incident
	d.mu.Unlock()
}

// adoptOutages, run by the leader while etcd answers, hands the outage incidents of gone
// replicas to the in-band notifier and removes their records. live are the leases of
// the live replicas; the term's own record stays.
func (d *Detector) adoptOutages(ctx context.Context, t *term, live map[int64]bool) {
	octx, cancel := context.WithTimeout(ctx, termOpTimeout)
	defer cancel()
	resp, err := d.opts.Client.Get(octx, snapshot.OutagePrefix, clientv3.WithPrefix(), clientv3.WithLimit(maxOrphanedOutages))
	if err != nil {
		return
	}
	d.mu.Lock()
	seen := d.outageSeen
	d.mu.Unlock()
	now := d.opts.Now()
	for _, kv := range resp.Kvs {
		term := string(kv.Key[len(snapshot.OutagePrefix):])
		var lease int64
		if _, err := fmt.Sscanf(term, "%x", &lease); err == nil && live[lease] {
			continue // its replica is alive: its own to resolve
		}
		var rec outageRecord
		// A record of this replica's earlier term: its own in-band notifier, alive, resolves it.
		if err := json.Unmarshal(kv.Value, &rec); err == nil && rec.Incident != "" && rec.Replica != d.opts.ID && !seen.IsZero() && seen.After(rec.ArmedAt) {
			at := now
			inc := incident.Incident{ID: rec.Incident, Key: incident.KeyEtcdUnreachable, Kind: incident.KindMonitoring,
				State: incident.StateResolved, Severity: incident.SeverityCritical, Job: monitoringJob, Culprits: []incident.Culprit{},
				Summary: fmt.Sprintf("the detector reaches etcd again; replica %s, which led when etcd was lost, is gone: replica %s resolves its report",
					rec.Replica, d.opts.ID),
				Evidence: []string{fmt.Sprintf("replica %s saw etcd unreachable from %s", d.opts.ID, seen.UTC().Format(time.RFC3339))},
				OpenedAt: seen, FaultAt: seen, LastSeen: at, ResolvedAt: &at, Revision: 2}
			d.mu.Lock()
			if len(d.orphanedOutages) < maxOrphanedOutages {
				d.orphanedOutages = append(d.orphanedOutages, inc)
			}
			d.mu.Unlock()
			d.opts.Logger.Warn("resolving the etcd outage incident of a replica that died before it could", "incident", rec.Incident, "replica", rec.Replica)
		}
		if _, err := d.opts.Client.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).Commit(); err != nil {
			return
		}
	}
}
