package detect

import (
	"errors"

	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
)

// Result is one evaluation of a job.
type Result struct {
	Findings []Finding
	Notes    []string // what could not be judged and how to fix that
	Paused   []string // communicators where all ranks are level and GPUs idle (live)
}

// Evaluate runs every rule, then the explains table (knowledge/explains.csv, merge.go), so
// that each root cause is one finding, with its consequences as evidence, and is paged once.
// The rules are pure functions of the job, so they run at once; the table's steps run in
// their order. Hangs are one engine (FindHangs): the waits-for graph, followed to its roots
// and cycles.
func Evaluate(j *Job, cfg Config, timing Timing) Result {
	var (
		crashes, mism, links, setup, ras, msgs, flight []Finding
		gpu, stragglers, lost, monitoring, diagnostics []Finding
		busyGPUs                                       []Finding
		hangs                                          Hangs
	)
	rules := []func(){
		func() { hangs = FindHangs(j, cfg) },
		func() { crashes = Crash(j, cfg) },
		func() { mism = Mismatch(j) },
		func() { links = Link(j, cfg) },
		func() { setup = append(versionLines(j), duplicateHostnames(j)...) },
		func() { msgs = Messages(j, cfg) },
		func() { ras = RAS(j, cfg) },
		func() { flight = FlightRecorder(j) },
		func() { gpu = GPU(j, cfg) },
		func() { stragglers = Slowdowns(j, cfg, timing) },
		func() { lost = LostNodes(j, cfg) },
		func() { monitoring = Monitoring(j) },
		func() { diagnostics = Diagnostics(j) },
		func() { busyGPUs = BusyGPU(j, cfg) },
	}
	parallel(len(rules), 1, func(i int) { rules[i]() })
	fs := findings{
		crashes:    crashes,
		mism:       mism,
		inversions: hangs.Inversions,
		stalls:     append(hangs.Stalls, busyGPUs...),
		stuck:      hangs.Stuck,
		links:      links,
		errors:     setup,
		ras:        ras,
	}
	// The knowledge table's rows say a message's finding's role.
	fs.add(msgs...)
	// Flight Recorder's analyzer names mismatches and ranks that never joined.
	for _, f := range flight {
		switch f.Kind {
		case incident.KindMismatch:
			fs.mism = append(fs.mism, f)
		case incident.KindCrash:
			fs.crashes = append(fs.crashes, f)
		case incident.KindHang:
			fs.stalls = append(fs.stalls, f)
		default:
			fs.errors = append(fs.errors, f)
		}
	}
	for _, f := range stragglers {
		// A slow link is a link fault, which the explains table weighs with the other links.
		if f.Kind == incident.KindLink {
			fs.links = append(fs.links, f)
		} else {
			fs.rest = append(fs.rest, f)
		}
	}
	for _, rule := range [][]Finding{gpu, lost, monitoring, diagnostics} {
		fs.rest = append(fs.rest, rule...)
	}
	explain(j, cfg, &fs)
	r := Result{Findings: fs.all(), Notes: timingNotes(timing), Paused: hangs.Paused}
	gradeWaits(j, cfg.HangConfig, r.Findings)
	if err := errors.Join(knowledge.MessagesErr, knowledge.ExplainsErr); err != nil {
		r.Notes = append(r.Notes, "part of the knowledge tables was left out, so some messages or explanations are not judged: "+err.Error())
	}
	sortFindings(r.Findings)
	return r
}

// timingNotes says why arrival lag was not judged, and how to make it judgeable.
func timingNotes(timing Timing) []string {
	switch timing {
	case TimingNone:
		return []string{"NCCL lines carry no timestamps, so arrival lag (stragglers) cannot be measured; " + TimestampHint}
	case TimingCoarse:
		return []string{"NCCL timestamps have whole-second resolution, too coarse for arrival lag; " + TimestampHint}
	}
	return nil
}
