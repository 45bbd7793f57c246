package heartbeat

import (
	"sync"
	"time"
)

// lagWindow is how long a sidecar remembers how late its loops ran: the snapshot says the
// worst lateness of that window, so that one starved moment widens the detector's windows
// for as long as its effect (old log reads, a late publish) can still be in what it judges.
const lagWindow = 30 * time.Second

// lagMeter keeps the worst lateness of one periodic loop (sampling, publishing) over
// lagWindow: a loop that should wake every period and woke later was starved of CPU (a
// data loader on every core) or blocked. Bounded: one slot per few seconds.
type lagMeter struct {
	mu    sync.Mutex
	slots [lagSlots]lagSlot
	prev  time.Time // the loop's previous wake-up
}

const lagSlots = 8

type lagSlot struct {
	at    time.Time // start of the slot's span
	worst time.Duration
}

// wake records a wake-up of a loop that should wake every period, and returns how late it
// was (0 on the first).
func (m *lagMeter) wake(now time.Time, period time.Duration) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var late time.Duration
	if !m.prev.IsZero() && period > 0 {
		late = max(0, now.Sub(m.prev)-period)
	}
	m.prev = now
	m.observeLocked(now, late)
	return late
}

func (m *lagMeter) observeLocked(now time.Time, late time.Duration) {
	span := lagWindow / lagSlots
	i := int(now.UnixNano()/int64(span)) % lagSlots
	s := &m.slots[i]
	if now.Sub(s.at) >= span {
		s.at, s.worst = now.Truncate(span), 0
	}
	s.worst = max(s.worst, late)
}

// worst is the worst lateness seen within lagWindow before now.
func (m *lagMeter) worst(now time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var w time.Duration
	for _, s := range m.slots {
		if now.Sub(s.at) < lagWindow {
			w = max(w, s.worst)
		}
	}
	return w
}

// publishedLag is a lag as the snapshot carries it: whole seconds (in ms), 0 below one, so
// that the jitter of a calm machine never changes the snapshot (an unchanged one is not
// written again).
func publishedLag(d time.Duration) int64 {
	return int64(d/time.Second) * 1000
}
