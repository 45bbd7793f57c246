// Package backoff spaces the retries of many clients of one service apart: capped
// exponential backoff with full jitter. When etcd comes back after an outage, 12,500
// sidecars that all failed at the same moment must not all retry at the same moment: each
// waits a uniform random time up to a cap that doubles per failure, so their retries spread
// over the cap. The cap stays low (seconds) because the service is back within one cap of
// its return, and that is the time the detector is blind.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff is the wait of one client between failed attempts. Set Base and Max; the zero
// value waits nothing.
type Backoff struct {
	// Base is the cap after the first failure; it doubles per failure up to Max.
	Base, Max time.Duration
	failures  int
}

// Next records a failure and returns how long to wait before the next attempt: uniform in
// [0, min(Max, Base x 2^(failures-1))].
func (b *Backoff) Next() time.Duration {
	limit := b.Base
	for i := 0; i < b.failures && limit < b.Max; i++ {
		limit *= 2
	}
	limit = min(limit, b.Max)
	b.failures = min(b.failures+1, 62)
	if limit <= 0 {
		return 0
	}
	return rand.N(limit + 1)
}

// Reset records a success.
func (b *Backoff) Reset() { b.failures = 0 }

// Failing reports whether the last attempt failed.
func (b *Backoff) Failing() bool { return b.failures > 0 }
