package demo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// machineProbe measures how late this process's timers fire: on a machine too busy for the
// demo (a CPU hog on every core, a load far above the cores), the simulated ranks run late
// too, and a scenario that went wrong may be the machine's doing rather than the
// detector's. It keeps one sample per tick, bounded.
type machineProbe struct {
	every time.Duration

	mu      sync.Mutex
	samples []lateSample
}

type lateSample struct {
	at   time.Time
	late time.Duration
}

// maxProbeSamples bounds the probe: ten minutes at 20 ms.
const maxProbeSamples = 30000

func newMachineProbe(every time.Duration) *machineProbe { return &machineProbe{every: every} }

// run samples until ctx ends.
func (p *machineProbe) run(ctx context.Context) {
	prev := time.Now()
	for {
		t := time.NewTimer(p.every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case now := <-t.C:
			late := max(0, now.Sub(prev)-p.every)
			// time.Now after the wake: a timer that fired on time but whose goroutine ran
			// late is late too.
			late = max(late, time.Since(prev)-p.every)
			prev = time.Now()
			p.mu.Lock()
			if len(p.samples) >= maxProbeSamples {
				p.samples = p.samples[len(p.samples)/2:]
			}
			p.samples = append(p.samples, lateSample{at: prev, late: late})
			p.mu.Unlock()
		}
	}
}

// lateness is the 99th percentile and the worst of the timer lateness between from and to.
func (p *machineProbe) lateness(from, to time.Time) (p99, worst time.Duration) {
	p.mu.Lock()
	var ls []time.Duration
	for _, s := range p.samples {
		if !s.at.Before(from) && !s.at.After(to) {
			ls = append(ls, s.late)
		}
	}
	p.mu.Unlock()
	if len(ls) == 0 {
		return 0, 0
	}
	slices.Sort(ls)
	return ls[len(ls)*99/100], ls[len(ls)-1]
}

// tolerance is the timer lateness (99th percentile) a scenario stands: a fifth of its step,
// the smallest delay it must tell from noise (its straggler's is a fifth of a step).
func (sc Scenario) tolerance() time.Duration { return sc.StepTime / 5 }

// unjudged says, for a scenario that went wrong on a machine too slow for it, that it
// could not be judged and why ("" when the machine kept up: then the failure stands). Too
// slow is timers late beyond the scenario's tolerance at the 99th percentile, or the
// simulated job itself behind its schedule by more than that: then its ranks look still or
// late while nothing is wrong with them.
func unjudged(sc Scenario, p99, worst, simBehind time.Duration) string {
	tol := sc.tolerance()
	if p99 <= tol && simBehind <= tol {
		return ""
	}
	return fmt.Sprintf("this machine was too slow for it: the simulated job fell %s behind its schedule, timers ran %s late at the 99th percentile (worst %s), where the scenario stands %s; what it saw may be the machine's doing, not the job's",
		simBehind.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond), tol)
}
