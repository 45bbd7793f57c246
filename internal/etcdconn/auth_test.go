package etcdconn_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdexec"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/procstat"
	"github.com/ncclwatch/watchdog/internal/syncbuf"
	"github.com/ncclwatch/watchdog/snapshot"
)

// fastBcrypt is bcrypt.MinCost: password checks at etcd's default cost take seconds on a
// race-instrumented embedded server.
const fastBcrypt = 4

// restartable is an etcd the test can stop and start again on the same port and data.
type restartable struct {
	name      string
	endpoints []string
	stop      func()
	resume    func()
}

func embedded(t *testing.T, addr string) restartable {
	t.Helper()
	srv, err := etcdembed.Start(t.Context(), etcdembed.Options{ClientAddr: addr, Logger: slog.New(slog.DiscardHandler), BcryptCost: fastBcrypt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return restartable{name: "embedded 3.7", endpoints: srv.Endpoints(), stop: srv.Stop, resume: func() {
		if err := srv.Resume(context.Background()); err != nil {
			t.Fatal(err)
		}
	}}
}

func debian34(t *testing.T) restartable {
	t.Helper()
	srv := etcdexec.Start(t, etcdexec.Options{})
	return restartable{name: "etcd " + srv.Version(), endpoints: srv.Endpoints(), stop: srv.Stop, resume: srv.Resume}
}

// withAuth turns auth on with the watchdog's roles and returns the password file of the
// detector's user.
func withAuth(t *testing.T, endpoints []string) string {
	t.Helper()
	admin, err := etcdconn.New(etcdconn.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	plan, err := etcdroles.NewPlan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.Apply(ctx, admin, map[string]string{etcdroles.Detector: "det-pw", etcdroles.Sidecar: "side-pw"}); err != nil {
		t.Fatal(err)
	}
	if err := etcdroles.EnableAuth(ctx, admin, "root-pw"); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("det-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return pw
}

// putWithin retries a write until it works or d passes; it returns the last error.
func putWithin(cli *clientv3.Client, key string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Put(ctx, key, "v")
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAuthSurvivesFullRestart: with password auth, a full restart of etcd invalidates
// every token; the client fetches a new one (without sending the stale one, which etcd
// 3.4 refuses) and writes again within seconds. Against the embedded server and Debian's
// etcd 3.4.
func TestAuthSurvivesFullRestart(t *testing.T) {
	for _, start := range []func(*testing.T) restartable{func(t *testing.T) restartable { return embedded(t, "") }, debian34} {
		srv := start(t)
		t.Run(srv.name, func(t *testing.T) {
			pw := withAuth(t, srv.endpoints)
			cli, err := etcdconn.New(etcdconn.Config{Endpoints: srv.endpoints, Username: etcdroles.Detector, PasswordFile: pw})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			key := snapshot.Prefix + "restart-test"
			if err := putWithin(cli, key, 10*time.Second); err != nil {
				t.Fatalf("first write: %v", err)
			}
			for i := range 2 {
				srv.stop()
				srv.resume()
				start := time.Now()
				if err := putWithin(cli, key, 15*time.Second); err != nil {
					t.Fatalf("restart %d: no write within 15 s: %v", i+1, err)
				}
				t.Logf("restart %d: writing again %.1f s after etcd's return", i+1, time.Since(start).Seconds())
			}
			// The role is what the detector's is: nothing outside the prefix.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := cli.Put(ctx, "/elsewhere", "v"); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("write outside the prefix: %v, want permission denied", err)
			}
		})
	}
}

// TestUnreachableAtStartWithAuth: a client with a user is built while nothing listens
// (no error, no exit), and works once etcd comes up there.
func TestUnreachableAtStartWithAuth(t *testing.T) {
	addr, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("det-pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: []string{"http://" + addr}, Username: etcdroles.Detector, PasswordFile: pw})
	if err != nil {
		t.Fatalf("client with a user while etcd is down: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = cli.Get(ctx, "k")
	cancel()
	if err == nil {
		t.Fatal("a read with nothing listening worked")
	}
	srv := embedded(t, addr)
	withAuth(t, srv.endpoints)
	if err := putWithin(cli, snapshot.Prefix+"late", 15*time.Second); err != nil {
		t.Fatalf("no write after etcd came up: %v", err)
	}
}

// TestWrongPasswordIsNamed: a refused password is logged once, naming the user and the
// file, and the RPC fails with that reason rather than a timeout.
func TestWrongPasswordIsNamed(t *testing.T) {
	srv := embedded(t, "")
	withAuth(t, srv.endpoints)
	pw := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(pw, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: srv.endpoints, Username: etcdroles.Detector, PasswordFile: pw,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = cli.Get(ctx, snapshot.Prefix)
		cancel()
		time.Sleep(1100 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "password in "+pw) {
		t.Errorf("error %v, want one naming the password file", err)
	}
	if n := strings.Count(logs.String(), "etcd authentication failed"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
}
