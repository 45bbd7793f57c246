package live

import (
	"testing"
	"time"
)

// TestLagPeak: a late evaluation widens the windows by its lateness for lagMemory, a later
// worse one replaces it at once, and it is forgotten after.
func TestLagPeak(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var p lagPeak
	steps := []struct {
		at       time.Duration
		observe  time.Duration // <0: none
		wantPeak time.Duration
	}{
		{0, 0, 0},
		{time.Second, 3 * time.Second, 3 * time.Second},
		{2 * time.Second, 100 * time.Millisecond, 3 * time.Second},      // smaller: the peak stays
		{10 * time.Second, 8 * time.Second, 8 * time.Second},            // worse: at once
		{10*time.Second + lagMemory - time.Second, -1, 8 * time.Second}, // still remembered
		{10*time.Second + lagMemory + time.Second, -1, 0},               // forgotten
		{10*time.Second + lagMemory + 2*time.Second, 0, 0},              // calm again
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		if s.observe >= 0 {
			p.observe(now, s.observe)
		}
		if got := p.worst(now); got != s.wantPeak {
			t.Errorf("at %s: worst %s, want %s", s.at, got, s.wantPeak)
		}
	}
}
