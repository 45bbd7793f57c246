package detect

import (
	"github.com/ncclwatch/watchdog/incident"
)

// findings holds one evaluation's findings by the part they play in merging.
type findings struct {
	crashes    []Finding
	mism       []Finding
	inversions []Finding // ranks that called two communicators' collectives in another order
	stalls     []Finding // hangs, then point-to-point mismatches: ranks that stopped
	stuck      []Finding
	links      []Finding
	// errors are the causes NCCL printed itself: the job's setup (GPUs, versions, /dev/shm,
	// interfaces, connections that could not be opened) and CUDA failures.
	errors []Finding
	ras    []Finding // NCCL RAS's view, until it is checked against the logs
	nccl   []Finding // NCCL errors no rule explains: reported only when nothing else is
	rest   []Finding // GPU, straggler, lost node, monitoring, NCCL's own checks
	// teardown holds the host:pid of the deaths of the job's teardown (findTeardown).
	teardown map[string]bool
	torn     Teardown
}

// all lists what the steps kept, in the order that settles sortFindings' ties.
func (fs *findings) all() []Finding {
	var out []Finding
	for _, group := range [][]Finding{fs.crashes, fs.mism, fs.inversions, fs.stalls, fs.stuck, fs.links, fs.errors, fs.ras, fs.rest} {
		out = append(out, group...)
	}
	return out
}

// mismatchByComm indexes the mismatch findings by communicator.
func (fs *findings) mismatchByComm() map[string]*Finding {
	byComm := map[string]*Finding{}
	for i := range fs.mism {
		byComm[fs.mism[i].Comm] = &fs.mism[i]
	}
	return byComm
}

// causes are the findings that name a root cause other findings may follow from.
func (fs *findings) causes() [][]Finding {
	return [][]Finding{fs.crashes, fs.mism, fs.inversions, fs.stalls, fs.errors}
}

// A mergeStep moves consequences into the finding of the root cause that explains them.
type mergeStep func(j *Job, cfg Config, fs *findings)

// mergeSteps run top to bottom; each sees only what the steps above it kept.
var mergeSteps = []mergeStep{
	rasMeetsTheLogs,                 // RAS's skew is checked against the ranks' own logs, then judged with them
	witnessesFoldIntoTheirRoot,      // what one rank saw of another's failure is that root's evidence
	findTeardown,                    // most ranks dying at once is the job's teardown
	measuredSupersedesInferred,      // what the plugin measured replaces what logs suggested about one cause
	oneMismatchPerCulprit,           // one rank's broken step seen on two communicators (a Flight Recorder dump's and the live one) is one cause
	mismatchExplainsItsCommunicator, // a mismatch explains the stalls, slow links and late arrivals on its communicator
	mismatchExplainsInversions,      // a rank that skipped or swapped an op is out of step on its communicator, not out of order
	stoppedRankExplainsNeighbours,   // a rank that stopped, died or issues late explains the slow links it touches
	deathAndStallOfOneRank,          // a death and a stall of one rank are one cause; the order says which
	versionsExplainSizes,            // ranks of different NCCL versions disagree on message sizes: one cause
	teardownFoldsIntoItsCause,       // the teardown is one line of evidence of what came before it
	silentInitEchoesAnError,         // an init that failed without a WARN echoes the error another process printed
	errorsExplainFailures,           // an error NCCL printed explains the deaths, stalls and init hangs that follow it
	laterDeathsFoldIntoFirstCause,   // deaths after the job's first root cause are its consequences
	stuckFollowsItsCause,            // a stuck collective follows a culprit or a link fault on its nodes, else all are one cause
	ncclErrorsWithoutCause,          // an NCCL error no rule explains is reported, never a clean bill
	torchTimeoutsWithoutCause,       // PyTorch's timeouts alone say the job hangs, when no rule named why
	torchTimeoutsAreEvidence,        // PyTorch's timeout lines are evidence, not culprits
}

// hasCause reports a critical finding: a root cause the job's failure is explained by.
func hasCause(fs *findings) bool {
	for _, f := range fs.all() {
		if f.Severity == incident.SeverityCritical {
			return true
		}
	}
	return false
}

// rasMeetsTheLogs: RAS counts launched operations while the ranks run, so a skew it
// reports is judged against the ranks' own logs where they have the communicator. A
// rank the logs already name is one cause (RAS is evidence); a communicator whose logged
// counts are level was only caught between two launches; the rest are judged as hangs
// and deaths of their own.
func rasMeetsTheLogs(j *Job, _ Config, fs *findings) {
	for _, r := range fs.ras {
		if f := sameCulprit(r, fs.stalls, fs.crashes); f != nil {
			absorb(f, &r)
			continue
		}
		if r.Kind == incident.KindHang && levelInLogs(j, r.Comm) {
			continue
		}
		if r.Kind == incident.KindCrash {
			fs.crashes = append(fs.crashes, r)
		} else {
			fs.stalls = append(fs.stalls, r)
		}
	}
	fs.ras = nil
}

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

// sameCulprit finds a finding that names one of f's culprit processes.
func sameCulprit(f Finding, groups ...[]Finding) *Finding {
	for _, g := range groups {
		for i := range g {
			for _, a := range g[i].culpritKeys {
				for _, b := range f.culpritKeys {
					if a == b {
						return &g[i]
					}
				}
			}
			if g[i].Key == f.Key {
				return &g[i]
			}
		}
	}
	return nil
}

// stoppedRankExplainsNeighbours: once a rank has stopped issuing, skipped a send or
// receive, or died, its peers' send steps to it take long (a slow "link" to a rank that no
// longer receives): measured slow links that touch it fold into its finding. (Ranks queued
// behind it are the waits-for graph's: FindHangs names only roots.)
func stoppedRankExplainsNeighbours(_ *Job, _ Config, fs *findings) {
	var causes []*Finding
	for _, group := range []*[]Finding{&fs.crashes, &fs.stalls, &fs.rest} {
		for i := range *group {
			f := &(*group)[i]
			// A host that issues late (starved of CPU, stalling) also runs its network
			// proxy late: the slow sends measured from it are its doing, not its NIC's.
			lateHost := f.Kind == incident.KindStraggler && (f.Cause == incident.CauseHostSlow || f.Cause == incident.CauseHostStalled)
			if f.Kind == incident.KindCrash || f.Kind == incident.KindHang || f.Kind == incident.KindP2PMismatch || lateHost {
				causes = append(causes, f)
			}
		}
	}
	kept := fs.links[:0]
	for _, f := range fs.links {
		c := ownCause(f, causes)
		if c != nil && c.Kind == incident.KindStraggler && (len(f.culpritKeys) == 0 || c.culpritKeys[0] != f.culpritKeys[0]) {
			c = nil // a late host explains what it sends, not what others send to it
		}
		if c != nil && f.measured {
			absorb(c, &f)
			continue
		}
		kept = append(kept, f)
	}
	fs.links = kept
}

// ownCause is the cause among causes that names one of f's culprit processes.
func ownCause(f Finding, causes []*Finding) *Finding {
	for _, c := range causes {
		for _, a := range c.culpritKeys {
			for _, b := range f.culpritKeys {
				if a == b {
					return c
				}
			}
		}
	}
	return nil
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

// laterDeathsFoldIntoFirstCause: once a job has a root cause, PyTorch's watchdog aborts the
// ranks that waited on it and the launcher kills the rest. Those deaths come after it, or
// with it (two ranks of one node seen dead by the same liveness check), and are its
// consequences: folded into it, never paged again.
func laterDeathsFoldIntoFirstCause(_ *Job, _ Config, fs *findings) {
	var first *Finding
	for _, group := range [][]Finding{fs.mism, fs.inversions, fs.stalls, fs.crashes} {
		for i := range group {
			f := &group[i]
			if f.FaultAt.IsZero() {
				continue
			}
			if first == nil || f.FaultAt.Before(first.FaultAt) ||
				f.FaultAt.Equal(first.FaultAt) && f.Kind == incident.KindCrash && first.Kind == incident.KindCrash && firstToFail(f, first) {
				first = f
			}
		}
	}
	if first == nil {
		return
	}
	later := make([]bool, len(fs.crashes))
	for i := range fs.crashes {
		c := &fs.crashes[i]
		if c != first && !c.FaultAt.IsZero() && !c.FaultAt.Before(first.FaultAt) {
			first.addEvidence("then: %s", c.Summary)
			later[i] = true
		}
	}
	fs.crashes = without(fs.crashes, later)
}

// stuckFollowsItsCause: a collective that every rank entered and none finished is what the
// rest of a job looks like around a culprit rank (every other communicator waits, level and
// spinning), or what a link fault on its nodes does: then it is evidence of that cause.
// Without either, the stuck communicators share one cause (the fabric, a GPU) and are
// reported once, under the one stuck first (then the largest).
func stuckFollowsItsCause(_ *Job, _ Config, fs *findings) {
	var causes []*Finding
	for _, group := range fs.causes() {
		for i := range group {
			causes = append(causes, &group[i])
		}
	}
	var kept []Finding
	waiting := 0
	for _, st := range fs.stuck {
		if l := linkOn(fs.links, st.culpritKeys); l != nil {
			absorb(l, &st)
			continue
		}
		if len(causes) > 0 {
			waiting++
			continue
		}
		if len(kept) == 0 {
			kept = append(kept, st)
			continue
		}
		first := &kept[0]
		if st.FaultAt.Before(first.FaultAt) || (st.FaultAt.Equal(first.FaultAt) && st.Victims > first.Victims) {
			st.Evidence = append(st.Evidence, "also stuck: "+first.Summary)
			kept[0] = st
		} else {
			first.addEvidence("also stuck: %s", st.Summary)
		}
	}
	if waiting > 0 {
		causes[0].addEvidence("%d other communicator(s) are level and wait behind it, their GPUs spinning", waiting)
	}
	fs.stuck = kept
}

// measuredSupersedesInferred: a hang the plugin proved (a rank whose GPU never started the
// op its peers run), a straggler whose lag it measured on the GPUs, each replaces the
// finding another rule drew from logs or GPU power about the same root cause (same key:
// BusyGPU's, Straggler's): one incident, the measured one, with the inferred one as
// evidence. (The plugin's and the logs' views of one wait are one root in FindHangs.)
func measuredSupersedesInferred(_ *Job, _ Config, fs *findings) {
	for _, group := range []*[]Finding{&fs.stalls, &fs.rest} {
		var kept, inferred []Finding
		for _, f := range *group {
			if !f.measured && findMeasured(*group, f.Key) != nil {
				inferred = append(inferred, f)
				continue
			}
			kept = append(kept, f)
		}
		for i := range inferred {
			absorb(findMeasured(kept, inferred[i].Key), &inferred[i])
		}
		*group = kept
	}
}

func findMeasured(fs []Finding, key string) *Finding {
	for i := range fs {
		if fs[i].Key == key && fs[i].measured {
			return &fs[i]
		}
	}
	return nil
}

// absorb records a consequence in the finding of its root cause.
func absorb(cause, consequence *Finding) {
	cause.addEvidence("also: %s", consequence.Summary)
}

// without returns the findings not marked, in order.
func without(fs []Finding, marked []bool) []Finding {
	var out []Finding
	for i := range fs {
		if !marked[i] {
			out = append(out, fs[i])
		}
	}
	return out
}

// linkOn returns a link finding that touches any of the given processes.
func linkOn(links []Finding, procKeys []string) *Finding {
	for i := range links {
		for _, a := range links[i].culpritKeys {
			for _, b := range procKeys {
				if a == b {
					return &links[i]
				}
			}
		}
	}
	return nil
}
