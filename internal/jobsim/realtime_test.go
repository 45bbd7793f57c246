package jobsim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/gpu"
	"github.com/ncclwatch/watchdog/heartbeat/ibport"
	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestRunIncremental: in real time a reader sees the first step's lines while the job still
// runs, stamped with the wall clock, and cancelling stops the job promptly.
func TestRunIncremental(t *testing.T) {
	s, err := New(Config{Nodes: 2, RanksPerNode: 2, Steps: 1000, StepTime: 20 * time.Millisecond, Timestamps: true,
		Location: time.UTC, LogsOnly: true}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.verify = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- s.Run(ctx) }()
	path := s.Ranks()[3].LogPath
	var first []byte
	for deadline := time.Now().Add(10 * time.Second); first == nil; {
		if time.Now().After(deadline) {
			t.Fatal("no collective line appeared in 10s")
		}
		b, _ := os.ReadFile(path)
		if i := bytes.Index(b, []byte(": opCount ")); i >= 0 {
			j := bytes.LastIndexByte(b[:i], '\n')
			k := bytes.IndexByte(b[i:], '\n')
			if k > 0 { // only complete lines
				first = b[j+1 : i+k]
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the job ended (%v) before its first step's line was read", err)
	default:
	}
	var l logparse.Line
	logparse.Parse(first, &l)
	if l.Kind != logparse.KindColl || !l.HasTime {
		t.Fatalf("first collective line %q parsed as %s", first, l.Kind)
	}
	ts := time.Date(l.Time.Year, time.Month(l.Time.Month), l.Time.Day, l.Time.Hour, l.Time.Min, l.Time.Sec, l.Time.Nanos, time.UTC)
	if ts.Before(began.Add(-time.Millisecond)) || time.Since(ts) > 2*time.Second {
		t.Errorf("line stamped %s, job began %s", ts, began)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not stop on cancel")
	}
	for _, e := range s.verifyErrs {
		t.Errorf("line check: %s", e)
	}
	// Nothing is half-written: the file ends with a complete line.
	if b, _ := os.ReadFile(path); len(b) == 0 || b[len(b)-1] != '\n' {
		t.Error("log does not end with a complete line")
	}
}

// sampleStates reads a node's GPUs through the real NVML sampler over the fake.
func sampleStates(t *testing.T, f *gpu.Fake) []snapshot.GPU {
	t.Helper()
	smp, err := gpu.NewWithLibrary(f, gpu.Options{EventPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Close()
	gs, err := smp.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// TestRunHangGPUState: a silent rank's GPU idles while its peers spin in their collectives,
// as the sampler classifies them; the job's processes stay alive while it is held; after a
// crash the dead pid is reported dead.
func TestRunHangGPUState(t *testing.T) {
	for _, kind := range []FaultKind{FaultSilent, FaultCrash} {
		t.Run(string(kind), func(t *testing.T) {
			s, err := New(Config{Nodes: 2, RanksPerNode: 4, Steps: 10, StepTime: 10 * time.Millisecond, LogsOnly: true,
				Hold: time.Millisecond, Faults: []Fault{{Kind: kind, Rank: 5, Step: 3, Op: -1}}}, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			ins := s.Injections()
			if len(ins) != 1 || ins[0].Rank != 5 || time.Since(ins[0].Time) > time.Minute {
				t.Fatalf("injections %+v", ins)
			}
			node := s.Nodes()[1]
			gs := sampleStates(t, node.GPUs)
			for i, g := range gs[:4] {
				want := snapshot.GPUWaiting
				if i == 1 { // rank 5 is node1's GPU 1
					want = snapshot.GPUIdle
				}
				if g.State != want {
					t.Errorf("GPU %d (bus %s): %s (%d%%, %.0f W), want %s", i, g.BusID, g.State, g.Util, g.PowerW, want)
				}
			}
			if gs[1].BusID != node.Ranks[1].BusID {
				t.Errorf("GPU 1 bus %s, rank 5 bus %s", gs[1].BusID, node.Ranks[1].BusID)
			}
			if alive := s.Alive(ins[0].PID); alive != (kind == FaultSilent) {
				t.Errorf("culprit alive %t", alive)
			}
			if !s.Alive(s.Ranks()[0].PID) {
				t.Error("a waiting rank of a hung job is not alive")
			}
		})
	}
}

// TestRunComputingAndPause: GPUs compute while the job steps, idle during a pause.
func TestRunComputingAndPause(t *testing.T) {
	s, err := New(Config{Nodes: 1, RanksPerNode: 2, Steps: 16, StepTime: 40 * time.Millisecond, LogsOnly: true,
		Faults: []Fault{{Kind: FaultPause, Rank: 0, Step: 4, Duration: 300 * time.Millisecond}}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	f := s.Nodes()[0].GPUs
	seen := map[snapshot.GPUState]bool{}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !(seen[snapshot.GPUComputing] && seen[snapshot.GPUIdle] && len(s.Injections()) > 0); {
		seen[sampleStates(t, f)[0].State] = true
		time.Sleep(20 * time.Millisecond)
	}
	if !seen[snapshot.GPUComputing] || !seen[snapshot.GPUIdle] {
		t.Errorf("GPU 0 states seen %v, want computing and idle (pause)", seen)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.Alive(s.Ranks()[0].PID) {
		t.Error("processes alive after a clean end")
	}
	if gs := sampleStates(t, f); gs[0].State != snapshot.GPUIdle {
		t.Errorf("GPU 0 after the job: %s", gs[0].State)
	}
}

// TestIBPortDegraded: the degraded port reads 1X (100 Gb/s) through the real sysfs sampler,
// the others 4X NDR, and traffic counters advanced.
func TestIBPortDegraded(t *testing.T) {
	s, _ := generate(t, Config{Nodes: 2, RanksPerNode: 8, Steps: 5, Faults: []Fault{
		{Kind: FaultIBPort, Rank: 11, Step: 2, Op: -1},
		{Kind: FaultIBPort, Rank: 12, Step: 3, Port: "mlx5_6", Down: true, Op: -1},
	}})
	node := s.Nodes()[1]
	ports, err := ibport.New(ibport.Options{IBRoot: node.IBRoot, NetRoot: filepath.Join(t.TempDir(), "none")}).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 8 {
		t.Fatalf("%d ports", len(ports))
	}
	for _, p := range ports {
		switch p.Device {
		case "mlx5_3":
			if p.RateGbps != 100 || p.Width != "1X" || p.State != "ACTIVE" {
				t.Errorf("%s: %+v, want 1X 100 Gb/s", p.Device, p)
			}
		case "mlx5_6":
			if p.State != "DOWN" {
				t.Errorf("%s: %+v, want DOWN", p.Device, p)
			}
		default:
			if p.RateGbps != 400 || p.Width != "4X" || p.State != "ACTIVE" {
				t.Errorf("%s: %+v, want 4X NDR", p.Device, p)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(node.IBRoot, "mlx5_0", "ports", "1", "counters", "port_xmit_data"))
	if err != nil || strings.TrimSpace(string(b)) == "0" {
		t.Errorf("port_xmit_data %q %v: no traffic counted", b, err)
	}
}

// TestXIDReachesSampler: an XID fault arrives through the node's fake NVML events.
func TestXIDReachesSampler(t *testing.T) {
	s, err := New(Config{Nodes: 2, RanksPerNode: 8, Steps: 5, LogsOnly: true,
		Faults: []Fault{{Kind: FaultXID, Rank: 13, Step: 2, XID: 79}}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	smp, err := gpu.NewWithLibrary(s.Nodes()[1].GPUs, gpu.Options{EventPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Close()
	if err := s.Generate(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		gs, err := smp.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if x := gs[5].XIDs; len(x) == 1 && x[0].Code == 79 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GPU 5 XIDs %+v", gs[5].XIDs)
		}
	}
}
