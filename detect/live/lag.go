package live

import "time"

// How late the detector's own evaluations run: the worst lag seen lately widens every job's
// windows (lagPeak), and the dead-man's check of deliveries (undelivered).

// undelivered is implemented by the Alerts that know which open incidents no notifier
// delivered in time (alert.Dispatcher): the dead-man's check.
type undelivered interface {
	Undelivered() (ids []string, since time.Time)
}

// lagPeak keeps the worst lag seen lately: a new worst replaces it at once, and it decays
// to the current lag once lagMemory has passed since it was seen.
type lagPeak struct {
	peak time.Duration
	at   time.Time
}

// lagMemory is how long a late evaluation keeps widening the windows: the snapshots it
// judged late stay in the state that long.
const lagMemory = 30 * time.Second

func (p *lagPeak) observe(now time.Time, lag time.Duration) {
	if lag >= p.peak || now.Sub(p.at) > lagMemory {
		p.peak, p.at = lag, now
	}
}

func (p *lagPeak) worst(now time.Time) time.Duration {
	if now.Sub(p.at) > lagMemory {
		return 0
	}
	return p.peak
}
