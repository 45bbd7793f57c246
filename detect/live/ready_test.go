package live

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/procstat"
)

func readyz(t *testing.T, d *Detector) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	d.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// TestNotReadyUntilEtcdRead: a detector started before etcd is not ready (it has no view
// of the jobs yet), says why, and becomes ready once it has read etcd; a failing readiness
// check of its options (notifiers that cannot be built) keeps it not ready, saying why.
func TestNotReadyUntilEtcdRead(t *testing.T) {
	addr, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: []string{"http://" + addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var notifiers error = errors.New(`alert notifier "pagerduty" cannot be built: no PagerDuty routing key`)
	d, err := New(Options{Client: cli, Rules: detect.DefaultConfig(), Interval: 200 * time.Millisecond, LeaseTTL: 2 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Ready: func() error { return notifiers }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()

	code, body := readyz(t, d)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "etcd not read yet") || !strings.Contains(body, "pagerduty") {
		t.Errorf("/readyz before etcd: %d %q", code, body)
	}
	srv, err := etcdembed.Start(t.Context(), etcdembed.Options{ClientAddr: addr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// The detector stops before etcd does (defers run last first): a campaign cancelled
	// while etcd is gone waits for it (concurrency.Election.Resign on the client's context).
	defer srv.Close()
	defer func() { cancel(); <-done }()
	took := eventually(t, 30*time.Second, "etcd read", func() bool {
		_, body := readyz(t, d)
		return !strings.Contains(body, "etcd")
	})
	t.Logf("etcd read %s after it started", took.Round(100*time.Millisecond))
	if code, body := readyz(t, d); code != http.StatusServiceUnavailable || !strings.Contains(body, "routing key") {
		t.Errorf("/readyz with a notifier unbuilt: %d %q", code, body)
	}
	notifiers = nil
	if code, body := readyz(t, d); code != http.StatusOK {
		t.Errorf("/readyz: %d %q", code, body)
	}
}
