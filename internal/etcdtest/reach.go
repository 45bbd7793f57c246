package etcdtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/incidentkey"
	"github.com/ncclwatch/watchdog/snapshot"
)

// DetectorKeys writes, as the detector, one key of each kind the detectors decide with
// for job (an incident and its page record, delivery state, the incident key, an owner,
// a replica heartbeat, the election, an outage record) and returns them, for
// RefusesDetectorKeys to attack.
func (s *Secured) DetectorKeys(t testing.TB, job string) []string {
	t.Helper()
	det := s.Client(t, s.Config(etcdroles.Detector))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := []string{snapshot.IncidentKey(job, "inc-1"), snapshot.PageKey(job, "inc-1"),
		snapshot.DeliveryKey("pagerduty", "inc-1"), incidentkey.EtcdKey, snapshot.OwnerKey(job),
		snapshot.ReplicaKey("replica-a"), snapshot.LeaderKey + "/694d9b0c1e2f3a4b", snapshot.OutageKey("694d9b0c1e2f3a4b")}
	for _, k := range keys {
		if _, err := det.Put(ctx, k, "detector"); err != nil {
			t.Fatalf("the detector writes %s: %v", k, err)
		}
	}
	return keys
}

// Reach is what a credential is expected to be allowed.
type Reach struct {
	// Publishes: it may write job's node key and base in one transaction under a lease,
	// as a sidecar's publisher does.
	Publishes bool
	// AnyJob: it may write node keys of every job (the generic sidecar role), so deleting
	// everything under the jobs prefix is not asked of it.
	AnyJob bool
}

// RefusesDetectorKeys checks that the credential cfg (named who) is refused reading,
// writing, deleting and writing under a lease every key of keys, and deleting everything
// under the detectors' prefix, the watchdog's and (unless want.AnyJob) the jobs'; and that
// it may publish job's node key exactly when want.Publishes. The keys keep the detector's
// values.
func (s *Secured) RefusesDetectorKeys(t testing.TB, who string, cfg etcdconn.Config, job string, keys []string, want Reach) {
	t.Helper()
	side := s.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	denied := func(err error) bool { return errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) }
	var lease clientv3.LeaseID
	if g, err := side.Grant(ctx, 30); err == nil {
		lease = g.ID
	} else if want.Publishes {
		t.Errorf("%s takes a lease: %v", who, err)
	}
	_, err := side.Txn(ctx).Then(clientv3.OpPut(snapshot.BaseKey(job, "n1"), "{}", clientv3.WithLease(lease)),
		clientv3.OpPut(snapshot.NodeKey(job, "n1"), "{}", clientv3.WithLease(lease))).Commit()
	switch {
	case want.Publishes && err != nil:
		t.Errorf("%s publishes its node key and base of job %s: %v", who, job, err)
	case !want.Publishes && err == nil:
		t.Errorf("%s publishes node keys of job %s", who, job)
	}
	for _, k := range keys {
		for op, do := range map[string]func() error{
			"read":   func() error { _, err := side.Get(ctx, k); return err },
			"write":  func() error { _, err := side.Put(ctx, k, "sidecar"); return err },
			"delete": func() error { _, err := side.Delete(ctx, k); return err },
			"write under a lease": func() error {
				_, err := side.Put(ctx, k, "sidecar", clientv3.WithLease(lease))
				return err
			},
		} {
			if err := do(); !denied(err) {
				t.Errorf("%s may %s %s: %v, want permission denied", who, op, k, err)
			}
		}
	}
	prefixes := []string{snapshot.DetectorPrefix, snapshot.Prefix}
	if !want.AnyJob {
		prefixes = append(prefixes, snapshot.JobsPrefix)
	}
	for _, p := range prefixes {
		if _, err := side.Delete(ctx, p, clientv3.WithPrefix()); !denied(err) {
			t.Errorf("%s may delete every key under %s: %v", who, p, err)
		}
	}
	det := s.Client(t, s.Config(etcdroles.Detector))
	for _, k := range keys {
		r, err := det.Get(ctx, k)
		if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "detector" {
			t.Errorf("%s after %s's attempts: %v %v", k, who, r, err)
		}
	}
}
