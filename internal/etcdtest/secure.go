package etcdtest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdexec"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/testpki"
)

// Backends are the etcd servers a secured test runs against: the embedded one (the
// etcd the watchdog is built with) and Debian's 3.4 (etcdexec: skipped where missing,
// unless NCCLWATCH_REQUIRE_ETCD34=1).
var Backends = []string{"embedded", "etcd 3.4"}

// Secured is an etcd as a production one is set up: TLS with client certificates
// required (CN = user), password auth on, the roles of internal/etcdroles applied for
// every job and per job (Jobs). Each user has its own password file and its own client
// certificate; root too.
type Secured struct {
	Endpoints []string
	CAFile    string
	Version   string
	Jobs      []string
	// Stop and Resume stop the whole etcd and start it again on the same data.
	Stop   func()
	Resume func()

	t   testing.TB
	dir string
	ca  *testpki.CA
}

// Users are the etcd users a Secured etcd has: root, the detector, the generic sidecar
// and one per-job sidecar per job.
func (s *Secured) Users() []string {
	us := []string{"root", etcdroles.Detector, etcdroles.Sidecar}
	for _, j := range s.Jobs {
		us = append(us, etcdroles.Sidecar+"-"+j)
	}
	return us
}

// SidecarUsers are the users of every sidecar credential the chart or Slurm units create:
// the generic role and each per-job role.
func (s *Secured) SidecarUsers() []string { return s.Users()[2:] }

// StartSecured starts backend (one of Backends) secured as above, with per-job roles for jobs.
func StartSecured(t testing.TB, backend string, jobs ...string) *Secured {
	t.Helper()
	ca := testpki.NewCA(t, "ncclwatch-test-ca")
	server := ca.Server(t, "etcd", "127.0.0.1", "localhost")
	s := &Secured{t: t, CAFile: ca.CertFile, ca: ca, dir: t.TempDir(), Jobs: jobs}
	switch backend {
	case "embedded":
		srv, err := etcdembed.Start(t.Context(), etcdembed.Options{Logger: slog.New(slog.DiscardHandler), BcryptCost: 4,
			CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: ca.CertFile})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		s.Endpoints, s.Version = srv.Endpoints(), "embedded"
		s.Stop = srv.Stop
		s.Resume = func() {
			if err := srv.Resume(context.Background()); err != nil {
				t.Error(err)
			}
		}
	case "etcd 3.4":
		srv := etcdexec.Start(t, etcdexec.Options{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: ca.CertFile, BcryptCost: 4})
		s.Endpoints, s.Version, s.Stop, s.Resume = srv.Endpoints(), srv.Version(), srv.Stop, srv.Resume
	default:
		t.Fatalf("unknown etcd backend %q", backend)
	}
	pw := map[string]string{}
	for _, u := range s.Users() {
		pw[u] = u + "-secret"
		if err := os.WriteFile(filepath.Join(s.dir, u), []byte(pw[u]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root := s.Client(t, s.Config("root"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, js := range [][]string{nil, jobs} {
		plan, err := etcdroles.NewPlan(js)
		if err != nil {
			t.Fatal(err)
		}
		if err := plan.Apply(ctx, root, pw); err != nil {
			t.Fatal(err)
		}
	}
	if err := etcdroles.EnableAuth(ctx, root, pw["root"]); err != nil {
		t.Fatal(err)
	}
	return s
}

// Config connects as user: its password file and its own client certificate (CN = user).
func (s *Secured) Config(user string) etcdconn.Config {
	c := s.CertOnly(user)
	c.Username, c.PasswordFile = user, filepath.Join(s.dir, user)
	return c
}

// CertOnly connects with user's client certificate and no password: etcd takes the
// certificate's CN as the user.
func (s *Secured) CertOnly(user string) etcdconn.Config {
	p := s.pair(user)
	return etcdconn.Config{Endpoints: s.Endpoints, CAFile: s.CAFile, CertFile: p.CertFile, KeyFile: p.KeyFile}
}

// PasswordFile is user's password file.
func (s *Secured) PasswordFile(user string) string { return filepath.Join(s.dir, user) }

func (s *Secured) pair(user string) testpki.Pair {
	p := testpki.Pair{CertFile: filepath.Join(filepath.Dir(s.CAFile), user+".pem"), KeyFile: filepath.Join(filepath.Dir(s.CAFile), user+"-key.pem")}
	if _, err := os.Stat(p.CertFile); err == nil {
		return p
	}
	return s.ca.Client(s.t, user)
}

// Client is a client of cfg, closed when the test ends.
func (s *Secured) Client(t testing.TB, cfg etcdconn.Config) *clientv3.Client {
	t.Helper()
	cli, err := etcdconn.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
