package etcdroles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/heartbeat/publish"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdexec"
	"github.com/ncclwatch/watchdog/internal/syncbuf"
	"github.com/ncclwatch/watchdog/snapshot"
)

// client logs in as user, whose password is in dir/user.
func client(t *testing.T, endpoints []string, dir, user string) *clientv3.Client {
	t.Helper()
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: endpoints, Username: user, PasswordFile: filepath.Join(dir, user)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// can says whether op is permitted; any failure but "permission denied" fails the test.
func can(t *testing.T, what string, op func(ctx context.Context) error) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := op(ctx)
	if err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
		t.Fatalf("%s: %v", what, err)
	}
	return err == nil
}

// checkMatrix: the detector may do everything the watchdog needs under its prefix; a
// sidecar only writes node keys (of its job, for a per-job role) and reads nothing.
func checkMatrix(t *testing.T, endpoints []string, dir, sidecar, job string) {
	det := client(t, endpoints, dir, Detector)
	side := client(t, endpoints, dir, sidecar)
	put := func(c *clientv3.Client, key string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := c.Put(ctx, key, "v"); return err }
	}
	get := func(c *clientv3.Client, key string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := c.Get(ctx, key, clientv3.WithPrefix()); return err }
	}
	leasedPut := func(c *clientv3.Client, key string) func(context.Context) error {
		return func(ctx context.Context) error {
			g, err := c.Grant(ctx, 10)
			if err != nil {
				return err
			}
			if _, err := c.Put(ctx, key, "v", clientv3.WithLease(g.ID)); err != nil {
				return err
			}
			_, err = c.Revoke(ctx, g.ID)
			return err
		}
	}
	// The sidecar's real publisher: its node key and, in the same transaction, the base its
	// values are compressed against (snapshot/wire.go).
	publishes := func(c *clientv3.Client, job string) func(context.Context) error {
		return func(ctx context.Context) error {
			var logs syncbuf.Buffer
			p := publish.New(c, publish.Options{Key: snapshot.NodeKey(job, "n2"), Wire: &snapshot.Wire{},
				BaseKey: snapshot.BaseKey(job, "n2"), Interval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = p.Run(rctx, func() ([]byte, error) { return []byte(`{"job":"` + job + `","node":"n2"}`), nil })
			}()
			defer func() { stop(); <-done; p.Close(nil) }()
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if writes, _ := p.Stats(); writes > 0 {
					return nil
				}
				if strings.Contains(logs.String(), "permission denied") {
					return rpctypes.ErrPermissionDenied
				}
			}
			return fmt.Errorf("neither published nor denied within 5 s: %s", logs.String())
		}
	}
	for _, c := range []struct {
		what string
		op   func(context.Context) error
		want bool
	}{
		{"sidecar publishes its node key and its base", publishes(side, job), true},
		{"sidecar publishes under another job", publishes(side, "other"), sidecar == Sidecar},
		{"detector reads every job", get(det, snapshot.JobsPrefix), true},
		{"detector writes an incident", put(det, snapshot.IncidentKey(job, "inc-1")), true},
		{"detector writes delivery state", put(det, snapshot.DeliveryKey("slack", "inc-1")), true},
		{"detector writes the election", put(det, snapshot.LeaderKey+"/x"), true},
		{"detector writes outside the prefix", put(det, "/other/x"), false},
		{"sidecar writes its node key under a lease", leasedPut(side, snapshot.NodeKey(job, "n1")), true},
		{"sidecar reads node keys", get(side, snapshot.JobsPrefix), false},
		{"sidecar reads the detector's prefix", get(side, snapshot.Prefix+"detector/"), false},
		{"sidecar writes delivery state", put(side, snapshot.DeliveryKey("slack", "inc-1")), false},
		{"sidecar writes the election", put(side, snapshot.LeaderKey+"/x"), false},
		{"sidecar writes another job's node key", put(side, snapshot.NodeKey("other", "n1")), sidecar == Sidecar},
		{"sidecar writes an incident", put(side, snapshot.IncidentKey(job, "inc-2")), false},
		{"sidecar writes a page record", put(side, snapshot.PageKey(job, "inc-2")), false},
		{"sidecar writes an owner key", put(side, snapshot.OwnerKey(job)), false},
		{"sidecar writes a replica heartbeat", put(side, snapshot.ReplicaKey("r")), false},
	} {
		if got := can(t, c.what, c.op); got != c.want {
			t.Errorf("%s: permitted %t, want %t", c.what, got, c.want)
		}
	}
}

func passwordDir(t *testing.T, users ...string) (string, map[string]string) {
	dir := t.TempDir()
	pw := map[string]string{}
	for _, u := range users {
		pw[u] = u + "-secret"
		if err := os.WriteFile(filepath.Join(dir, u), []byte(pw[u]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, pw
}

// TestApplyEnforced: the roles applied through the client, with auth on, permit exactly
// what each component needs, on the embedded server and on etcd 3.4; for every job and per job.
func TestApplyEnforced(t *testing.T) {
	servers := map[string]func(t *testing.T) []string{
		"embedded": func(t *testing.T) []string {
			srv, err := etcdembed.Start(t.Context(), etcdembed.Options{Logger: slog.New(slog.DiscardHandler), BcryptCost: 4 /* bcrypt.MinCost: fast under -race */})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			return srv.Endpoints()
		},
		"etcd 3.4": func(t *testing.T) []string { return etcdexec.Start(t, etcdexec.Options{}).Endpoints() },
	}
	for name, start := range servers {
		for _, jobs := range [][]string{nil, {"llama"}} {
			t.Run(name+" jobs "+strings.Join(jobs, ","), func(t *testing.T) {
				endpoints := start(t)
				plan, err := NewPlan(jobs)
				if err != nil {
					t.Fatal(err)
				}
				sidecar := plan.Roles[1].Name
				dir, pw := passwordDir(t, Detector, sidecar, "root")
				admin, err := etcdconn.New(etcdconn.Config{Endpoints: endpoints})
				if err != nil {
					t.Fatal(err)
				}
				defer admin.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for range 2 { // idempotent
					if err := plan.Apply(ctx, admin, pw); err != nil {
						t.Fatal(err)
					}
				}
				if err := EnableAuth(ctx, admin, pw["root"]); err != nil {
					t.Fatal(err)
				}
				checkMatrix(t, endpoints, dir, sidecar, "llama")
			})
		}
	}
}

// TestScriptWithEtcdctl: the printed script, run by etcdctl 3.4 against etcd 3.4, sets up
// the same roles.
func TestScriptWithEtcdctl(t *testing.T) {
	etcdctl, err := exec.LookPath("etcdctl")
	if err != nil {
		if os.Getenv("NCCLWATCH_REQUIRE_ETCD34") == "1" {
			t.Fatal("no etcdctl: make test installs Debian's etcd-client")
		}
		t.Skip("no etcdctl (Debian's etcd-client; make test installs it)")
	}
	srv := etcdexec.Start(t, etcdexec.Options{})
	plan, err := NewPlan(nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := passwordDir(t, Detector, Sidecar, "root")
	script := plan.Script(dir) + "\netcdctl user add root --interactive=false < \"$pwdir/root\"\netcdctl user grant-role root root\netcdctl auth enable\n"
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3", "ETCDCTL_ENDPOINTS="+srv.Endpoints()[0], "PATH="+filepath.Dir(etcdctl)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	checkMatrix(t, srv.Endpoints(), dir, Sidecar, "llama")
}

func TestNewPlanRefusesOddJobNames(t *testing.T) {
	for _, j := range []string{"", "a/b", "../x", "a b", strings.Repeat("x", 200)} {
		if _, err := NewPlan([]string{j}); err == nil {
			t.Errorf("job %q accepted", j)
		}
	}
}

// TestJobPlan: a job's role alone is created (its password set anew when the user exists,
// as a prolog or hook gives it each time), permits its sidecar, and is removed with its
// user when the job ends; the detector's role is never part of it.
func TestJobPlan(t *testing.T) {
	srv, err := etcdembed.Start(t.Context(), etcdembed.Options{Logger: slog.New(slog.DiscardHandler), BcryptCost: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	plan, err := JobPlan([]string{"llama"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Roles) != 1 || plan.Roles[0].Name != JobUser("llama") || !plan.SetPasswords {
		t.Fatalf("job plan %+v", plan)
	}
	if err := (Plan{Roles: []Role{{Name: Detector}}}).Remove(t.Context(), nil); err == nil {
		t.Error("the detector's role would be removed")
	}
	admin, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := []byte(strings.Repeat("k", 32))
	for _, pw := range []string{"first", JobPassword(key, "llama")} {
		if err := plan.Apply(ctx, admin, map[string]string{JobUser("llama"): pw}); err != nil {
			t.Fatal(err)
		}
	}
	if JobPassword(key, "llama") == JobPassword(key, "llamb") || JobPassword(key, "llama") == JobPassword([]byte(strings.Repeat("j", 32)), "llama") {
		t.Error("job passwords do not depend on the job and the key")
	}
	dir, pw := passwordDir(t, "root")
	if err := os.WriteFile(filepath.Join(dir, JobUser("llama")), []byte(JobPassword(key, "llama")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := EnableAuth(ctx, admin, pw["root"]); err != nil {
		t.Fatal(err)
	}
	side := client(t, srv.Endpoints(), dir, JobUser("llama"))
	if _, err := side.Put(ctx, snapshot.NodeKey("llama", "n1"), "{}"); err != nil {
		t.Fatalf("the job's sidecar with the derived password: %v", err)
	}
	root := client(t, srv.Endpoints(), dir, "root")
	for range 2 { // idempotent
		if err := plan.Remove(ctx, root); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := root.RoleGet(ctx, JobUser("llama")); !errors.Is(rpctypes.Error(err), rpctypes.ErrRoleNotFound) {
		t.Errorf("the role after removal: %v", err)
	}
	if _, err := side.Auth.Authenticate(ctx, JobUser("llama"), JobPassword(key, "llama")); err == nil {
		t.Error("the removed user still logs in")
	}
}
