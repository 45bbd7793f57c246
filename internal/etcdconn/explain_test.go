package etcdconn_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdexec"
	"github.com/ncclwatch/watchdog/internal/procstat"
	"github.com/ncclwatch/watchdog/internal/syncbuf"
	"github.com/ncclwatch/watchdog/internal/testpki"
)

// tlsEtcd starts an embedded etcd serving TLS with server (for 127.0.0.1 unless the
// certificate says otherwise); clientCA, when set, requires client certificates it signed.
// It returns the host:port of the client listener.
func tlsEtcd(t *testing.T, server testpki.Pair, clientCA string) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	addr, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cu, pu := url.URL{Scheme: "https", Host: addr}, url.URL{Scheme: "http", Host: peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile,
		TrustedCAFile: clientCA, ClientCertAuth: clientCA != ""}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("embedded TLS etcd not ready")
	}
	return addr
}

// TestExplainNamesTheTLSFailure: each misconfiguration an operator makes is named with
// the file and the check, where the client only says "context deadline exceeded".
func TestExplainNamesTheTLSFailure(t *testing.T) {
	ca, other := testpki.NewCA(t, "etcd-ca"), testpki.NewCA(t, "other-ca")
	client := ca.Client(t, "ncclwatch")
	plain := tlsEtcd(t, ca.Server(t, "etcd", "127.0.0.1", "localhost"), "")
	mtls := tlsEtcd(t, ca.Server(t, "etcd-mtls", "127.0.0.1", "localhost"), ca.CertFile)
	misnamed := tlsEtcd(t, ca.Server(t, "etcd-misnamed", "etcd.example.com"), "")
	nothing, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	strangerClient := other.Client(t, "stranger")
	cases := []struct {
		name string
		cfg  etcdconn.Config
		want []string // "" : no problem
	}{
		{"works", etcdconn.Config{Endpoints: []string{"https://" + plain}, CAFile: ca.CertFile}, nil},
		{"mutual TLS works", etcdconn.Config{Endpoints: []string{"https://" + mtls}, CAFile: ca.CertFile,
			CertFile: client.CertFile, KeyFile: client.KeyFile}, nil},
		{"unknown CA", etcdconn.Config{Endpoints: []string{"https://" + plain}, CAFile: other.CertFile},
			[]string{"unknown CA", "etcd-ca", "--etcd-ca-file " + other.CertFile}},
		{"no CA file", etcdconn.Config{Endpoints: []string{"https://" + plain}},
			[]string{"unknown CA", "the system's CAs (no --etcd-ca-file)"}},
		{"wrong server name", etcdconn.Config{Endpoints: []string{"https://" + misnamed}, CAFile: ca.CertFile},
			[]string{"wrong server name", "etcd.example.com", `not "127.0.0.1"`}},
		{"missing client certificate", etcdconn.Config{Endpoints: []string{"https://" + mtls}, CAFile: ca.CertFile},
			[]string{"missing client certificate", "--etcd-cert-file"}},
		{"client certificate of another CA", etcdconn.Config{Endpoints: []string{"https://" + mtls}, CAFile: ca.CertFile,
			CertFile: strangerClient.CertFile, KeyFile: strangerClient.KeyFile},
			[]string{"refused the client certificate " + strangerClient.CertFile}},
		{"http to a TLS port", etcdconn.Config{Endpoints: []string{"http://" + plain}},
			[]string{"http://" + plain, "speaks TLS", "use https://"}},
		{"nothing listens", etcdconn.Config{Endpoints: []string{"http://" + nothing}},
			[]string{"cannot connect", "nothing listens there"}},
		{"CA file missing", etcdconn.Config{Endpoints: []string{"https://" + plain}, CAFile: "/nonexistent/ca.pem"},
			[]string{"CA file /nonexistent/ca.pem: no such file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := etcdconn.Explain(context.Background(), c.cfg)
			if c.want == nil {
				if err != nil {
					t.Fatalf("want no problem, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no problem found, want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nwant it to say %q", err, w)
				}
			}
		})
	}
}

// TestMonitorLogsTheCause: a client given a logger says once why it cannot connect.
func TestMonitorLogsTheCause(t *testing.T) {
	ca, other := testpki.NewCA(t, "etcd-ca"), testpki.NewCA(t, "other-ca")
	addr := tlsEtcd(t, ca.Server(t, "etcd", "127.0.0.1"), "")
	var logs syncbuf.Buffer
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: []string{"https://" + addr}, CAFile: other.CertFile,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(logs.String(), "unknown CA") {
		if time.Now().After(deadline) {
			t.Fatalf("no cause logged:\n%s", logs.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, _ = cli.Get(ctx, "k")
		cancel()
	}
	if n := strings.Count(logs.String(), "etcd connection fails"); n != 1 {
		t.Errorf("logged %d times:\n%s", n, logs.String())
	}
}

// TestExplainAgainstEtcd34: the same names for the failures of a real etcd 3.4 server with
// TLS and client certificates (its TLS stack is Go 1.19's, its HTTP/2 serving its own).
func TestExplainAgainstEtcd34(t *testing.T) {
	ca, other := testpki.NewCA(t, "etcd-ca"), testpki.NewCA(t, "other-ca")
	server, client := ca.Server(t, "etcd", "127.0.0.1", "localhost"), ca.Client(t, "ncclwatch")
	srv := etcdexec.Start(t, etcdexec.Options{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: ca.CertFile})
	ep := srv.Endpoints()[0]
	plain := "http://" + strings.TrimPrefix(ep, "https://")
	for _, c := range []struct {
		name string
		cfg  etcdconn.Config
		want string
	}{
		{"works", etcdconn.Config{Endpoints: []string{ep}, CAFile: ca.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile}, ""},
		{"unknown CA", etcdconn.Config{Endpoints: []string{ep}, CAFile: other.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile}, "unknown CA"},
		{"missing client certificate", etcdconn.Config{Endpoints: []string{ep}, CAFile: ca.CertFile}, "missing client certificate"},
		{"http to a TLS port", etcdconn.Config{Endpoints: []string{plain}}, "speaks TLS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := etcdconn.Explain(context.Background(), c.cfg)
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%v, want %q", err, c.want)
			}
		})
	}
	// And the client itself works over it, with a user on top of the certificate.
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: []string{ep}, CAFile: ca.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := putWithin(cli, "/ncclwatch/v1/tls", 10*time.Second); err != nil {
		t.Errorf("write over TLS to etcd %s: %v", srv.Version(), err)
	}
}
