package etcdconn_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/internal/syncbuf"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestOneIdentityPerPart: over TLS with client certificates required and auth on, on the
// embedded etcd and Debian's 3.4, each part says at start which identity etcd accepted;
// a refused password sends nothing (etcd would take the requests as the certificate's
// CN), and a certificate whose CN is another user is named as a problem.
func TestOneIdentityPerPart(t *testing.T) {
	for _, backend := range etcdtest.Backends {
		t.Run(backend, func(t *testing.T) {
			e := etcdtest.StartSecured(t, backend)
			root := e.Client(t, e.Config("root"))
			wrong := filepath.Join(t.TempDir(), "wrong")
			if err := os.WriteFile(wrong, []byte("nope\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			withWrongPassword := e.Config(etcdroles.Sidecar)
			withWrongPassword.PasswordFile = wrong
			detectorCert := e.CertOnly(etcdroles.Detector)
			sidecarWithDetectorCert := e.Config(etcdroles.Sidecar)
			sidecarWithDetectorCert.CertFile, sidecarWithDetectorCert.KeyFile = detectorCert.CertFile, detectorCert.KeyFile
			// A Slurm node's certificate beside a per-job password: its CN names no etcd user.
			nodeCert := e.CertOnly("ncclwatch-node")
			sidecarWithNodeCert := e.Config(etcdroles.Sidecar)
			sidecarWithNodeCert.CertFile, sidecarWithNodeCert.KeyFile = nodeCert.CertFile, nodeCert.KeyFile
			for _, c := range []struct {
				name    string
				cfg     etcdconn.Config
				says    string
				problem bool
				writes  bool
			}{
				{"password and its own certificate", e.Config(etcdroles.Sidecar), "authenticated as ncclwatch-sidecar by the password", false, true},
				{"its own certificate alone", e.CertOnly(etcdroles.Sidecar), "authenticated as ncclwatch-sidecar by the client certificate CN", false, true},
				{"a refused password", withWrongPassword, "was refused: nothing is sent to etcd (without a token etcd would take the requests as ncclwatch-sidecar", true, false},
				{"a certificate that reaches nothing alone", sidecarWithNodeCert, "writes no watchdog key alone", false, true},
				{"another part's certificate", sidecarWithDetectorCert, "an etcd identity of its own for any request without a token (it may write /ncclwatch/v1/jobs/_identity-probe/nodes/node, /ncclwatch/v1/detector/identity-probe): give this part a certificate whose CN is ncclwatch-sidecar", true, true},
			} {
				t.Run(c.name, func(t *testing.T) {
					var logs syncbuf.Buffer
					cfg := c.cfg
					cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
					cli := e.Client(t, cfg)
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					id, err := etcdconn.WhoAmI(ctx, cli, c.cfg)
					if err != nil {
						t.Fatal(err)
					}
					if !strings.Contains(id.String(), c.says) || (id.Problem != "") != c.problem {
						t.Errorf("identity %q (problem %q), want it to say %q", id, id.Problem, c.says)
					}
					for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "etcd identity"); time.Sleep(50 * time.Millisecond) {
						if time.Now().After(deadline) {
							t.Fatalf("no identity line logged: %s", logs.String())
						}
					}
					if !strings.Contains(logs.String(), c.says) {
						t.Errorf("the identity line does not say %q: %s", c.says, logs.String())
					}
					key := snapshot.NodeKey("train", strings.ReplaceAll(c.name, " ", "-"))
					_, err = cli.Put(ctx, key, "{}")
					if (err == nil) != c.writes {
						t.Errorf("write of its node key: %v, want written %t", err, c.writes)
					}
					r, err := root.Get(ctx, key)
					if err != nil || (len(r.Kvs) == 1) != c.writes {
						t.Errorf("the node key in etcd: %v %v, want written %t", r.Kvs, err, c.writes)
					}
				})
			}
		})
	}
}
