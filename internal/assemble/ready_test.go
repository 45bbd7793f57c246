package assemble

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/procstat"
)

// TestSidecarNotReadyBeforeEtcd: a sidecar started while etcd is down runs (it does not
// exit), is not ready until its first write reaches etcd, and is ready after.
func TestSidecarNotReadyBeforeEtcd(t *testing.T) {
	addr, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: []string{"http://" + addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	log := slog.New(slog.DiscardHandler)
	sc, release, err := Sidecar(context.Background(), cli, SidecarConfig{Job: "j", Node: "n0", LogPatterns: []string{t.TempDir() + "/*.log"},
		PollLogs: true, Publish: PublishConfig{Interval: 100 * time.Millisecond}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sc.Run(ctx) }()
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		sc.HTTPHandler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	time.Sleep(500 * time.Millisecond)
	if code, body := readyz(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before etcd was ever reached: %d %q", code, body)
	}
	srv, err := etcdembed.Start(t.Context(), etcdembed.Options{ClientAddr: addr, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer func() { cancel(); <-done }()
	waitFor(t, 20*time.Second, "sidecar ready", func() bool { code, _ := readyz(); return code == http.StatusOK })
}
