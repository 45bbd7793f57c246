package ibport

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/ibport/ibsim"
)

// BenchmarkSample samples a node with 8 NDR HCAs (with hw_counters) and two interfaces,
// the sidecar's once-a-second work.
func BenchmarkSample(b *testing.B) {
	ib, netRoot := b.TempDir(), b.TempDir()
	for i := range 8 {
		p := ibsim.NDR("mlx5_"+string(rune('0'+i)), 1)
		p.Counters = map[string]uint64{"port_xmit_data": 1 << 40, "port_rcv_data": 1 << 40}
		p.HWCounters = map[string]uint64{
			"out_of_sequence": 0, "packet_seq_err": 0, "local_ack_timeout_err": 0,
			"rnr_nak_retry_err": 0, "implied_nak_seq_err": 0, "out_of_buffer": 0,
			"duplicate_request": 0, "rx_write_requests": 1 << 20,
		}
		if err := ibsim.WritePort(ib, p); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range []ibsim.NetIf{
		{Name: "eth0", Physical: true, SpeedMbps: 100000, OperState: "up"},
		{Name: "lo", OperState: "unknown"},
	} {
		if err := ibsim.WriteNetIf(netRoot, n); err != nil {
			b.Fatal(err)
		}
	}
	t := time.Unix(1e9, 0)
	s := New(Options{
		IBRoot: ib, NetRoot: netRoot,
		Now:    func() time.Time { t = t.Add(time.Second); return t },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx := context.Background()
	if ports, err := s.Sample(ctx); err != nil || len(ports) != 9 {
		b.Fatalf("Sample = %d ports, %v", len(ports), err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
