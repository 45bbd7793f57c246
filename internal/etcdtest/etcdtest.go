// Package etcdtest gives a test a real embedded etcd and a client of it, both closed when
// the test ends: the setup of every test that runs a part of the watchdog against etcd.
package etcdtest

import (
	"log/slog"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
)

// Start starts an embedded etcd (quiet unless opts.Logger says otherwise) and a client of
// it. The client closes before the server, which would otherwise wait for its streams.
func Start(t testing.TB, opts etcdembed.Options) (*etcdembed.Server, *clientv3.Client) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv, err := etcdembed.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}
