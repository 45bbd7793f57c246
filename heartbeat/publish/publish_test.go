package publish_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/heartbeat/publish"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdsnap"
	"github.com/ncclwatch/watchdog/internal/procstat"
	"github.com/ncclwatch/watchdog/snapshot"
)

const key = "/ncclwatch/v1/jobs/j/nodes/n0"

// etcdAt starts an embedded etcd keeping its data in dir and serving clients at addr. It
// stops at the end of the test, after the publishers and clients started later (a server
// stopping first waits for their streams).
func etcdAt(t *testing.T, dir, addr string) *etcdembed.Server {
	t.Helper()
	srv, err := etcdembed.Start(t.Context(), etcdembed.Options{Dir: dir, ClientAddr: addr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func client(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := etcdconn.New(etcdconn.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedAddr is a loopback address nothing listens at (until a test starts etcd there).
func closedAddr(t *testing.T) string {
	t.Helper()
	addr, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// running is a publisher whose Run goroutine the test stops.
type running struct {
	pub    *publish.Publisher
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs a publisher of a constant body on cli.
func start(t *testing.T, cli *clientv3.Client, ttl time.Duration, body string) *running {
	t.Helper()
	pub := publish.New(cli, publish.Options{Key: key, TTL: ttl, Interval: 100 * time.Millisecond, OpTimeout: 500 * time.Millisecond,
		MaxBackoff: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{pub: pub, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		pub.Run(ctx, func() ([]byte, error) { return []byte(body), nil })
	}()
	var once sync.Once
	t.Cleanup(func() { once.Do(r.stop) })
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

// get reads the key (nil when absent).
func get(t *testing.T, cli *clientv3.Client) *clientv3.GetResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, key)
	if err != nil {
		return nil
	}
	return r
}

// waitKey waits until cond holds for the key's value and lease (value "" when absent).
func waitKey(t *testing.T, cli *clientv3.Client, limit time.Duration, cond func(value string, lease int64, version int64) bool) (time.Duration, bool) {
	t.Helper()
	began := time.Now()
	for time.Since(began) < limit {
		if r := get(t, cli); r != nil {
			v, l, ver := "", int64(0), int64(0)
			if len(r.Kvs) > 0 {
				v, l, ver = string(r.Kvs[0].Value), r.Kvs[0].Lease, r.Kvs[0].Version
			}
			if cond(v, l, ver) {
				return time.Since(began), true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(began), false
}

// TestPublishesOnceUnderLease: the key is written under a lease of the TTL, and an
// unchanged body is not written again.
func TestPublishesOnceUnderLease(t *testing.T) {
	srv := etcdAt(t, "", "")
	cli := client(t, srv.Endpoints()[0])
	start(t, cli, 3*time.Second, "a")
	if _, ok := waitKey(t, cli, 5*time.Second, func(v string, l, _ int64) bool { return v == "a" && l != 0 }); !ok {
		t.Fatal("key not written under a lease")
	}
	r := get(t, cli)
	ttl, err := cli.TimeToLive(context.Background(), clientv3.LeaseID(r.Kvs[0].Lease))
	if err != nil || ttl.GrantedTTL != 3 {
		t.Errorf("lease granted for %v s (%v), want 3", ttl.GrantedTTL, err)
	}
	time.Sleep(500 * time.Millisecond) // five intervals
	if r := get(t, cli); r == nil || r.Kvs[0].Version != 1 {
		t.Errorf("unchanged body written again: %+v", r)
	}
}

// TestRepublishesAfterLeaseLoss: when the lease is gone (what an expiry during an outage
// does; here revoked from outside), the publisher opens a new session and writes the full
// state again, although it did not change.
func TestRepublishesAfterLeaseLoss(t *testing.T) {
	srv := etcdAt(t, "", "")
	cli := client(t, srv.Endpoints()[0])
	start(t, cli, 3*time.Second, "a")
	var lease int64
	if _, ok := waitKey(t, cli, 5*time.Second, func(v string, l, _ int64) bool { lease = l; return v == "a" }); !ok {
		t.Fatal("key not written")
	}
	other := client(t, srv.Endpoints()[0])
	if _, err := other.Revoke(context.Background(), clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	d, ok := waitKey(t, cli, 5*time.Second, func(v string, l, _ int64) bool { return v == "a" && l != 0 && l != lease })
	if !ok {
		t.Fatal("not republished under a new lease")
	}
	t.Logf("republished %s after the lease was lost", d.Round(10*time.Millisecond))
}

// TestEtcdRestart: etcd down longer than the TTL, then back: the publisher republishes
// under a new lease by itself, within 5 s of its return.
func TestEtcdRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd down 5 s")
	}
	dir, addr := t.TempDir(), closedAddr(t)
	srv := etcdAt(t, dir, addr)
	cli := client(t, "http://"+addr)
	start(t, cli, 2*time.Second, "a")
	var lease, rev int64
	if _, ok := waitKey(t, cli, 5*time.Second, func(v string, l, _ int64) bool { lease = l; return v == "a" }); !ok {
		t.Fatal("key not written")
	}
	rev = get(t, cli).Kvs[0].ModRevision
	srv.Close()
	time.Sleep(5 * time.Second)
	etcdAt(t, dir, addr)
	d, ok := waitKey(t, cli, 5*time.Second, func(v string, l, _ int64) bool { return v == "a" && l != lease })
	if !ok {
		t.Fatal("not republished within 5 s of etcd coming back")
	}
	if r := get(t, cli); r.Kvs[0].ModRevision <= rev {
		t.Errorf("key not rewritten: revision %d, was %d", r.Kvs[0].ModRevision, rev)
	}
	t.Logf("republished %s after etcd came back", d.Round(100*time.Millisecond))
}

// TestNeverBlocksWhileEtcdDown: with no etcd at all, Poke returns at once, Run stops when
// told, and Close gives up within its timeouts.
func TestNeverBlocksWhileEtcdDown(t *testing.T) {
	cli := client(t, "http://"+closedAddr(t))
	r := start(t, cli, 2*time.Second, "a")
	began := time.Now()
	for i := 0; i < 1000; i++ {
		r.pub.Poke()
	}
	if d := time.Since(began); d > 100*time.Millisecond {
		t.Errorf("1000 pokes took %s", d)
	}
	time.Sleep(time.Second)
	if r.pub.Healthy() {
		t.Error("healthy without etcd")
	}
	began = time.Now()
	r.stop()
	if d := time.Since(began); d > time.Second {
		t.Errorf("Run took %s to stop", d)
	}
	began = time.Now()
	r.pub.Close([]byte("final"))
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("Close took %s with etcd down (op timeout 500 ms)", d)
	}
}

// TestCloseWritesFinalAndRevokes: Close writes the final body, then revokes the lease so
// the key goes at once.
func TestCloseWritesFinalAndRevokes(t *testing.T) {
	srv := etcdAt(t, "", "")
	cli := client(t, srv.Endpoints()[0])
	r := start(t, cli, 10*time.Second, "a")
	if _, ok := waitKey(t, cli, 5*time.Second, func(v string, _, _ int64) bool { return v == "a" }); !ok {
		t.Fatal("key not written")
	}
	rev := get(t, cli).Header.Revision
	watcher := client(t, srv.Endpoints()[0])
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	events := watcher.Watch(wctx, key, clientv3.WithRev(rev+1))
	r.stop()
	r.pub.Close([]byte("final"))
	var seen []string
	for resp := range events {
		for _, ev := range resp.Events {
			seen = append(seen, ev.Type.String()+" "+string(ev.Kv.Value))
		}
		if len(seen) >= 2 {
			break
		}
	}
	if len(seen) != 2 || seen[0] != "PUT final" || seen[1] != "DELETE " {
		t.Errorf("after Close the key saw %q, want the final body then its deletion", seen)
	}
}

// TestWireValuesAgainstBase: with a snapshot.Wire, the first write puts a base and the
// value compressed against it in one transaction, later writes only the value, and a lost
// lease (a reconnect) writes a new base; what etcd holds always decodes to the last body.
func TestWireValuesAgainstBase(t *testing.T) {
	srv := etcdAt(t, "", "")
	cli := client(t, srv.Endpoints()[0])
	var mu sync.Mutex
	step := int64(1)
	body := func() ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		return snapshot.Encode(&snapshot.Node{Job: "j", Node: "n0", Started: 1, Seq: uint64(step),
			Processes: []snapshot.Process{{Host: "n0", PID: 7, Rank: 0, Comms: []snapshot.Comm{{ID: "0xabc", Ptr: "0x1", NRanks: 8, Count: step}}}}})
	}
	pub := publish.New(cli, publish.Options{Key: snapshot.NodeKey("j", "n0"), BaseKey: snapshot.BaseKey("j", "n0"), Wire: &snapshot.Wire{},
		TTL: 3 * time.Second, Interval: 100 * time.Millisecond, OpTimeout: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); pub.Run(ctx, body) }()
	defer func() { cancel(); <-done }()
	holds := func(n int64) bool {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		defer rcancel()
		got, err := etcdsnap.ReadNode(rctx, cli, "j", "n0")
		return err == nil && got.Processes[0].Comms[0].Count == n
	}
	baseRev := func() (rev, lease int64) {
		r, err := cli.Get(context.Background(), snapshot.BaseKey("j", "n0"))
		if err != nil || len(r.Kvs) == 0 {
			return 0, 0
		}
		return r.Kvs[0].ModRevision, r.Kvs[0].Lease
	}
	if _, ok := waitKey(t, cli, 5*time.Second, func(string, int64, int64) bool { return holds(1) }); !ok {
		t.Fatal("first snapshot not readable")
	}
	rev0, lease0 := baseRev()
	if rev0 == 0 || lease0 == 0 {
		t.Fatal("no base under a lease")
	}
	for n := int64(2); n <= 4; n++ {
		mu.Lock()
		step = n
		mu.Unlock()
		if _, ok := waitKey(t, cli, 5*time.Second, func(string, int64, int64) bool { return holds(n) }); !ok {
			t.Fatalf("snapshot %d not readable", n)
		}
	}
	if rev, _ := baseRev(); rev != rev0 {
		t.Error("the base was rewritten for small changes")
	}
	writes, bytes := pub.Stats()
	t.Logf("%d writes, %d bytes", writes, bytes)
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(lease0)); err != nil {
		t.Fatal(err)
	}
	if _, ok := waitKey(t, cli, 5*time.Second, func(string, int64, int64) bool {
		rev, lease := baseRev()
		return rev > rev0 && lease != lease0 && holds(4)
	}); !ok {
		t.Fatal("no new base after the lease was lost")
	}
}
