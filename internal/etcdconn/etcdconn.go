// Package etcdconn builds etcd clients from the watchdog's connection settings: endpoints,
// TLS files and a password read from a file, never from a flag.
//
// The clients it builds never fail for an unreachable etcd at start (the password is
// checked on first use, and again after every restart of etcd that invalidated the token),
// and, given a Logger, they say why a connection fails: which TLS file or check, which
// endpoint scheme, which user (explain.go), instead of "context deadline exceeded".
package etcdconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Config says how to reach etcd.
type Config struct {
	Endpoints    []string
	CAFile       string
	CertFile     string
	KeyFile      string
	Username     string
	PasswordFile string
	DialTimeout  time.Duration
	// Logger, when set, is told once per distinct cause why the connection fails (a TLS
	// check, a refused password) and when it works again. nil: silent.
	Logger *slog.Logger
}

// New returns a client; it does not wait for a connection (etcd may be down at start), nor
// authenticate before the first request.
func New(cfg Config) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints")
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	cc := clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		Logger:               zap.NewNop(),
		DialOptions:          []grpc.DialOption{grpc.WithConnectParams(ConnectParams(cfg.DialTimeout))},
	}
	if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
		t, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		cc.TLS = t
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var auth *tokenAuth
	if cfg.Username != "" {
		// Read now, so a missing or empty file is a configuration error at start; read again
		// at each authentication, so a rotated password is picked up.
		if _, err := readPassword(cfg.PasswordFile); err != nil {
			return nil, err
		}
		// Not clientv3's Username/Password: its client authenticates at dial (failing when
		// etcd is down at start) and sends its stale token to fetch a new one, which etcd
		// 3.4 refuses after a restart (auth.go).
		auth = newTokenAuth(cfg.Username, cfg.PasswordFile, log)
		cc.DialOptions = append(cc.DialOptions, grpc.WithPerRPCCredentials(auth),
			grpc.WithChainUnaryInterceptor(auth.unary), grpc.WithChainStreamInterceptor(auth.stream))
	}
	c, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	if auth != nil {
		auth.bind(c)
	}
	if cfg.Logger != nil {
		go monitor(c, cfg, cfg.Logger)
		go logIdentity(c, cfg, cfg.Logger)
	}
	return c, nil
}

// ConnectParams is how the client's connection to etcd comes back after an outage. gRPC's
// default waits 1 s after the first failed connection attempt and 1.6 times longer after
// each next one, up to 2 minutes, so the longer the outage the longer the silence after it:
// after 20 s down, sidecars republished about 20 s after etcd was back (make
// bench-reconnect), and the detector was blind meanwhile. Here the wait starts at 250 ms
// and stops growing at 2 s, with ±50% jitter: attempts are 1 to 3 s apart during a long
// outage, so the connection returns within 3 s of etcd, and a cluster's sidecars reconnect
// spread over that window instead of in one instant. An attempt gives up after
// dialTimeout, so one lost in a network partition does not hold the next one back.
func ConnectParams(dialTimeout time.Duration) grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.5, MaxDelay: 2 * time.Second},
		MinConnectTimeout: dialTimeout,
	}
}

// tlsConfig reads the TLS files; each error names the file and what is wrong with it.
func tlsConfig(cfg Config) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fileProblem("CA file", cfg.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA file %s: no PEM certificate in it", cfg.CAFile)
		}
		t.RootCAs = pool
	}
	switch {
	case cfg.CertFile != "" && cfg.KeyFile == "":
		return nil, fmt.Errorf("etcd client certificate %s: no key file (--etcd-key-file)", cfg.CertFile)
	case cfg.CertFile == "" && cfg.KeyFile != "":
		return nil, fmt.Errorf("etcd client key %s: no certificate file (--etcd-cert-file)", cfg.KeyFile)
	case cfg.CertFile != "":
		for _, f := range [][2]string{{"client certificate", cfg.CertFile}, {"client key", cfg.KeyFile}} {
			if _, err := os.Stat(f[1]); err != nil {
				return nil, fileProblem(f[0], f[1], err)
			}
		}
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate %s with key %s: %w", cfg.CertFile, cfg.KeyFile, err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}
