package etcdroles_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/internal/incidentkey"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestNoSidecarCredentialReachesTheDetectors: with TLS and client certificates required
// and auth on, every credential a sidecar is given (the generic role and a per-job one, by
// password with its own certificate, or by its certificate alone, whose CN etcd takes as
// the user) is refused every key the detectors decide with: incidents, their page
// records, delivery state, the incident key, owners, replica heartbeats, the election and
// the outage records; it may publish its node key and its base, as the publisher does.
// On the embedded etcd and on Debian's 3.4.
func TestNoSidecarCredentialReachesTheDetectors(t *testing.T) {
	for _, backend := range etcdtest.Backends {
		t.Run(backend, func(t *testing.T) {
			const job = "llama"
			e := etcdtest.StartSecured(t, backend, job)
			det := e.Client(t, e.Config(etcdroles.Detector))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// What the detectors have written, for the sidecars to try deleting.
			detectorKeys := []string{snapshot.IncidentKey(job, "inc-1"), snapshot.PageKey(job, "inc-1"),
				snapshot.DeliveryKey("pagerduty", "inc-1"), incidentkey.EtcdKey, snapshot.OwnerKey(job),
				snapshot.ReplicaKey("replica-a"), snapshot.LeaderKey + "/694d9b0c1e2f3a4b", snapshot.OutageKey("694d9b0c1e2f3a4b")}
			for _, k := range detectorKeys {
				if _, err := det.Put(ctx, k, "detector"); err != nil {
					t.Fatalf("the detector writes %s: %v", k, err)
				}
			}
			for _, user := range e.SidecarUsers() {
				for _, how := range []string{"password", "certificate only"} {
					c := e.Config(user)
					if how == "certificate only" {
						c = e.CertOnly(user)
					}
					side := e.Client(t, c)
					g, err := side.Grant(ctx, 30)
					if err != nil {
						t.Fatalf("%s (%s) takes a lease: %v", user, how, err)
					}
					if _, err := side.Txn(ctx).Then(clientv3.OpPut(snapshot.BaseKey(job, "n1"), "{}", clientv3.WithLease(g.ID)),
						clientv3.OpPut(snapshot.NodeKey(job, "n1"), "{}", clientv3.WithLease(g.ID))).Commit(); err != nil {
						t.Errorf("%s (%s) publishes its node key and base: %v", user, how, err)
					}
					for _, k := range detectorKeys {
						for op, do := range map[string]func() error{
							"read":   func() error { _, err := side.Get(ctx, k); return err },
							"write":  func() error { _, err := side.Put(ctx, k, "sidecar"); return err },
							"delete": func() error { _, err := side.Delete(ctx, k); return err },
							"write under a lease": func() error {
								_, err := side.Put(ctx, k, "sidecar", clientv3.WithLease(g.ID))
								return err
							},
						} {
							if err := do(); !errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
								t.Errorf("%s (%s) may %s %s: %v, want permission denied", user, how, op, k, err)
							}
						}
					}
					prefixes := []string{snapshot.DetectorPrefix, snapshot.Prefix}
					if user != etcdroles.Sidecar { // the generic role writes every job's node keys (docs/security.md)
						prefixes = append(prefixes, snapshot.JobsPrefix)
					}
					for _, p := range prefixes {
						if _, err := side.Delete(ctx, p, clientv3.WithPrefix()); !errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
							t.Errorf("%s (%s) may delete every key under %s: %v", user, how, p, err)
						}
					}
				}
			}
			for _, k := range detectorKeys {
				r, err := det.Get(ctx, k)
				if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "detector" {
					t.Errorf("%s after the sidecars' attempts: %v %v", k, r, err)
				}
			}
		})
	}
}
