package assemble

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/gpu"
	"github.com/ncclwatch/watchdog/internal/procstat"
)

// TestSidecarSources: the sources a configuration names reach the snapshot, a sidecar
// without etcd is healthy, and release frees the GPU library.
func TestSidecarSources(t *testing.T) {
	ras, err := procstat.FreeAddr() // nothing listens: RAS absent, as between jobs
	if err != nil {
		t.Fatal(err)
	}
	fake := gpu.NewFake(2)
	sc, release, err := Sidecar(context.Background(), nil, SidecarConfig{Job: "j", Node: "n0",
		LogPatterns: []string{t.TempDir() + "/*.log"}, PollLogs: true, SampleEvery: 20 * time.Millisecond,
		GPULibrary: fake, Ports: true, IBRoot: "../../heartbeat/ibport/testdata/ib-healthy",
		NetRoot: "../../heartbeat/ibport/testdata/net", CheckPIDs: true, ProcRoot: t.TempDir(), RASAddr: ras,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sc.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := sc.Snapshot()
		if len(n.GPUs) == 2 && len(n.Ports) > 0 {
			if n.Node != "n0" || n.RAS != nil {
				t.Errorf("node %q, RAS %+v", n.Node, n.RAS)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot has %d GPUs and %d ports, want 2 and some", len(n.GPUs), len(n.Ports))
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec := httptest.NewRecorder()
	sc.HTTPHandler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/healthz of a sidecar without etcd: %d", rec.Code)
	}
	cancel()
	<-done
	release()
	if inits, shutdowns := fake.Calls(); inits != 1 || shutdowns != 1 {
		t.Errorf("GPU library initialised %d times, shut down %d times; want 1 and 1", inits, shutdowns)
	}
}

// TestSidecarNVMLOff: where NVML cannot be had (no driver, or no cgo), the sidecar runs
// without GPU state rather than failing.
func TestSidecarNVMLOff(t *testing.T) {
	s, openErr := gpu.Open(context.Background(), gpu.Options{})
	if openErr == nil {
		s.Close()
		t.Skip("this machine has NVML")
	}
	sc, release, err := Sidecar(context.Background(), nil, SidecarConfig{Job: "j", Node: "n0", NVML: true,
		LogPatterns: []string{t.TempDir() + "/*.log"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("NVML unavailable (%v) stopped the sidecar: %v", openErr, err)
	}
	defer release()
	if g := sc.Snapshot().GPUs; len(g) != 0 {
		t.Errorf("GPUs %+v without NVML", g)
	}
}
