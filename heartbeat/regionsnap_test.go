package heartbeat

import (
	"testing"
	"time"
)

// TestWindowSpansItsTime: per-op durations average over timingWindow whether the regions
// are read every second or every 20 ms.
func TestWindowSpansItsTime(t *testing.T) {
	for _, every := range []time.Duration{20 * time.Millisecond, 250 * time.Millisecond, time.Second, 5 * time.Second} {
		var w window[timedSample]
		t0 := time.Unix(1_700_000_000, 0)
		for at := time.Duration(0); at <= 2*time.Minute; at += every {
			// One op per 10 ms, 4 ms busy each.
			ops := uint64(at / (10 * time.Millisecond))
			w.add(t0.Add(at), timedSample{colls: ops, busy: 4000 * ops})
		}
		a, b, d, ok := w.span()
		if !ok || d < timingWindow-2*sampleGap || d > timingWindow || (b.busy-a.busy)/(b.colls-a.colls) != 4000 {
			t.Errorf("every %s: span %s ok %v, %d ops", every, d, ok, b.colls-a.colls)
		}
	}
}

// TestIssueClockWidens: the plugin's 32-bit issue counter wraps; a process's values read
// at once stay in order across the wrap.
func TestIssueClockWidens(t *testing.T) {
	var c issueClock
	for _, v := range []uint32{5, 1 << 31, 0xfffffff0} {
		c.see(v)
	}
	c.see(3) // wrapped
	if got := []int64{c.at(0xfffffff0), c.at(3), c.at(0)}; got[0] != 0xfffffff0 || got[1] != 1<<32+3 || got[2] != 0 {
		t.Fatalf("widened %v", got)
	}
}
