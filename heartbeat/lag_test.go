package heartbeat

import (
	"testing"
	"time"
)

// TestLagMeter: a loop that wakes on time has no lag; one starved wake-up is the worst
// lateness for lagWindow, then forgotten; the snapshot carries whole seconds only, so a calm
// machine's jitter never changes it.
func TestLagMeter(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var m lagMeter
	now := t0
	for range 10 {
		m.wake(now, time.Second)
		now = now.Add(time.Second)
	}
	if w := m.worst(now); w != 0 {
		t.Fatalf("on-time loop: worst %s", w)
	}
	now = now.Add(7 * time.Second) // starved: woke 7 s late
	if late := m.wake(now, time.Second); late != 7*time.Second {
		t.Fatalf("late %s, want 7s", late)
	}
	for _, c := range []struct {
		after time.Duration
		want  time.Duration
	}{{time.Second, 7 * time.Second}, {lagWindow - 5*time.Second, 7 * time.Second}, {lagWindow + 5*time.Second, 0}} {
		if w := m.worst(now.Add(c.after)); w != c.want {
			t.Errorf("%s after the late wake-up: worst %s, want %s", c.after, w, c.want)
		}
	}
	for _, c := range []struct {
		lag  time.Duration
		want int64
	}{{0, 0}, {300 * time.Millisecond, 0}, {999 * time.Millisecond, 0}, {time.Second, 1000}, {7500 * time.Millisecond, 7000}} {
		if got := publishedLag(c.lag); got != c.want {
			t.Errorf("publishedLag(%s) = %d, want %d", c.lag, got, c.want)
		}
	}
}
