package detect

import (
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

func TestStuckInFlightVersusPause(t *testing.T) {
	cfg := DefaultConfig()
	mk := func(state snapshot.GPUState) *Job {
		j := job(30*time.Second, rank(0, 30, 100*time.Millisecond, 0, nil), rank(1, 30, 100*time.Millisecond, 0, nil))
		j.Nodes = map[string]*snapshot.Node{"node0": gpuNode("node0", state), "node1": gpuNode("node1", state)}
		return j
	}
	fs, paused := stuckInFlight(mk("waiting"), cfg)
	f := only(t, fs, incident.KindStuckInFlight)
	for _, c := range f.Culprits {
		if c.Rank >= 0 || c.Host == "" {
			// Live, gpu_hang's spinning GPUs named rank 0, which only waited.
			t.Errorf("a spin names hosts, not ranks: %+v", f.Culprits)
		}
	}
	if len(paused) != 0 {
		t.Fatalf("paused %v", paused)
	}
	fs, paused = stuckInFlight(mk("idle"), cfg)
	if len(fs) != 0 || len(paused) != 1 {
		t.Fatalf("checkpoint pause: findings %+v paused %v", fs, paused)
	}
	if res := Evaluate(mk("idle"), cfg, TimingOK); len(res.Findings) != 0 {
		t.Fatalf("a pause must produce no finding: %+v", res.Findings)
	}
}

func TestStuckInFlightIgnoresStaleGPUSamples(t *testing.T) {
	cfg := DefaultConfig()
	j := job(30*time.Second, rank(0, 30, 100*time.Millisecond, 0, nil), rank(1, 30, 100*time.Millisecond, 0, nil))
	j.Nodes = map[string]*snapshot.Node{"node0": gpuNode("node0", "waiting"), "node1": gpuNode("node1", "waiting")}
	for _, n := range j.Nodes {
		n.GPUs[0].T = us(20 * time.Second) // 10 s old: the sampler stalled
	}
	if fs, _ := stuckInFlight(j, cfg); len(fs) != 0 {
		t.Fatalf("a stalled sampler's last 'waiting' must not page: %+v", fs)
	}
	for _, n := range j.Nodes {
		n.GPUs[0].T = us(29 * time.Second)
	}
	fs, _ := stuckInFlight(j, cfg)
	only(t, fs, incident.KindStuckInFlight)
}

// TestBusyGPUHoldsSpinningPeers: both ranks issued the collective; rank 0's GPU spins in it,
// rank 1's computes at full power for the whole hang window (a kernel that does not end). The
// busy rank is named; it is no pause.
func TestBusyGPUHoldsSpinningPeers(t *testing.T) {
	j := job(30*time.Second, rank(0, 30, 100*time.Millisecond, 0, nil), rank(1, 30, 100*time.Millisecond, 0, nil))
	j.Nodes = map[string]*snapshot.Node{"node0": gpuNode("node0", "waiting"), "node1": gpuNode("node1", "computing")}
	if fs, paused := stuckInFlight(j, DefaultConfig()); len(fs) != 0 || len(paused) != 0 {
		t.Fatalf("neither stuck in flight nor paused: %+v paused %v", fs, paused)
	}
	f := only(t, BusyGPU(j, DefaultConfig()), incident.KindHang)
	if len(f.Culprits) != 1 || f.Culprits[0].Rank != 1 {
		t.Fatalf("want rank 1 named: %+v", f)
	}
	res := Evaluate(j, DefaultConfig(), TimingOK)
	if len(res.Findings) != 1 || res.Findings[0].Culprits[0].Rank != 1 {
		t.Fatalf("one finding naming rank 1: %+v", res.Findings)
	}
}

// stuckInFlight is what the hang engine says of collectives stuck in flight, and the pauses.
func stuckInFlight(j *Job, cfg Config) ([]Finding, []string) {
	h := FindHangs(j, cfg)
	return h.Stuck, h.Paused
}
