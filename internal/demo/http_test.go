package demo

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/internal/syncbuf"
)

// TestDemoServesHTTP: while the demo runs, the detector's API, /healthz and /metrics answer
// on --http, and the output says where and what to try.
func TestDemoServesHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a simulated job for a few seconds")
	}
	var out syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Options{Scenarios: []string{"mismatch"}, Nodes: 2, RanksPerNode: 2, Out: &out, HTTP: "127.0.0.1:0", Program: "bin/watchdog"})
		done <- err
	}()
	served := regexp.MustCompile(`served at (http://127\.0\.0\.1:\d+)\.`)
	var base string
	for deadline := time.Now().Add(time.Minute); base == ""; time.Sleep(20 * time.Millisecond) {
		if m := served.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no address in the output:\n%s", out.String())
		}
	}
	if !strings.Contains(out.String(), "bin/watchdog status --detector "+base) {
		t.Errorf("the output does not say how to watch it:\n%s", out.String())
	}
	for _, path := range []string{"/healthz", "/api/v1/incidents", "/metrics"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		if path == "/metrics" && !strings.Contains(string(body), "ncclwatch_detector_") {
			t.Errorf("/metrics has no detector series")
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
