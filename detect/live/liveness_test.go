package live

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/snapshot"
)

// keepEveryLeaseAlive renews every lease etcd holds through cli, every 200 ms, until ctx
// ends: what a trainer that stole a sidecar's credential can do on etcd 3.4 to keep a dead
// detector replica's keys in place. It counts the renewals etcd granted. Where etcd
// refuses them (3.5+ checks that the user may write the lease's keys), it counts the
// refusals and renews through fallback instead (root: any other holder of the lease id),
// so that the test still shows that liveness does not rest on the lease.
func keepEveryLeaseAlive(ctx context.Context, cli, fallback *clientv3.Client, extra func() []clientv3.LeaseID, granted, refused *atomic.Int64) {
	for ctx.Err() == nil {
		ids := extra()
		if resp, err := cli.Leases(ctx); err == nil {
			for _, l := range resp.Leases {
				ids = append(ids, l.ID)
			}
		}
		for _, id := range ids {
			r, err := cli.KeepAliveOnce(ctx, id)
			if errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
				refused.Add(1)
				r, err = fallback.KeepAliveOnce(ctx, id)
			}
			if err == nil && r.TTL > 0 {
				granted.Add(1)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestLeaseKeptAliveDoesNotStallTakeover: the replica that leads and owns a job with an
// open incident dies while a per-job sidecar credential keeps every lease alive (its own
// job's role: the narrowest a trainer can hold), over TLS with client certificates and
// auth, on the embedded etcd and on Debian's 3.4. The dead replica's lease stays alive all
// along, yet the other replica leads and owns its job within the time a lease expiry
// takes (TTL 2 s, plus the sync interval and a busy machine's slack), continues the
// incident under its id, and pages nothing twice.
func TestLeaseKeptAliveDoesNotStallTakeover(t *testing.T) {
	for _, backend := range etcdtest.Backends {
		t.Run(backend, func(t *testing.T) {
			e := etcdtest.StartSecured(t, backend, "train")
			root := e.Client(t, e.Config("root"))
			c := newClusterOn(t, nil, e.Config(etcdroles.Detector), root, "a")
			c.hang()
			eventually(t, 20*time.Second, "a leads and pages the hang", func() bool {
				return c.replicas["a"].leading() && c.owns("a", "train") && c.rec.count("open") == 1
			})
			c.start("b")
			eventually(t, 10*time.Second, "b sees a own train", func() bool { return c.owner("b", "train") == "a" })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := root.Get(ctx, snapshot.ReplicaKey("a"))
			if err != nil || len(r.Kvs) != 1 {
				t.Fatalf("a's replica key: %v %v", r, err)
			}
			leaseOfA := clientv3.LeaseID(r.Kvs[0].Lease)

			side := e.Client(t, e.Config(etcdroles.Sidecar+"-train"))
			var granted, refused atomic.Int64
			attack, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				// Listing leases is refused on some versions; a lease id is 64 bits anyone
				// who once saw it (etcd 3.4 shows which lease holds which key) knows.
				keepEveryLeaseAlive(attack, side, root, func() []clientv3.LeaseID { return []clientv3.LeaseID{leaseOfA} }, &granted, &refused)
			}()
			defer func() { stop(); <-done }()

			before := granted.Load()
			c.kill("a")
			took := eventually(t, 20*time.Second, "b leads and owns train", func() bool {
				return c.owns("b", "train") && c.replicas["b"].leading()
			})
			t.Logf("%s: takeover %.1f s after a died, while a's lease was renewed %d times (%d renewals refused to the sidecar's credential, done as root instead)",
				backend, took.Seconds(), granted.Load()-before, refused.Load())
			if granted.Load()-before == 0 {
				t.Fatal("no lease renewed: the attack did not happen")
			}
			if backend == "etcd 3.4" && refused.Load() > 0 {
				t.Errorf("etcd 3.4 refused the sidecar's renewals (%d): docs/security.md says it grants them", refused.Load())
			}
			if ttl, err := root.TimeToLive(ctx, leaseOfA); err != nil || ttl.TTL <= 0 {
				t.Fatalf("a's lease expired (%v, %v): the attack did not hold it", ttl, err)
			}
			// A lease expiry takes the TTL (2 s) and a sync (200 ms); 6 s leaves a busy
			// machine's slack, where the attack without heartbeats stalled for as long as it ran.
			if took > 6*time.Second {
				t.Errorf("takeover took %s under the attack, want about a lease TTL (2 s)", took)
			}
			time.Sleep(time.Second)
			if n := c.rec.count("open"); n != 1 {
				t.Errorf("%d pages of the hang, want 1: %v", n, c.rec.events)
			}
			if got := c.storedIncidents("train"); len(got) != 1 {
				t.Errorf("stored incidents of train: %v", got)
			}
		})
	}
}

// TestBadValuesCountedAtTakeover: node values already in etcd when a replica claims their
// job, and that it cannot decode, are counted (and logged), not dropped unseen.
func TestBadValuesCountedAtTakeover(t *testing.T) {
	c := newCluster(t)
	c.heal(10)
	if _, err := c.cli.Put(context.Background(), snapshot.NodeKey("train", "n2"), "\x00garbage"); err != nil {
		t.Fatal(err)
	}
	r := c.start("a")
	eventually(t, 10*time.Second, "a owns train", func() bool { return c.owns("a", "train") })
	if got := testutil.ToFloat64(r.d.m.badSnapshots); got != 1 {
		t.Errorf("bad snapshots counted at takeover: %v, want 1", got)
	}
}
