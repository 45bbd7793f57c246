// Package etcdconn builds etcd clients from the watchdog's connection settings: endpoints,
// TLS files and a password read from a file, never from a flag.
package etcdconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
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
}

// New returns a client; it does not wait for a connection (etcd may be down at start).
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
	if cfg.CAFile != "" || cfg.CertFile != "" {
		t, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		cc.TLS = t
	}
	if cfg.Username != "" {
		pw, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("etcd password file: %w", err)
		}
		cc.Username, cc.Password = cfg.Username, strings.TrimSpace(string(pw))
	}
	c, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
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

func tlsConfig(cfg Config) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcd CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA file %s: no certificates", cfg.CAFile)
		}
		t.RootCAs = pool
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}
