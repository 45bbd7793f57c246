package detect

import (
	"sort"

	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
)

// What a mismatch explains: its communicator's stalls, links and late arrivals, the hangs of
// its members elsewhere, message sizes, apparent inversions; one rank's broken step is one
// cause wherever it is seen.

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
			case f.origin == knowledge.NetSize:
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
