package detect

import "github.com/ncclwatch/watchdog/incident"

// The reasoners of the explains table (knowledge/explains.csv): the steps no row can say,
// because they judge against the logs or order by time.

// levelInLogs reports a communicator whose members' logs show the same collective count.
func levelInLogs(j *Job, hash string) bool {
	for _, g := range j.Groups {
		if !sameHash(g.ID, hash) || len(g.Members) < 2 {
			continue
		}
		for _, m := range g.Members[1:] {
			if m.Comm.Count != g.Members[0].Comm.Count {
				return false
			}
		}
		return g.Members[0].Comm.Count > 0
	}
	return false
}

// findTeardown: when a job is killed (after a hang, by its launcher after one rank failed,
// by the scheduler) every rank dies within a second or two. Those deaths, however many, are
// one event; it is found before the steps that merge deaths one by one, and folded by
// teardownFoldsIntoItsCause.
func findTeardown(j *Job, cfg Config, fs *findings) {
	t, ok := teardownOf(j, fs.crashes, cfg.TeardownConfig)
	if !ok {
		return
	}
	fs.teardown = map[string]bool{}
	for _, i := range t.deaths {
		for _, k := range fs.crashes[i].culpritKeys {
			fs.teardown[k] = true
		}
	}
	fs.torn = Teardown{Ranks: len(t.deaths), Hosts: t.hosts, First: t.first, Last: t.last}
}

// teardownFoldsIntoItsCause: the teardown is a consequence of the root cause that came
// before it (a mismatch, a stall, a crash, an error NCCL printed, a link fault): one line
// of that finding's evidence, however many ranks died; it runs before errorsExplainFailures
// so that an error's teardown is that one line too, not a "then:" per rank. Without one,
// the likeliest of its deaths is the cause, as far as this evaluation sees (firstToFail),
// and the finding is marked so that a live Lifecycle folds it into an incident already open
// for the job instead.
func teardownFoldsIntoItsCause(_ *Job, _ Config, fs *findings) {
	if fs.teardown == nil {
		return
	}
	inTeardown := func(f *Finding) bool { return len(f.culpritKeys) == 1 && fs.teardown[f.culpritKeys[0]] }
	var cause *Finding
	for _, group := range [][]Finding{fs.mism, fs.inversions, fs.stalls, fs.crashes, fs.errors, fs.links} {
		for i := range group {
			f := &group[i]
			if f.Kind == incident.KindCrash && inTeardown(f) || f.FaultAt.After(fs.torn.First) ||
				f.Severity != incident.SeverityCritical {
				continue
			}
			if cause == nil || earlier(f, cause) {
				cause = f
			}
		}
	}
	torn := fs.torn
	if cause == nil {
		for i := range fs.crashes {
			if f := &fs.crashes[i]; inTeardown(f) && (cause == nil || firstToFail(f, cause)) {
				cause = f
			}
		}
		if cause == nil {
			return
		}
		cause.Teardown = &torn
		if cause.exitOnly {
			cause.addEvidence("nothing but its exit says it failed (no peer, no launcher reported it): the job may have been stopped from outside (scheduler, preemption) or ended without destroy_process_group")
		}
	}
	cause.addEvidence("%s", torn.Evidence())
	kept := fs.crashes[:0]
	for i := range fs.crashes {
		// By identity: a cause of another kind may share a crash's key (both "rank:").
		if f := &fs.crashes[i]; !inTeardown(f) || f == cause {
			kept = append(kept, *f)
		}
	}
	fs.crashes = kept
}

// firstToFail orders the deaths of a teardown by how likely each started it: a death a peer
// or the launcher reported as a failure (torchrun names the rank whose failure made it kill
// the rest) before one known only from its exit, whose order within a second says little
// (each node's liveness check runs on its own); then the earlier; then one that was behind
// its peers; then the lower rank.
func firstToFail(a, b *Finding) bool {
	switch {
	case a.exitOnly != b.exitOnly:
		return !a.exitOnly
	case !a.FaultAt.Equal(b.FaultAt):
		return earlier(a, b)
	case (a.Seq > 0) != (b.Seq > 0):
		return a.Seq > 0
	}
	return firstRank(a) < firstRank(b)
}

// earlier orders findings by when their fault began; an unknown start sorts last.
func earlier(a, b *Finding) bool {
	return !a.FaultAt.IsZero() && (b.FaultAt.IsZero() || a.FaultAt.Before(b.FaultAt))
}

// deathAndStallOfOneRank: a rank that dies stops progressing, and a rank that hangs is
// killed at last, so a death and a stall of one rank are one root cause. The order says
// which: a rank that died and therefore stopped is a crash; a rank that hung and was killed
// well after (PyTorch's timeout, the launcher) is a hang.
func deathAndStallOfOneRank(_ *Job, cfg Config, fs *findings) {
	byCulprit := map[string]int{}
	for i := range fs.crashes {
		for _, k := range fs.crashes[i].culpritKeys {
			byCulprit[k] = i
		}
	}
	killed := make([]bool, len(fs.crashes))
	kept := fs.stalls[:0]
	for _, f := range fs.stalls {
		if len(f.culpritKeys) == 1 {
			if ci, ok := byCulprit[f.culpritKeys[0]]; ok {
				c := &fs.crashes[ci]
				if diedLongAfter(c, &f, cfg) {
					if !fs.teardown[f.culpritKeys[0]] { // else the teardown's line says it
						f.addEvidence("then: %s", c.Summary)
					}
					killed[ci] = true
				} else {
					absorb(c, &f)
					if c.Comm == "" || (f.Kind == incident.KindHang && c.Seq == 0) {
						c.Comm, c.Seq = f.Comm, f.Seq
					}
					if c.FaultAt.IsZero() {
						c.FaultAt = f.FaultAt
					}
					continue
				}
			}
		}
		kept = append(kept, f)
	}
	fs.stalls = kept
	fs.crashes = without(fs.crashes, killed)
}

// diedLongAfter says whether a rank's death came well after it stopped progressing: then the
// stall is the root cause and the death its consequence.
func diedLongAfter(crash, stall *Finding, cfg Config) bool {
	if crash.FaultAt.IsZero() || stall.FaultAt.IsZero() {
		return false
	}
	return crash.FaultAt.Sub(stall.FaultAt) > cfg.HangFloor
}
