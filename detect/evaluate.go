package detect

import "github.com/ncclwatch/watchdog/incident"

// Result is one evaluation of a job.
type Result struct {
	Findings []Finding
	Notes    []string // what could not be judged and how to fix that
	Paused   []string // communicators where all ranks are level and GPUs idle (live)
}

// Evaluate runs every rule, then the merge steps (merge.go), so that each root cause is one
// finding, with its consequences as evidence, and is paged once. The rules are pure
// functions of the job, so they run at once; the merge steps run in their order.
func Evaluate(j *Job, cfg Config, timing Timing) Result {
	var (
		stuck, crashes, mism, hangs, p2p, links, setup, cuda, ras, nccl, conns, silent, store []Finding
		gpu, stragglers, lost, monitoring, diagnostics, stray, flight, collnet                []Finding
		inversions, doneHangs, waits, busyGPUs                                                []Finding
		paused                                                                                []string
	)
	rules := []func(){
		func() { stuck, paused = StuckInFlight(j, cfg) },
		func() { crashes = Crash(j, cfg) },
		func() { mism = Mismatch(j) },
		func() { hangs = Hang(j, cfg) },
		func() { p2p = P2PMismatch(j, cfg) },
		func() { links = Link(j, cfg) },
		func() { setup = Setup(j, cfg) },
		func() { cuda = CUDA(j, cfg) },
		func() { ras = RAS(j, cfg) },
		func() { nccl = NCCLErrors(j, cfg) },
		func() { silent = SilentInitFailure(j, cfg) },
		func() { store = StoreFailures(j, cfg) },
		func() { flight = FlightRecorder(j) },
		func() { conns = Connections(j, cfg) },
		func() { gpu = GPU(j, cfg) },
		func() { stragglers = Slowdowns(j, cfg, timing) },
		func() { lost = LostNodes(j, cfg) },
		func() { monitoring = Monitoring(j) },
		func() { diagnostics = Diagnostics(j) },
		func() { inversions = OrderInversion(j, cfg) },
		func() { doneHangs = CompletionHang(j, cfg) },
		func() { waits = StuckWaits(j, cfg) },
		func() { busyGPUs = BusyGPU(j, cfg) },
		func() { stray = StrayAllocator(j, cfg) },
		func() { collnet = CollNet(j, cfg) },
	}
	parallel(len(rules), 1, func(i int) { rules[i]() })
	fs := findings{
		crashes:    crashes,
		mism:       mism,
		inversions: inversions,
		stalls:     append(append(append(doneHangs, hangs...), busyGPUs...), p2p...),
		stuck:      append(waits, stuck...),
		links:      links,
		errors:     append(append(setup, cuda...), silent...),
		ras:        ras,
		nccl:       nccl,
	}
	// A connection that could not be opened is the setup's fault; one that broke is a
	// dead peer's; a unique id never published is a rank that stopped.
	for _, f := range append(append(conns, store...), flight...) {
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
	for _, f := range collnet {
		// A CollNet set-up NCCL fell back from is no cause that others follow from.
		if f.Severity == incident.SeverityWarning {
			fs.rest = append(fs.rest, f)
		} else {
			fs.errors = append(fs.errors, f)
		}
	}
	for _, f := range stragglers {
		// A slow link is a link fault, which the merge steps weigh with the other links.
		if f.Kind == incident.KindLink {
			fs.links = append(fs.links, f)
		} else {
			fs.rest = append(fs.rest, f)
		}
	}
	for _, rule := range [][]Finding{gpu, lost, monitoring, diagnostics, stray} {
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
