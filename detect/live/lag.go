package live

import (
	"context"
	"sync"
	"time"
)

// How late the detector's own evaluations run, and the process itself (pulse): the worst
// lag seen lately widens every job's windows (lagPeak), and the dead-man's check of
// deliveries (undelivered).

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

// pulseEvery is how often the pulse wakes.
const pulseEvery = 250 * time.Millisecond

// processLag is how late the pulse woke lately: the whole process paused (SIGSTOP, a
// stalled VM, swapping) or starved of CPU. Unlike the evaluations' lateness it spans terms:
// a pause longer than the lease ends the term it froze, and the next term's evaluations
// run on time while the state they judge is as old as the pause was long.
type processLag struct {
	mu   sync.Mutex
	peak lagPeak
}

// pulse wakes every pulseEvery until ctx ends and records how late it woke.
func (p *processLag) pulse(ctx context.Context) {
	t := time.NewTicker(pulseEvery)
	defer t.Stop()
	prev := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		p.mu.Lock()
		p.peak.observe(now, max(0, now.Sub(prev)-pulseEvery))
		p.mu.Unlock()
		prev = now
	}
}

func (p *processLag) worst(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak.worst(now)
}
