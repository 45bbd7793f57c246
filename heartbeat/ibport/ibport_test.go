package ibport

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/ibport/ibsim"
	"github.com/ncclwatch/watchdog/internal/syncbuf"
	"github.com/ncclwatch/watchdog/snapshot"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// fakeClock is the sampler's clock in tests: time moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newSampler(t testing.TB, ibRoot, netRoot string, clock *fakeClock, logs *syncbuf.Buffer, ifaces ...string) *Sampler {
	t.Helper()
	if ibRoot == "" {
		ibRoot = filepath.Join(t.TempDir(), "no-infiniband")
	}
	if netRoot == "" {
		netRoot = filepath.Join(t.TempDir(), "no-net")
	}
	var w interface{ Write([]byte) (int, error) } = logs
	if logs == nil {
		w = &syncbuf.Buffer{}
	}
	return New(Options{
		IBRoot: ibRoot, NetRoot: netRoot, Interfaces: ifaces, Now: clock.Now,
		Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
}

func sample(t testing.TB, s *Sampler) []snapshot.Port {
	t.Helper()
	ports, err := s.Sample(context.Background())
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	return ports
}

// copyTree replaces dst with a copy of the fixture tree src.
func copyTree(t testing.TB, dst, src string) {
	t.Helper()
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

func TestGolden(t *testing.T) {
	tests := []struct {
		name string
		ib   string // fixture tree for the IB root
		net  string // fixture tree for the net root
		// after, when set, replaces the IB tree one second after the first sample, and
		// the golden file holds the second sample with its deltas.
		after string
	}{
		{name: "ib-healthy", ib: "ib-healthy"},
		{name: "ib-width-1x", ib: "ib-width-1x"},
		{name: "ib-speed-hdr", ib: "ib-speed-hdr"},
		{name: "ib-symerr", ib: "ib-symerr-before", after: "ib-symerr-after"},
		{name: "ib-down", ib: "ib-down"},
		{name: "roce", ib: "roce"},
		{name: "net", net: "net"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ibRoot, netRoot string
			if tt.ib != "" {
				ibRoot = filepath.Join("testdata", tt.ib)
			}
			if tt.net != "" {
				netRoot = filepath.Join("testdata", tt.net)
			}
			if tt.after != "" {
				ibRoot = filepath.Join(t.TempDir(), "infiniband")
				copyTree(t, ibRoot, filepath.Join("testdata", tt.ib))
			}
			clock := newFakeClock()
			s := newSampler(t, ibRoot, netRoot, clock, nil)
			ports := sample(t, s)
			if tt.after != "" {
				copyTree(t, ibRoot, filepath.Join("testdata", tt.after))
				clock.Advance(time.Second)
				ports = sample(t, s)
			}
			if n := s.ReadErrors(); n != 0 {
				t.Errorf("ReadErrors = %d, want 0", n)
			}
			got, err := json.MarshalIndent(ports, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "golden", tt.name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Sample over %s differs from %s (run with -update to accept):\n%s", tt.ib+tt.net, golden, got)
			}
		})
	}
}

// TestGoldenFacts checks what the golden files must say, so -update cannot bless a wrong
// reading without a test failing.
func TestGoldenFacts(t *testing.T) {
	byName := func(t *testing.T, ib, net string) map[string]snapshot.Port {
		s := newSampler(t, ib, net, newFakeClock(), nil)
		m := map[string]snapshot.Port{}
		for _, p := range sample(t, s) {
			m[p.Device] = p
		}
		return m
	}
	t.Run("width", func(t *testing.T) {
		m := byName(t, "testdata/ib-width-1x", "")
		if p := m["mlx5_1"]; p.RateGbps != 100 || p.Width != "1X" || p.Speed != "NDR" || p.State != "ACTIVE" {
			t.Errorf("mlx5_1 = %+v, want 100 Gb/s 1X NDR ACTIVE", p)
		}
		if p := m["mlx5_0"]; p.RateGbps != 400 || p.Width != "4X" || p.Speed != "NDR" || p.PhysState != "LinkUp" || p.LinkLayer != "InfiniBand" {
			t.Errorf("mlx5_0 = %+v, want 400 Gb/s 4X NDR LinkUp InfiniBand", p)
		}
	})
	t.Run("speed", func(t *testing.T) {
		if p := byName(t, "testdata/ib-speed-hdr", "")["mlx5_1"]; p.RateGbps != 200 || p.Width != "4X" || p.Speed != "HDR" {
			t.Errorf("mlx5_1 = %+v, want 200 Gb/s 4X HDR", p)
		}
	})
	t.Run("down", func(t *testing.T) {
		m := byName(t, "testdata/ib-down", "")
		if p := m["mlx5_2"]; p.State != "DOWN" || p.PhysState != "Disabled" {
			t.Errorf("mlx5_2 = %+v, want DOWN Disabled", p)
		}
		if p := m["mlx5_3"]; p.State != "DOWN" || p.PhysState != "Polling" || p.Speed != "SDR" {
			t.Errorf("mlx5_3 = %+v, want DOWN Polling SDR", p)
		}
	})
	t.Run("roce", func(t *testing.T) {
		if p := byName(t, "testdata/roce", "")["mlx5_0"]; p.LinkLayer != "Ethernet" || p.RateGbps != 200 {
			t.Errorf("mlx5_0 = %+v, want Ethernet at 200 Gb/s", p)
		}
	})
	t.Run("net", func(t *testing.T) {
		m := byName(t, "", "testdata/net")
		if len(m) != 2 {
			t.Errorf("got interfaces %v, want eth0 and eth1 (lo and docker0 are virtual)", m)
		}
		if p := m["eth0"]; p.Kind != "net" || p.State != "up" || p.RateGbps != 100 {
			t.Errorf("eth0 = %+v, want up at 100 Gb/s", p)
		}
		if p := m["eth1"]; p.State != "down" || p.RateGbps != 0 || p.ReadErrs != 0 {
			t.Errorf("eth1 = %+v, want down, rate unknown, no read errors", p)
		}
	})
}

func TestDeltasAndRates(t *testing.T) {
	ib, netRoot := t.TempDir(), t.TempDir()
	p := ibsim.NDR("mlx5_0", 1)
	p.Counters = map[string]uint64{"port_xmit_data": 1000, "port_rcv_data": 2000, "port_xmit_wait": 10, "symbol_error": 1}
	eth := ibsim.NetIf{Name: "eth0", Physical: true, SpeedMbps: 100000, OperState: "up",
		Stats: map[string]uint64{"tx_bytes": 5, "rx_bytes": 7, "rx_dropped": 1}}
	write(t, ib, p)
	writeNet(t, netRoot, eth)
	clock := newFakeClock()
	s := newSampler(t, ib, netRoot, clock, nil)

	first := sample(t, s)
	for _, port := range first {
		if port.Deltas != nil || port.IntervalS != 0 || port.XmitGbps != 0 || port.RecvGbps != 0 {
			t.Errorf("first sample of %s has deltas or rates: %+v", port.Device, port)
		}
		if port.T != snapshot.MicrosOf(clock.Now()) {
			t.Errorf("%s: T = %d, want the clock's %d", port.Device, port.T, snapshot.MicrosOf(clock.Now()))
		}
	}

	// Two seconds at 100 Gb/s out and 50 Gb/s in: 6.25e9 and 3.125e9 4-octet words.
	clock.Advance(2 * time.Second)
	p.Counters = map[string]uint64{"port_xmit_data": 1000 + 6_250_000_000, "port_rcv_data": 2000 + 3_125_000_000,
		"port_xmit_wait": 10 + 5000, "symbol_error": 1 + 7}
	eth.Stats = map[string]uint64{"tx_bytes": 5 + 25_000_000_000, "rx_bytes": 7 + 2_500_000_000, "rx_dropped": 1}
	eth.CarrierChanges = 2
	write(t, ib, p)
	writeNet(t, netRoot, eth)
	ports := sample(t, s)
	if len(ports) != 2 {
		t.Fatalf("got %d ports, want 2", len(ports))
	}
	hca, nic := ports[0], ports[1]
	wantDeltas := map[string]uint64{"port_xmit_data": 6_250_000_000, "port_rcv_data": 3_125_000_000, "port_xmit_wait": 5000, "symbol_error": 7}
	if !equalDeltas(hca.Deltas, wantDeltas) {
		t.Errorf("HCA deltas = %v, want %v", hca.Deltas, wantDeltas)
	}
	if hca.IntervalS != 2 || hca.XmitGbps != 100 || hca.RecvGbps != 50 || hca.XmitWaitPerS != 2500 {
		t.Errorf("HCA dt/tx/rx/wait = %v/%v/%v/%v, want 2/100/50/2500", hca.IntervalS, hca.XmitGbps, hca.RecvGbps, hca.XmitWaitPerS)
	}
	wantNet := map[string]uint64{"tx_bytes": 25_000_000_000, "rx_bytes": 2_500_000_000, "carrier_changes": 2}
	if !equalDeltas(nic.Deltas, wantNet) {
		t.Errorf("NIC deltas = %v, want %v (rx_dropped did not change)", nic.Deltas, wantNet)
	}
	if nic.IntervalS != 2 || nic.XmitGbps != 100 || nic.RecvGbps != 10 || nic.XmitWaitPerS != 0 {
		t.Errorf("NIC dt/tx/rx/wait = %v/%v/%v/%v, want 2/100/10/0", nic.IntervalS, nic.XmitGbps, nic.RecvGbps, nic.XmitWaitPerS)
	}

	// Nothing moved: no deltas at all, rates zero, interval still reported.
	clock.Advance(time.Second)
	for _, port := range sample(t, s) {
		if port.Deltas != nil || port.XmitGbps != 0 || port.IntervalS != 1 {
			t.Errorf("idle %s: %+v, want no deltas, zero rates, dt 1", port.Device, port)
		}
	}
}

func TestCounterReset(t *testing.T) {
	ib := t.TempDir()
	p := ibsim.NDR("mlx5_0", 1)
	p.Counters = map[string]uint64{"symbol_error": 1000, "port_xmit_data": 1 << 50, "link_downed": 3}
	write(t, ib, p)
	clock := newFakeClock()
	s := newSampler(t, ib, "", clock, nil)
	sample(t, s)

	// perfquery -R or a driver reload: counters restart from zero within the interval.
	clock.Advance(time.Second)
	p.Counters = map[string]uint64{"symbol_error": 3, "port_xmit_data": 31_250_000, "link_downed": 3}
	write(t, ib, p)
	got := sample(t, s)[0]
	want := map[string]uint64{"symbol_error": 3, "port_xmit_data": 31_250_000}
	if !equalDeltas(got.Deltas, want) {
		t.Errorf("deltas after reset = %v, want %v", got.Deltas, want)
	}
	if got.XmitGbps != 1 {
		t.Errorf("XmitGbps after reset = %v, want 1", got.XmitGbps)
	}

	clock.Advance(time.Second)
	p.Counters["symbol_error"] = 5
	write(t, ib, p)
	if got := sample(t, s)[0]; !equalDeltas(got.Deltas, map[string]uint64{"symbol_error": 2}) {
		t.Errorf("deltas after reset and growth = %v, want symbol_error:2", got.Deltas)
	}
}

func TestUnreadableFiles(t *testing.T) {
	ib := t.TempDir()
	p := ibsim.NDR("mlx5_0", 1)
	p.HWCounters = map[string]uint64{"np_cnp_sent": 1, "out_of_buffer": 0}
	write(t, ib, p)
	dir := filepath.Join(ib, "mlx5_0", "ports", "1")
	logs := &syncbuf.Buffer{}
	clock := newFakeClock()
	s := newSampler(t, ib, "", clock, logs)
	sample(t, s)

	// A missing counter, a rate the kernel refuses to show (a directory reads as EISDIR,
	// even for root), a state in no known format, a counter the driver marks N/A, and a
	// hw counter gone: the first three are errors, the last two are not.
	mustRemove(t, filepath.Join(dir, "counters", "symbol_error"))
	mustRemove(t, filepath.Join(dir, "rate"))
	if err := os.Mkdir(filepath.Join(dir, "rate"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "state"), "garbage\n")
	mustWrite(t, filepath.Join(dir, "counters", "port_xmit_wait"), "N/A (no PMA)\n")
	mustRemove(t, filepath.Join(dir, "hw_counters", "out_of_buffer"))
	mustWrite(t, filepath.Join(dir, "counters", "link_downed"), "1\n")

	for i := range 3 {
		clock.Advance(time.Second)
		got := sample(t, s)[0]
		if got.ReadErrs != 3 {
			t.Errorf("sample %d: ReadErrs = %d, want 3", i, got.ReadErrs)
		}
		if got.State != "" || got.RateGbps != 0 || got.Width != "" || got.Speed != "" {
			t.Errorf("sample %d: unreadable fields not left unknown: %+v", i, got)
		}
		if got.PhysState != "LinkUp" || got.LinkLayer != "InfiniBand" {
			t.Errorf("sample %d: readable fields lost: %+v", i, got)
		}
		if i == 0 && !equalDeltas(got.Deltas, map[string]uint64{"link_downed": 1}) {
			t.Errorf("deltas = %v, want link_downed:1", got.Deltas)
		}
	}
	if n := s.ReadErrors(); n != 9 {
		t.Errorf("ReadErrors = %d, want 9", n)
	}
	if n := strings.Count(logs.String(), "some port fields unreadable"); n != 1 {
		t.Errorf("logged the same failure %d times, want once:\n%s", n, logs)
	}

	// Repaired: fields come back, counters restart their baseline, one recovery line.
	mustRemove(t, filepath.Join(dir, "rate"))
	write(t, ib, p)
	clock.Advance(time.Second)
	got := sample(t, s)[0]
	if got.ReadErrs != 0 || got.State != "ACTIVE" || got.RateGbps != 400 {
		t.Errorf("after repair: %+v", got)
	}
	if n := strings.Count(logs.String(), "port fields readable again"); n != 1 {
		t.Errorf("logged recovery %d times, want once:\n%s", n, logs)
	}
}

func TestRoots(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	clock := newFakeClock()

	s := newSampler(t, missing, missing, clock, nil)
	if ports, err := s.Sample(context.Background()); err == nil {
		t.Errorf("Sample with no roots = %v, nil; want an error", ports)
	}

	// No HCA on this node is normal: net ports alone, no error, nothing counted.
	s = newSampler(t, missing, "testdata/net", clock, nil)
	if ports := sample(t, s); len(ports) != 2 || s.ReadErrors() != 0 {
		t.Errorf("net only: %d ports, %d read errors; want 2, 0", len(ports), s.ReadErrors())
	}

	// Empty roots: nothing to report, and nothing wrong.
	s = newSampler(t, t.TempDir(), t.TempDir(), clock, nil)
	if ports := sample(t, s); len(ports) != 0 {
		t.Errorf("empty roots gave %v", ports)
	}
}

func TestNamedInterfaces(t *testing.T) {
	clock := newFakeClock()
	s := newSampler(t, "", "testdata/net", clock, nil, "docker0", "eth1")
	ports := sample(t, s)
	if len(ports) != 2 || ports[0].Device != "docker0" || ports[1].Device != "eth1" {
		t.Errorf("named docker0, eth1: got %v", ports)
	}

	logs := &syncbuf.Buffer{}
	s = newSampler(t, "", "testdata/net", clock, logs, "eth0", "eth9")
	for range 2 {
		if ports := sample(t, s); len(ports) != 1 || ports[0].Device != "eth0" {
			t.Errorf("named eth0, eth9: got %v", ports)
		}
	}
	if s.ReadErrors() != 2 || strings.Count(logs.String(), "cannot read directory") != 1 {
		t.Errorf("missing eth9: %d read errors, logs:\n%s", s.ReadErrors(), logs)
	}

	s = newSampler(t, "", "testdata/net", clock, nil, "eth9")
	if ports, err := s.Sample(context.Background()); err == nil {
		t.Errorf("only a missing interface named: got %v, nil; want an error", ports)
	}
}

func TestPortsComeAndGo(t *testing.T) {
	ib := t.TempDir()
	for _, dev := range []string{"mlx5_10", "mlx5_2", "mlx5_1"} {
		write(t, ib, ibsim.NDR(dev, 1))
	}
	two := ibsim.NDR("mlx5_2", 2)
	write(t, ib, two)
	clock := newFakeClock()
	s := newSampler(t, ib, "", clock, nil)
	var order []string
	for _, p := range sample(t, s) {
		order = append(order, p.Device+"/"+strconv.Itoa(p.Port))
	}
	if got := strings.Join(order, " "); got != "mlx5_1/1 mlx5_2/1 mlx5_2/2 mlx5_10/1" {
		t.Errorf("order = %s", got)
	}

	mustRemoveAll(t, filepath.Join(ib, "mlx5_2"))
	clock.Advance(time.Second)
	if n := len(sample(t, s)); n != 2 || len(s.ports) != 2 {
		t.Errorf("after mlx5_2 vanished: %d ports, %d remembered; want 2, 2", n, len(s.ports))
	}

	// It comes back with a higher counter: a fresh baseline, not a delta over the gap.
	two.Counters = map[string]uint64{"symbol_error": 50}
	write(t, ib, two)
	clock.Advance(time.Second)
	for _, p := range sample(t, s) {
		if p.Device == "mlx5_2" && p.Deltas != nil {
			t.Errorf("returning port has deltas %v", p.Deltas)
		}
	}
}

func TestMaxPorts(t *testing.T) {
	netRoot := t.TempDir()
	for i := range 5 {
		writeNet(t, netRoot, ibsim.NetIf{Name: "eth" + strconv.Itoa(i), Physical: true, SpeedMbps: 1000, OperState: "up"})
	}
	logs := &syncbuf.Buffer{}
	s := newSampler(t, "", netRoot, newFakeClock(), logs)
	s.maxPorts = 3
	if ports := sample(t, s); len(ports) != 3 || ports[2].Device != "eth2" {
		t.Errorf("got %v, want eth0..eth2", ports)
	}
	sample(t, s)
	if n := strings.Count(logs.String(), "too many ports"); n != 1 {
		t.Errorf("logged %d times, want once", n)
	}
}

func TestCanceled(t *testing.T) {
	s := newSampler(t, "testdata/ib-healthy", "", newFakeClock(), nil)
	sample(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Sample(ctx); err == nil {
		t.Error("Sample with a canceled context succeeded")
	}
	if len(s.ports) != 1 {
		t.Errorf("a canceled sample forgot ports: %d remembered", len(s.ports))
	}
}

// TestConcurrentRewrite runs the simulator's rewrites under a sampler: with atomic file
// replacement the sampler never sees a torn or missing value.
func TestConcurrentRewrite(t *testing.T) {
	ib := t.TempDir()
	healthy := ibsim.NDR("mlx5_0", 1)
	degraded := healthy
	degraded.Rate = ibsim.FormatRate(1, "NDR")
	degraded.State, degraded.PhysState = "DOWN", "Polling"
	write(t, ib, healthy)
	s := newSampler(t, ib, "", newFakeClock(), nil)

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := uint64(0); ; i++ {
			select {
			case <-done:
				return
			default:
			}
			p := healthy
			if i%2 == 1 {
				p = degraded
			}
			p.Counters = map[string]uint64{"symbol_error": i * 1_000_000_007}
			if err := ibsim.WritePort(ib, p); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 200 {
		for _, p := range sample(t, s) {
			if p.ReadErrs != 0 || (p.RateGbps != 400 && p.RateGbps != 100) || (p.State != "ACTIVE" && p.State != "DOWN") {
				t.Errorf("torn read: %+v", p)
			}
		}
	}
	close(done)
	wg.Wait()
}

func TestNaturalCompare(t *testing.T) {
	sorted := []string{"eth0", "eth1", "eth2", "eth10", "ib0", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_9", "mlx5_10", "mlx5_bond_0"}
	for i := range sorted {
		for j := range sorted {
			got := naturalCompare(sorted[i], sorted[j])
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("naturalCompare(%q, %q) = %d, want %d", sorted[i], sorted[j], got, want)
			}
		}
	}
}

func equalDeltas(got, want map[string]uint64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func write(t testing.TB, root string, p ibsim.Port) {
	t.Helper()
	if err := ibsim.WritePort(root, p); err != nil {
		t.Fatal(err)
	}
}

func writeNet(t testing.TB, root string, n ibsim.NetIf) {
	t.Helper()
	if err := ibsim.WriteNetIf(root, n); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := ibsim.WriteFile(path, content); err != nil {
		t.Fatal(err)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func mustRemoveAll(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

func TestRoCEHWCounters(t *testing.T) {
	ib := filepath.Join(t.TempDir(), "infiniband")
	copyTree(t, ib, "testdata/roce")
	clock := newFakeClock()
	s := newSampler(t, ib, "", clock, nil)
	sample(t, s)

	// Congestion: the switch marks ECN, the receiver sends CNPs, the sender slows down
	// and retransmits; and a hw counter the sampler does not watch changes unseen.
	hw := filepath.Join(ib, "mlx5_0", "ports", "1", "hw_counters")
	for name, v := range map[string]string{
		"np_cnp_sent": "98213", "np_ecn_marked_roce_packets": "98213", "rp_cnp_handled": "91977",
		"roce_adp_retrans": "22", "out_of_sequence": "18", "rx_read_requests": "99999",
	} {
		mustWrite(t, filepath.Join(hw, name), v+"\n")
	}
	clock.Advance(time.Second)
	got := sample(t, s)[0]
	want := map[string]uint64{"np_cnp_sent": 10000, "np_ecn_marked_roce_packets": 10000,
		"rp_cnp_handled": 100, "roce_adp_retrans": 1, "out_of_sequence": 1}
	if !equalDeltas(got.Deltas, want) || got.ReadErrs != 0 {
		t.Errorf("RoCE deltas = %v (read errors %d), want %v", got.Deltas, got.ReadErrs, want)
	}
}
