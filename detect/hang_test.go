package detect

import (
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

func TestHangWaitsForTheWindow(t *testing.T) {
	cfg := DefaultConfig()
	period := 100 * time.Millisecond
	mk := func(now time.Duration) []Finding {
		return FindHangs(job(now, rank(0, 30, period, 0, nil), rank(1, 27, period, 0, nil), rank(2, 30, period, 0, nil)), cfg).Stalls
	}
	// Ops stopped at 3 s; the window is max(10 s, 4 × p99 gap 100 ms) = 10 s.
	if fs := mk(3*time.Second + 9*time.Second); len(fs) != 0 {
		t.Fatalf("hang before the window: %+v", fs)
	}
	f := only(t, mk(3*time.Second+11*time.Second), incident.KindHang)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.Seq != 28 || f.Victims != 2 {
		t.Fatalf("culprits %v seq %d victims %d; want rank 1, seq 28, 2 victims", got, f.Seq, f.Victims)
	}
}

func TestHangWindowAdaptsToSlowCommunicators(t *testing.T) {
	cfg := DefaultConfig()
	// One op every 5 s: 4 × p99 gap = 20 s > the 10 s floor.
	j := job(150*time.Second+15*time.Second, rank(0, 30, 5*time.Second, 0, nil), rank(1, 29, 5*time.Second, 0, nil))
	if w := cfg.HangWindow(j.Groups[0]); w != 20*time.Second {
		t.Fatalf("window %s, want 20s", w)
	}
	if fs := FindHangs(j, cfg).Stalls; len(fs) != 0 {
		t.Fatalf("hang inside an adapted window: %+v", fs)
	}
}

func TestOneHangFindingPerCulpritAcrossCommunicators(t *testing.T) {
	a, b := rank(0, 30, 100*time.Millisecond, 0, nil), rank(1, 20, 100*time.Millisecond, 0, nil)
	for _, p := range []*Proc{a, b} {
		second := p.Comms[0]
		second.ID = "0xc0ffee/s1c7"
		p.Comms = append(p.Comms, second)
	}
	fs := FindHangs(job(20*time.Second, a, b), DefaultConfig()).Stalls
	f := only(t, fs, incident.KindHang)
	if !strings.Contains(f.Summary, "stalled 2 communicators") {
		t.Fatalf("summary %q", f.Summary)
	}
}
