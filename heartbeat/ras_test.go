package heartbeat_test

import (
	"context"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat"
	"github.com/ncclwatch/watchdog/heartbeat/ras"
	"github.com/ncclwatch/watchdog/snapshot"
)

// rasSource answers every Status with one report, counting the calls.
type rasSource struct {
	rep   *snapshot.RAS
	calls atomic.Int32
}

func (r *rasSource) Status(context.Context) (*snapshot.RAS, error) {
	r.calls.Add(1)
	return r.rep, nil
}

// TestRASReports: the sidecar asks RAS every RASEvery and its snapshot carries the report.
func TestRASReports(t *testing.T) {
	b, err := os.ReadFile("../testdata/captures/nccl-2.28.9-2xH200/multicomm_silent/ras.hang6s.json.txt")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ras.ParseJSONKeep(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := &rasSource{rep: rep}
	s := runLocalSidecar(t, t.TempDir(), func(o *heartbeat.Options) { o.RAS, o.RASEvery = src, 20*time.Millisecond })
	time.Sleep(300 * time.Millisecond)
	if n := src.calls.Load(); n < 2 {
		t.Fatalf("%d reports in 300ms at 20ms", n)
	}
	if r := s.Snapshot().RAS; r == nil || r.Err != "" || len(r.Comms) != 3 {
		t.Fatalf("snapshot RAS %+v, want the report's 3 communicators", r)
	}
}

// countingDialer counts connection attempts.
type countingDialer struct {
	n atomic.Int32
	d net.Dialer
}

func (c *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c.n.Add(1)
	return c.d.DialContext(ctx, network, addr)
}

// TestRASBacksOffWhileNothingListens: with no NCCL process listening (normal between
// jobs) the sidecar asks less and less often, and its snapshot has no RAS report.
func TestRASBacksOffWhileNothingListens(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	var dialer countingDialer
	client := &ras.Client{Addr: addr, Dialer: &dialer}
	s := runLocalSidecar(t, t.TempDir(), func(o *heartbeat.Options) { o.RAS, o.RASEvery = client, 10*time.Millisecond })
	time.Sleep(500 * time.Millisecond)
	// Without backoff: ~50 attempts. With it: 10, 20, 40, 80, 160 ms apart: ~5.
	if n := dialer.n.Load(); n < 3 || n > 20 {
		t.Errorf("%d connection attempts in 500ms", n)
	}
	if r := s.Snapshot().RAS; r != nil {
		t.Errorf("snapshot RAS %+v while nothing listens, want none", r)
	}
}
