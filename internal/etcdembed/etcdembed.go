// Package etcdembed runs a real single-node etcd inside the process: the no-config default
// of `watchdog detector` and `watchdog demo`, and the etcd of every integration test.
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options configure the embedded server.
type Options struct {
	// Dir is the data directory; empty means a fresh temporary directory removed on Close.
	Dir string
	// ClientAddr is host:port for clients; port 0 picks a free port.
	ClientAddr string
	// PeerAddr is host:port for the (unused) peer listener; port 0 picks a free port.
	PeerAddr string
	// StartTimeout bounds how long Start waits for the server to be ready (default 30 s).
	StartTimeout time.Duration
	// Logger receives the server's lifecycle messages; etcd's own logs go to its zap logger
	// at error level.
	Logger *slog.Logger
	// BcryptCost is the cost of the password hashes of etcd users (0: etcd's default, 10).
	// Tests of password auth use bcrypt.MinCost: at the default, a race-instrumented
	// server on a busy machine takes seconds per authentication.
	BcryptCost uint
	// CertFile and KeyFile, when set, serve clients over TLS; ClientCAFile, when set too,
	// requires client certificates signed by it, whose CN etcd takes as the user of a
	// request without a token (as a production etcd with --client-cert-auth does).
	CertFile, KeyFile, ClientCAFile string
}

// Server is a running embedded etcd.
type Server struct {
	etcd    *embed.Etcd
	cfg     *embed.Config
	tempDir string
	client  string
	opts    Options
}

// Start starts an embedded etcd and waits until it serves clients.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.ClientAddr == "" {
		opts.ClientAddr = "127.0.0.1:0"
	}
	if opts.PeerAddr == "" {
		opts.PeerAddr = "127.0.0.1:0"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "ncclwatch-etcd-*")
		if err != nil {
			return nil, fmt.Errorf("embedded etcd data dir: %w", err)
		}
		dir, s.tempDir = d, d
	}
	clientAddr, err := resolvePort(opts.ClientAddr)
	if err != nil {
		return nil, s.cleanup(fmt.Errorf("embedded etcd client address: %w", err))
	}
	peerAddr, err := resolvePort(opts.PeerAddr)
	if err != nil {
		return nil, s.cleanup(fmt.Errorf("embedded etcd peer address: %w", err))
	}
	cfg := embed.NewConfig()
	cfg.Name = "ncclwatch"
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	scheme := "http"
	if opts.CertFile != "" {
		scheme = "https"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: opts.CertFile, KeyFile: opts.KeyFile,
			TrustedCAFile: opts.ClientCAFile, ClientCertAuth: opts.ClientCAFile != ""}
	}
	cu := url.URL{Scheme: scheme, Host: clientAddr}
	pu := url.URL{Scheme: "http", Host: peerAddr}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	// Snapshots are rewritten about once a second per node: keep an hour of history at most.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
	cfg.QuotaBackendBytes = 2 << 30
	if opts.BcryptCost > 0 {
		cfg.BcryptCost = opts.BcryptCost
	}
	s.cfg = cfg
	if err := s.run(ctx); err != nil {
		return nil, s.cleanup(err)
	}
	s.client = scheme + "://" + s.etcd.Clients[0].Addr().String()
	opts.Logger.Info("embedded etcd ready", "endpoint", s.client, "dir", dir)
	return s, nil
}

// run starts etcd from s.cfg and waits until it serves clients.
func (s *Server) run(ctx context.Context) error {
	e, err := embed.StartEtcd(s.cfg)
	if err != nil {
		return fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(s.opts.StartTimeout):
		e.Close()
		return errors.New("embedded etcd did not become ready in time")
	case <-ctx.Done():
		e.Close()
		return ctx.Err()
	}
	s.etcd = e
	return nil
}

// Stop stops the server as an outage would, keeping its data directory and addresses for
// Resume. Clients see their connections drop.
func (s *Server) Stop() {
	if s.etcd != nil {
		s.etcd.Close()
		s.etcd = nil
	}
}

// Resume starts a stopped server again on the same addresses and data: the etcd that
// comes back after an outage, with its keys and leases.
func (s *Server) Resume(ctx context.Context) error {
	if s.etcd != nil {
		return errors.New("embedded etcd is running")
	}
	return s.run(ctx)
}

// Endpoints returns the client URLs.
func (s *Server) Endpoints() []string { return []string{s.client} }

// Close stops the server and removes a temporary data directory.
func (s *Server) Close() error {
	s.Stop()
	return s.cleanup(nil)
}

func (s *Server) cleanup(err error) error {
	if s.tempDir != "" {
		if rmErr := os.RemoveAll(s.tempDir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove embedded etcd dir: %w", rmErr)
		}
		s.tempDir = ""
	}
	return err
}

// resolvePort replaces port 0 with a currently free port: etcd advertises the URL it is
// given, so it must be concrete.
func resolvePort(hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", err
	}
	if port != "0" {
		return hostport, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return net.JoinHostPort(host, strconv.Itoa(l.Addr().(*net.TCPAddr).Port)), nil
}
