package backoff

import (
	"testing"
	"time"
)

// TestNext: waits stay under a cap that doubles per failure up to Max, spread over it (full
// jitter: many clients that failed together do not retry together), and Reset starts over.
func TestNext(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	for i, limit := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		limit *= time.Millisecond
		if d := b.Next(); d < 0 || d > limit {
			t.Errorf("failure %d: wait %s, want within [0, %s]", i+1, d, limit)
		}
	}
	if !b.Failing() {
		t.Error("not failing after failures")
	}
	b.Reset()
	if b.Failing() {
		t.Error("failing after Reset")
	}
	// 1,000 clients at the cap: their waits cover it, not one instant.
	var lo, hi int
	for range 1000 {
		c := Backoff{Base: time.Second, Max: time.Second}
		switch d := c.Next(); {
		case d < 250*time.Millisecond:
			lo++
		case d > 750*time.Millisecond:
			hi++
		}
	}
	if lo < 150 || hi < 150 {
		t.Errorf("of 1,000 waits, %d in the first quarter and %d in the last: not spread over [0, 1s]", lo, hi)
	}
	var zero Backoff
	if d := zero.Next(); d != 0 {
		t.Errorf("zero Backoff waits %s", d)
	}
}
