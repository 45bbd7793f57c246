package live

import (
	"slices"
	"sync"
	"time"
)

// How fast etcd answers the detector: its round trips (the probe, the term's reads and
// heartbeat writes, the incident writes) are timed; an etcd that answers, but with a p99
// above Options.EtcdSlow in every window over Options.EtcdSlowFor, is a monitoring incident
// (detect.EtcdSlow): the watchdog sees late, and says so to the operators.

// etcdRoundTrips keeps the latest round trips, bounded, and whether their p99 has stayed
// above the threshold. Its own lock: the watch loop, the term and the keep-alive time their
// calls outside the detector's.
type etcdRoundTrips struct {
	mu        sync.Mutex
	ring      [etcdRoundTripsKept]etcdRoundTrip
	n         int           // round trips seen (the next goes to ring[n%len])
	slowSince time.Time     // the first slow round trip of the slow spell (zero: none)
	slowUntil time.Time     // its last so far
	p99       time.Duration // of the last window judged, of count round trips
	count     int
}

type etcdRoundTrip struct {
	at   time.Time
	took time.Duration
}

// etcdRoundTripsKept bounds the round trips a window is judged on: the newest this many.
const etcdRoundTripsKept = 256

// etcdMinRoundTrips is the fewest round trips a window needs to be judged: fewer (etcd
// unreachable, or a window shorter than a probe) leave the verdict as it was.
const etcdMinRoundTrips = 3

// observe records a round trip that succeeded. Failed ones are not latencies: two failed
// probes in a row are the unreachable incident's.
func (e *etcdRoundTrips) observe(at time.Time, took time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ring[e.n%len(e.ring)] = etcdRoundTrip{at: at, took: took}
	e.n++
}

// etcdVerdict is one judgement of the latest window.
type etcdVerdict struct {
	p99     time.Duration // of the last window judged (0: none yet)
	count   int           // its round trips
	slowFor time.Duration // how long the slow spell has lasted: slow round trips, no fast window
	since   time.Time     // since when (zero: no spell)
}

// judge takes the p99 of the round trips within window before now. Above threshold it
// starts a slow spell at the window's first slow round trip, or continues one to its last;
// at or below it ends one; too few round trips to say leave it as it was. The spell is as
// long as slow round trips kept coming with no fast window between them: one slow round
// trip is none, a burst is as long as it lasted.
func (e *etcdRoundTrips) judge(now time.Time, window, threshold time.Duration) etcdVerdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	var took []time.Duration
	var firstSlow, lastSlow time.Time
	for i := range min(e.n, len(e.ring)) {
		r := e.ring[i]
		if now.Sub(r.at) > window || r.at.After(now) {
			continue
		}
		took = append(took, r.took)
		if r.took > threshold {
			if firstSlow.IsZero() || r.at.Before(firstSlow) {
				firstSlow = r.at
			}
			if r.at.After(lastSlow) {
				lastSlow = r.at
			}
		}
	}
	if len(took) >= etcdMinRoundTrips {
		e.p99, e.count = p99(took), len(took)
		switch {
		case e.p99 <= threshold:
			e.slowSince, e.slowUntil = time.Time{}, time.Time{}
		case e.slowSince.IsZero():
			e.slowSince, e.slowUntil = firstSlow, lastSlow
		default:
			e.slowUntil = lastSlow
		}
	}
	v := etcdVerdict{p99: e.p99, count: e.count}
	if !e.slowSince.IsZero() {
		v.since, v.slowFor = e.slowSince, e.slowUntil.Sub(e.slowSince)
	}
	return v
}

// p99 is the nearest-rank 99th percentile; below 100 values it is the largest.
func p99(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	i := (len(ds)*99 + 99) / 100 // ceil(0.99 n)
	return ds[max(i, 1)-1]
}
