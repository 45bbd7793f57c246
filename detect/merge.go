package detect

import (
	"sort"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
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

// witnessesFoldIntoTheirRoot: what one rank saw of another's failure ("Connection closed by
// remote peer <address>", a remote error) is a witness, not a root: an address names a host,
// and a host runs several ranks (or the address resolves to no host the logs know, or there
// is none). The root it witnessed is known elsewhere: a process the sidecar saw exit, that a
// survivor named or the launcher reported (a crash); an error that tells of a death (an
// OOM); or a rank the others wait for that left or stopped (a hang root). The witness is that
// root's evidence, and dates it if it came first. Live, a witness alone waits witnessGrace
// for its root to show before it stands on its own.
func witnessesFoldIntoTheirRoot(j *Job, cfg Config, fs *findings) {
	hosts := map[string]bool{}
	// Processes that saw a connection closed by its peer: when several died on the host,
	// as one liveness check sees a rank and the peers that aborted on its death, those
	// that saw their connections broken are not the one that broke them.
	observed := map[string]bool{}
	for _, p := range j.Procs {
		hosts[p.Host] = true
		for _, e := range p.Events {
			if e.Kind == snapshot.EventConnClosedRemote {
				observed[p.Key()] = true
			}
		}
	}
	observer := func(f *Finding) bool {
		for _, k := range f.culpritKeys {
			if observed[k] {
				return true
			}
		}
		return false
	}
	hostLevel := func(f *Finding) bool {
		return f.witness && (len(f.Culprits) == 0 || len(f.Culprits) == 1 && f.Culprits[0].Rank < 0)
	}
	kept := fs.crashes[:0]
	var witnesses []Finding
	for _, f := range fs.crashes {
		if hostLevel(&f) {
			witnesses = append(witnesses, f)
			continue
		}
		kept = append(kept, f)
	}
	for _, hf := range witnesses {
		// An address no process's log resolves (loopback, a NAT), or none at all, may lead
		// to any host.
		anyHost := len(hf.Culprits) == 0 || !hosts[hf.Culprits[0].Host]
		on := func(f *Finding) bool {
			return len(f.Culprits) > 0 && (anyHost || f.Culprits[0].Host == hf.Culprits[0].Host)
		}
		var dead *Finding
		for i := range kept {
			k := &kept[i]
			if hostLevel(k) || !on(k) || diedLongAfter(k, &hf, cfg) {
				// A death dated well after what the witness saw is not the one it saw
				// (the launcher killed a rank that had left long before).
				continue
			}
			switch {
			case dead == nil, observer(dead) && !observer(k):
				dead = k
			case observer(k) == observer(dead) && earlier(k, dead):
				dead = k
			}
		}
		if dead == nil {
			dead = deathOf(fs.errors, on)
		}
		if dead == nil {
			dead = stoppedRoot(fs.stalls, on)
		}
		if dead == nil {
			if witnessStands(j, cfg, &hf) {
				kept = append(kept, hf)
			}
			continue
		}
		absorb(dead, &hf)
		if !hf.FaultAt.IsZero() && (dead.FaultAt.IsZero() || hf.FaultAt.Before(dead.FaultAt)) {
			dead.FaultAt = hf.FaultAt
		}
		dead.Victims = max(dead.Victims, hf.Victims)
	}
	fs.crashes = kept
}

// witnessStands says whether a witness with no root to fold into is reported: offline, or
// live once its root had time to show: a death is seen within a second or two, a rank
// that left or stopped once its communicator sat still for the hang floor.
func witnessStands(j *Job, cfg Config, f *Finding) bool {
	return j.Offline || f.FaultAt.IsZero() || j.Now.Sub(f.FaultAt) >= cfg.HangFloor+2*time.Second
}

// deathOf is the error finding that tells of a process's death (its OOM, an error it died
// of) where the witness points, nil when none or several.
func deathOf(errors []Finding, on func(*Finding) bool) *Finding {
	var found *Finding
	for i := range errors {
		e := &errors[i]
		if e.Cause != incident.CauseDied && e.Cause != incident.CauseApplication || !on(e) {
			continue
		}
		if found != nil {
			return nil
		}
		found = e
	}
	return found
}

// stoppedRoot is the one critical hang root where the witness points (a rank that left its
// communicator, stopped or died while the others wait for it), nil when none or several.
func stoppedRoot(stalls []Finding, on func(*Finding) bool) *Finding {
	var found *Finding
	for i := range stalls {
		f := &stalls[i]
		if f.Kind != incident.KindHang || f.Severity != incident.SeverityCritical || !on(f) {
			continue
		}
		if found != nil {
			return nil
		}
		found = f
	}
	return found
}

// errorsExplainFailures: when NCCL printed an error (a link that failed, a CUDA failure,
// a setup it could not work with, a connection it could not open), the processes that then
// died, stopped issuing collectives or never finished init are that error's consequences:
// teardown after the error, aborts, "Connection closed" on the survivors. They fold into
// the error that names their process, else into the job's first error, unless they came
// before it.
func errorsExplainFailures(_ *Job, _ Config, fs *findings) {
	var causes []*Finding
	for i := range fs.errors {
		causes = append(causes, &fs.errors[i])
	}
	for i := range fs.links {
		if fs.links[i].Severity == incident.SeverityCritical {
			causes = append(causes, &fs.links[i])
		}
	}
	if len(causes) == 0 {
		return
	}
	first := causes[0]
	for _, c := range causes[1:] {
		if !c.FaultAt.IsZero() && (first.FaultAt.IsZero() || c.FaultAt.Before(first.FaultAt)) {
			first = c
		}
	}
	explain := func(group []Finding) []Finding {
		var kept []Finding
		for _, f := range group {
			if own := ownCause(f, causes); own != nil {
				absorb(own, &f)
				continue
			}
			if f.FaultAt.IsZero() || first.FaultAt.IsZero() || !f.FaultAt.Before(first.FaultAt) {
				first.addEvidence("then: %s", f.Summary)
				continue
			}
			kept = append(kept, f)
		}
		return kept
	}
	fs.crashes = explain(fs.crashes)
	fs.stalls = explain(fs.stalls)
	fs.stuck = explain(fs.stuck)
	var rest []Finding
	for _, f := range fs.rest {
		if f.Kind == incident.KindHang && strings.HasPrefix(f.Key, "init:") {
			first.addEvidence("then: %s", f.Summary)
			continue
		}
		rest = append(rest, f)
	}
	fs.rest = rest
}

// silentInitEchoesAnError: a process whose init failed with breadcrumbs and no WARN is its
// own cause only when nothing else is; when another process printed the error (a setup
// NCCL cannot work with, a connection it could not open, a link that failed), the silent
// ones failed from it, and they become deaths that the next step folds into it.
func silentInitEchoesAnError(_ *Job, _ Config, fs *findings) {
	var silent, other []Finding
	for _, f := range fs.errors {
		if strings.HasPrefix(f.Key, silentKey) {
			silent = append(silent, f)
		} else {
			other = append(other, f)
		}
	}
	if len(silent) == 0 || (len(other) == 0 && !criticalLink(fs.links)) {
		return
	}
	fs.errors = other
	fs.crashes = append(fs.crashes, silent...)
}

func criticalLink(links []Finding) bool {
	for _, f := range links {
		if f.Severity == incident.SeverityCritical {
			return true
		}
	}
	return false
}

// versionsExplainSizes: two ends that disagree on a message size is what ranks running
// different NCCL versions do, so the size mismatch is the version finding's evidence.
func versionsExplainSizes(_ *Job, _ Config, fs *findings) {
	var versions *Finding
	for i := range fs.errors {
		if strings.HasPrefix(fs.errors[i].Key, "config:version") {
			versions = &fs.errors[i]
			break
		}
	}
	if versions == nil {
		return
	}
	var rest []Finding
	for _, f := range fs.rest {
		if strings.HasPrefix(f.Key, "net-size:") {
			absorb(versions, &f)
			continue
		}
		rest = append(rest, f)
	}
	fs.rest = rest
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

// ncclErrorsWithoutCause: an NCCL error PyTorch surfaced, or a fatal WARN no rule reads,
// is the finding when nothing else is: a failed job is never "no problem found". One that
// only witnessed another rank's failure (a remote error) first waits, live, for that root.
func ncclErrorsWithoutCause(j *Job, cfg Config, fs *findings) {
	if !hasCause(fs) {
		for _, f := range fs.nccl {
			if !f.witness || witnessStands(j, cfg, &f) {
				fs.errors = append(fs.errors, f)
			}
		}
	}
	fs.nccl = nil
}

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

// mismatchExplainsItsCommunicator: ranks that called different collectives wait on each
// other for ever, or run ops of different shapes against each other, so the hang, the
// point-to-point stall, the stuck collective, the slow send steps and the late arrivals on
// a mismatched communicator are the mismatch's doing.
//
// The mismatch's members are stuck inside the mismatched op, so a hang that names one of
// them on another communicator (its GPU never starts the next op there) is the mismatch's
// too; and a message of another size than its receiver expected is what a wrong size does.
func mismatchExplainsItsCommunicator(j *Job, _ Config, fs *findings) {
	byComm := fs.mismatchByComm()
	if len(byComm) == 0 {
		return
	}
	member := map[string]*Finding{} // proc key: the mismatch of a communicator it is in
	for _, g := range j.Groups {
		if m := byComm[g.ID]; m != nil {
			for _, mb := range g.Members {
				member[mb.Proc.Key()] = m
			}
		}
	}
	var first *Finding
	for _, m := range byComm {
		if first == nil || earlier(m, first) || m.FaultAt.Equal(first.FaultAt) && m.Key < first.Key {
			first = m
		}
	}
	stuckIn := func(f *Finding) *Finding {
		var m *Finding
		for _, k := range f.culpritKeys {
			if m = member[k]; m == nil {
				return nil
			}
		}
		return m
	}
	for _, group := range []*[]Finding{&fs.stalls, &fs.stuck, &fs.links, &fs.rest} {
		kept := (*group)[:0]
		for _, f := range *group {
			m := byComm[f.Comm]
			switch {
			case m != nil && f.Comm != "" && (group != &fs.rest || f.Kind == incident.KindStraggler):
			case group == &fs.stalls || group == &fs.stuck:
				m = stuckIn(&f)
			case strings.HasPrefix(f.Key, "net-size:"):
				m = first
			default:
				m = nil
			}
			if m != nil {
				absorb(m, &f)
				continue
			}
			kept = append(kept, f)
		}
		*group = kept
	}
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

// oneMismatchPerCulprit: mismatches that name the same rank process are one root cause
// (a Flight Recorder dump's communicator and the live one, which carry different
// identities, or the same broken step seen on a parent and a split child): the first seen
// leads, the others are its evidence.
func oneMismatchPerCulprit(_ *Job, _ Config, fs *findings) {
	sort.SliceStable(fs.mism, func(a, b int) bool { return earlier(&fs.mism[a], &fs.mism[b]) })
	var kept []Finding
	for _, f := range fs.mism {
		if lead := sameCulprit(f, kept); lead != nil && len(f.culpritKeys) > 0 {
			absorb(lead, &f)
			continue
		}
		kept = append(kept, f)
	}
	fs.mism = kept
}

// mismatchExplainsInversions: a rank that skipped a collective is one position behind on
// that communicator for ever after, so it looks as if it had called the next communicator's
// op first. The mismatch is the cause; the apparent inversion on its communicator follows.
func mismatchExplainsInversions(_ *Job, _ Config, fs *findings) {
	byComm := fs.mismatchByComm()
	kept := fs.inversions[:0]
	for _, inv := range fs.inversions {
		var m *Finding
		for _, c := range inv.comms {
			if m == nil {
				m = byComm[c]
			}
		}
		if m != nil {
			absorb(m, &inv)
			continue
		}
		kept = append(kept, inv)
	}
	fs.inversions = kept
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
