package detect

import "github.com/ncclwatch/watchdog/incident"

// Result is one evaluation of a job.
type Result struct {
	Findings []Finding
	Notes    []string // what could not be judged and how to fix that
	Paused   []string // communicators where all ranks are level and GPUs idle (live)
}

// Evaluate runs every rule, then the merge steps (merge.go), so that each root cause is one
// finding, with its consequences as evidence, and is paged once.
func Evaluate(j *Job, cfg Config, timing Timing) Result {
	stuck, paused := StuckInFlight(j, cfg)
	fs := findings{
		crashes: Crash(j, cfg),
		mism:    Mismatch(j),
		stalls:  append(Hang(j, cfg), P2PMismatch(j, cfg)...),
		stuck:   stuck,
		links:   Link(j, cfg),
		errors:  append(Setup(j, cfg), CUDA(j, cfg)...),
		ras:     RAS(j, cfg),
		nccl:    NCCLErrors(j, cfg),
	}
	// A connection that could not be opened is the setup's fault; one that broke is a
	// dead peer's.
	for _, f := range Connections(j, cfg) {
		if f.Kind == incident.KindCrash {
			fs.crashes = append(fs.crashes, f)
		} else {
			fs.errors = append(fs.errors, f)
		}
	}
	for _, rule := range [][]Finding{GPU(j, cfg), Straggler(j, cfg, timing), LostNodes(j, cfg), Monitoring(j), Diagnostics(j)} {
		fs.rest = append(fs.rest, rule...)
	}
	for _, step := range mergeSteps {
		step(j, cfg, &fs)
	}
	r := Result{Findings: fs.all(), Notes: timingNotes(timing), Paused: paused}
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
