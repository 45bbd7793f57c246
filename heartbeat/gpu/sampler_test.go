package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/internal/syncbuf"
	"github.com/ncclwatch/watchdog/snapshot"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
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

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_795_301_451, 0)} }

func startFake(t *testing.T, f *Fake, clock *fakeClock) (*Sampler, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	s, err := NewWithLibrary(f, Options{
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
		Now:       clock.Now,
		EventPoll: 20 * time.Millisecond,
		ProcRoot:  t.TempDir(), // no process of the fakes' is visible: no names
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if m := f.Misuse(); len(m) > 0 {
			t.Errorf("library misuse: %v", m)
		}
	})
	return s, logs
}

func TestSampleFake(t *testing.T) {
	f := NewFake(2)
	clock := newClock()
	f.Update(1, func(g *FakeGPU) {
		g.Util, g.MemUtil, g.PowerMW = 100, 0, 121_000
		g.ClockEvents = ReasonSwPowerCap | ReasonHwThermalSlowdown
		g.TempC = 71
		g.ECCCorrected, g.ECCUncorr, g.PCIeReplays = 3, 1, 7
		g.NVLinks[2] = FakeLink{CRCFlit: 5, Replay: 2, Recovery: 1}
		g.NVLinks[17].Replay = 10
	})
	s, _ := startFake(t, f, clock)
	gpus, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 2 {
		t.Fatalf("%d GPUs, want 2", len(gpus))
	}
	want := snapshot.GPU{
		Index: 1, BusID: "2a000", UUID: "GPU-fa4e0000-0000-0000-0000-000000000001", Name: "NVIDIA H200",
		T: snapshot.MicrosOf(clock.Now()), Util: 100, PowerW: 121, PowerLimitW: 700,
		SMClockMHz: 1980, SMMaxMHz: 1980, TempC: 71,
		ClockEvents: ReasonSwPowerCap | ReasonHwThermalSlowdown, Reasons: []string{"SwPowerCap", "HwThermalSlowdown"},
		ECCVolatileSBE: 3, ECCVolatileDBE: 1, NVLinkErrors: 18, PCIeReplays: 7, State: snapshot.GPUWaiting,
	}
	if got := gpus[1]; !equalGPU(got, want) {
		t.Errorf("GPU 1:\n got %+v\nwant %+v", got, want)
	}
	if gpus[0].BusID != "18000" || gpus[0].State != snapshot.GPUIdle || len(gpus[0].Missing) != 0 {
		t.Errorf("GPU 0: %+v", gpus[0])
	}
}

func equalGPU(a, b snapshot.GPU) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestNoDriver(t *testing.T) {
	for _, count := range []bool{false, true} {
		f := NewFake(8)
		f.SetInitError(fmt.Errorf("nvml init: %w", ErrLibraryNotFound), count)
		s, err := NewWithLibrary(f, Options{})
		if s != nil || !errors.Is(err, ErrNoNVML) {
			t.Fatalf("count=%v: got %v, %v; want ErrNoNVML", count, s, err)
		}
		if !errors.Is(err, ErrLibraryNotFound) || !strings.Contains(err.Error(), "libnvidia-ml not found") {
			t.Errorf("the reason is lost: %v", err)
		}
		inits, shutdowns := f.Calls()
		if inits != shutdowns {
			t.Errorf("count=%v: %d inits, %d shutdowns", count, inits, shutdowns)
		}
		if m := f.Misuse(); len(m) > 0 {
			t.Errorf("misuse: %v", m)
		}
	}
}

func TestOpenWithoutDriver(t *testing.T) {
	// This machine has no NVIDIA driver: the real Open must say so, not crash. (On a
	// GPU machine it opens; the test then only checks that Close works.)
	s, err := Open(context.Background(), Options{})
	if err != nil {
		if !errors.Is(err, ErrNoNVML) {
			t.Fatalf("Open: %v, want ErrNoNVML", err)
		}
		t.Logf("Open: %v", err)
		return
	}
	t.Logf("NVML present: sampling real GPUs")
	if _, err := s.Sample(context.Background()); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

func TestNotSupportedLeavesFieldsUnset(t *testing.T) {
	f := NewFake(1)
	f.Update(0, func(g *FakeGPU) {
		g.Util, g.PowerMW = 99, 630_000
		g.ClockEvents, g.PCIeReplays, g.ECCCorrected = 0x4, 9, 4
		g.NVLinks = nil // a PCIe card
	})
	f.Fail(0, ErrNotSupported, "ce", "sbe", "dbe", "pcierep", "temp", "smmax", "events")
	s, logs := startFake(t, f, newClock())
	for i := 0; i < 3; i++ {
		gpus, err := s.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		g := gpus[0]
		if g.ClockEvents != 0 || g.Reasons != nil || g.ECCVolatileSBE != 0 || g.PCIeReplays != 0 ||
			g.TempC != 0 || g.SMMaxMHz != 0 || g.NVLinkErrors != 0 {
			t.Errorf("unsupported readings were set: %+v", g)
		}
		wantMissing := []string{"smmax", "temp", "ce", "pcierep", "nvlerr", "sbe", "dbe"}
		if !sameSet(g.Missing, wantMissing) {
			t.Errorf("Missing = %v, want %v", g.Missing, wantMissing)
		}
		if g.Util != 99 || g.PowerW != 630 || g.State != snapshot.GPUComputing || g.Err != "" {
			t.Errorf("supported readings: %+v", g)
		}
	}
	if got, want := s.Unsupported(0), []string{"smmax", "temp", "ce", "sbe", "dbe", "nvlerr", "pcierep", "xids"}; !slices.Equal(got, want) {
		t.Errorf("Unsupported = %v, want %v", got, want)
	}
	if strings.Contains(logs.String(), "reading failed") {
		t.Errorf("not-supported readings were logged as failures:\n%s", logs)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestFailingReadingLoggedOnce(t *testing.T) {
	f := NewFake(1)
	f.Fail(0, errors.New("nvml error 999 (unknown)"), "pw")
	s, logs := startFake(t, f, newClock())
	for i := 0; i < 5; i++ {
		gpus, err := s.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(gpus[0].Missing, "pw") {
			t.Errorf("pw not marked missing: %v", gpus[0].Missing)
		}
	}
	if n := strings.Count(logs.String(), "reading=pw"); n != 1 {
		t.Errorf("power failure logged %d times, want once:\n%s", n, logs)
	}
	// It recovers when the reading comes back.
	f.Fail(0, nil, "pw")
	gpus, _ := s.Sample(context.Background())
	if slices.Contains(gpus[0].Missing, "pw") || gpus[0].PowerW != 81 {
		t.Errorf("after recovery: %+v", gpus[0])
	}
}

func TestGPULost(t *testing.T) {
	f := NewFake(2)
	s, _ := startFake(t, f, newClock())
	f.Update(1, func(g *FakeGPU) { g.Lost = true })
	gpus, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if gpus[1].Err != "gpu is lost" || gpus[1].State != "" || gpus[1].Missing != nil {
		t.Errorf("lost GPU: %+v", gpus[1])
	}
	if gpus[0].Err != "" || gpus[0].State != snapshot.GPUIdle {
		t.Errorf("the other GPU suffered: %+v", gpus[0])
	}
}

func TestXIDRing(t *testing.T) {
	f := NewFake(2)
	clock := newClock()
	s, logs := startFake(t, f, clock)
	for code := 1; code <= 20; code++ {
		clock.Advance(time.Second)
		f.InjectXID(1, 100+code)
		waitFor(t, func() bool {
			x := lastXIDs(t, s, 1)
			return len(x) > 0 && x[len(x)-1].Code == 100+code
		})
	}
	xids := lastXIDs(t, s, 1)
	if len(xids) != 16 {
		t.Fatalf("%d XIDs kept, want 16", len(xids))
	}
	for i, x := range xids {
		if x.Code != 105+i {
			t.Fatalf("XID %d = %d, want %d (oldest first)", i, x.Code, 105+i)
		}
	}
	if xids[15].T != snapshot.MicrosOf(clock.Now()) {
		t.Errorf("XID time %v, want the clock's %v", xids[15].T, snapshot.MicrosOf(clock.Now()))
	}
	if got := lastXIDs(t, s, 0); len(got) != 0 {
		t.Errorf("GPU 0 got XIDs: %v", got)
	}
	f.InjectXID(0, 79)
	waitFor(t, func() bool { return len(lastXIDs(t, s, 0)) == 1 })
	if !strings.Contains(logs.String(), "GPU has fallen off the bus") {
		t.Errorf("XID 79 not logged with its meaning:\n%s", logs)
	}
}

func TestECCEvents(t *testing.T) {
	f := NewFake(1)
	f.Fail(0, ErrNotSupported, "sbe", "dbe") // counters absent: events stand in
	s, _ := startFake(t, f, newClock())
	f.InjectECC(0, true)
	f.InjectECC(0, false)
	f.InjectECC(0, false)
	waitFor(t, func() bool {
		gpus, _ := s.Sample(context.Background())
		return gpus[0].ECCVolatileDBE == 1 && gpus[0].ECCVolatileSBE == 2
	})
}

func lastXIDs(t *testing.T, s *Sampler, i int) []snapshot.XID {
	t.Helper()
	gpus, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gpus[i].XIDs
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestWatcherStopsOnCancel(t *testing.T) {
	f := NewFake(2)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := newSampler(ctx, f, Options{EventPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-s.done:
	case <-time.After(2 * time.Second):
		t.Fatal("watcher still running 2 s after cancel")
	}
	// Sampling still works without the watcher, and Close frees after the last Wait.
	if _, err := s.Sample(context.Background()); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Sample(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Sample after Close: %v, want ErrClosed", err)
	}
	inits, shutdowns := f.Calls()
	if inits != 1 || shutdowns != 1 {
		t.Errorf("%d inits, %d shutdowns", inits, shutdowns)
	}
	if m := f.Misuse(); len(m) > 0 {
		t.Errorf("misuse: %v", m)
	}
}

func TestCloseWhileEventsFlow(t *testing.T) {
	f := NewFake(4)
	s, err := NewWithLibrary(f, Options{EventPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				f.InjectXID(i%4, 13)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			if _, err := s.Sample(context.Background()); err != nil {
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	close(stop)
	wg.Wait()
	if m := f.Misuse(); len(m) > 0 {
		t.Errorf("misuse: %v", m)
	}
}

func TestSampleHonoursContext(t *testing.T) {
	s, _ := startFake(t, NewFake(2), newClock())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Sample(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Sample with a cancelled context: %v", err)
	}
}

func TestProbeWithFake(t *testing.T) {
	f := NewFake(2)
	f.Fail(0, ErrNotSupported, "pcierep")
	f.SetProcesses(1, ComputeProcess{PID: 4242, UsedMemory: 512 << 20})
	s, _ := startFake(t, f, newClock())
	var out bytes.Buffer
	if err := probe(context.Background(), s, &out, time.Millisecond, 3); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 3 samples + 1 summary:\n%s", len(lines), out.String())
	}
	var sample struct{ GPUs []snapshot.GPU }
	if err := json.Unmarshal([]byte(lines[0]), &sample); err != nil || len(sample.GPUs) != 2 {
		t.Errorf("sample line %q: %v", lines[0], err)
	}
	if !strings.Contains(lines[0], `"procs":[{"pid":4242,"mem":512}]`) {
		t.Errorf("the GPU's processes are not in the sample: %s", lines[0])
	}
	if !strings.Contains(lines[3], `"unsupported":{"0":["pcierep"],"1":null}`) {
		t.Errorf("summary line %s", lines[3])
	}
}

func TestReasons(t *testing.T) {
	tests := []struct {
		mask uint64
		want []string
	}{
		{0, nil},
		{ReasonGpuIdle, []string{"GpuIdle"}},
		{0x1ff, []string{"GpuIdle", "ApplicationsClocksSetting", "SwPowerCap", "HwSlowdown", "SyncBoost",
			"SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown", "DisplayClockSetting"}},
		{ReasonSwPowerCap | 0x400, []string{"SwPowerCap", "0x400"}},
	}
	for _, tt := range tests {
		if got := Reasons(tt.mask); !slices.Equal(got, tt.want) {
			t.Errorf("Reasons(%#x) = %v, want %v", tt.mask, got, tt.want)
		}
	}
}

// BenchmarkSample8GPUs is one sidecar tick on an 8-GPU node with 18 NVLinks each,
// through the fake: the sampler's own cost, without NVML's.
func BenchmarkSample8GPUs(b *testing.B) {
	s, err := NewWithLibrary(NewFake(8), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
