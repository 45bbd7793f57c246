package detect

import "github.com/ncclwatch/watchdog/snapshot"

// PyTorch's watchdog lines in the merge: a finding of their own only when no rule found a
// cause, else evidence quoted in the findings of the ranks that stopped.

// torchTimeoutsWithoutCause: PyTorch times out the ranks that waited, so its timeouts are
// a finding of their own only when no rule found a cause (logs without COLL lines, ranks
// missing): the job hangs, and the report says what to log to see why.
func torchTimeoutsWithoutCause(j *Job, cfg Config, fs *findings) {
	if hasCause(fs) {
		return
	}
	for _, f := range torchWatchdog(j, cfg) {
		// The ranks PyTorch's watchdog caught only waited (or saw a remote failure): live,
		// what they witness waits for its root like any witness.
		if !f.witness || witnessStands(j, cfg, &f) {
			fs.rest = append(fs.rest, f)
		}
	}
}

// torchWatchdog is one finding from PyTorch's watchdog lines: its timeouts and its heartbeat
// monitor's stuck watchdog tell of one hang. The one that names a suspect leads (the timeouts
// when both or neither do); the other is its evidence.
func torchWatchdog(j *Job, cfg Config) []Finding {
	timeouts, stuck := torchTimeouts(j, cfg), torchStuck(j, cfg)
	if len(stuck) == 0 {
		return timeouts
	}
	if len(timeouts) == 0 {
		return stuck
	}
	lead, other := &timeouts[0], &stuck[0]
	if len(lead.Culprits) == 0 && len(other.Culprits) > 0 {
		lead, other = other, lead
	}
	lead.addEvidence("%s", other.Summary)
	return []Finding{*lead}
}

// torchTimeoutsAreEvidence: PyTorch's watchdog times out on the ranks that were only
// waiting, which is why those ranks are not the culprits; its lines are quoted in the
// findings about stopped ranks, saying whose they are.
func torchTimeoutsAreEvidence(j *Job, _ Config, fs *findings) {
	for _, group := range fs.causes() {
		for i := range group {
			torchEvidence(j, &group[i])
		}
	}
}

func torchEvidence(j *Job, f *Finding) {
	culprit := map[string]bool{}
	for _, k := range f.culpritKeys {
		culprit[k] = true
	}
	for _, p := range j.Procs {
		for _, e := range p.Events {
			if e.Kind != snapshot.EventTorchTimeout {
				continue
			}
			role := "a waiting rank"
			if culprit[p.Key()] {
				role = "the culprit"
			}
			f.addEvidence("PyTorch's watchdog on %s (%s) timed out at its SeqNum %d: %s", p.Name(), role, e.Code, e.Msg)
			break
		}
	}
}
