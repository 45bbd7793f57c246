package ras

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// collect records what a Poller hands its sink.
type collect struct {
	mu   sync.Mutex
	reps []*snapshot.RAS
}

func (c *collect) sink(r *snapshot.RAS) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reps = append(c.reps, r)
}

func (c *collect) snapshot() []*snapshot.RAS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*snapshot.RAS(nil), c.reps...)
}

func runPoller(t *testing.T, p *Poller, every, for_ time.Duration) *collect {
	t.Helper()
	var got collect
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, every, got.sink)
	}()
	time.Sleep(for_)
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}
	return &got
}

func TestPollerReports(t *testing.T) {
	j, x := hangCase(t)
	srv := startServer(t, &rasServer{jsonRep: j, textRep: x})
	got := runPoller(t, &Poller{Source: &Client{Addr: srv.addr()}}, 20*time.Millisecond, 300*time.Millisecond)
	reps := got.snapshot()
	if len(reps) < 2 {
		t.Fatalf("%d reports in 300ms at 20ms", len(reps))
	}
	for _, r := range reps {
		if r == nil || r.Err != "" || len(r.Comms) != 3 {
			t.Fatalf("report %+v", r)
		}
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

func TestPollerBacksOffWhileNothingListens(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	var dialer countingDialer
	p := &Poller{Source: &Client{Addr: addr, Dialer: &dialer}, MaxBackoff: 80 * time.Millisecond}
	got := runPoller(t, p, 10*time.Millisecond, 500*time.Millisecond)
	// Without backoff: ~50 attempts. With it: 10, 20, 40, 80, 80, ... ms: ~9.
	if n := dialer.n.Load(); n < 3 || n > 20 {
		t.Errorf("%d connection attempts in 500ms", n)
	}
	reps := got.snapshot()
	if len(reps) != 1 || reps[0] != nil {
		t.Errorf("sink got %v, want one nil (service absent)", reps)
	}
}

func TestPollerReportsFailures(t *testing.T) {
	srv := startServer(t, &rasServer{hang: true})
	p := &Poller{
		Source: &Client{Addr: srv.addr(), Timeout: 30 * time.Millisecond},
		Now:    fixedNow,
	}
	got := runPoller(t, p, 10*time.Millisecond, 200*time.Millisecond)
	reps := got.snapshot()
	if len(reps) == 0 {
		t.Fatal("no report of the timeouts")
	}
	for _, r := range reps {
		if r == nil || r.Err == "" || r.T != snapshot.MicrosOf(fixedNow()) || len(r.Comms) != 0 {
			t.Fatalf("report %+v, want only T and Err", r)
		}
	}
}
