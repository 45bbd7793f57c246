package detect

import (
	"fmt"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Result is one evaluation of a job.
type Result struct {
	Findings []Finding
	Notes    []string // what could not be judged and how to fix that
	Paused   []string // communicators where all ranks are level and GPUs idle (live)
}

// Evaluate runs every rule and merges findings that share a root cause: a mismatch explains
// the hang it causes, a crash the hang of its own ranks, a hang the point-to-point mismatch
// of the same rank, a link fault the collective stuck on it.
func Evaluate(j *Job, cfg Config, timing Timing) Result {
	var r Result
	mism := Mismatch(j)
	hangs := Hang(j, cfg)
	p2p := P2PMismatch(j, cfg)
	crashes := Crash(j, cfg)
	links := Link(j, cfg)
	gpus := GPU(j, cfg)
	stuck, paused := StuckInFlight(j, cfg)
	r.Paused = paused
	straggle := Straggler(j, cfg, timing)
	switch timing {
	case TimingNone:
		r.Notes = append(r.Notes, "NCCL lines carry no timestamps, so arrival lag (stragglers) cannot be measured; "+TimestampHint)
	case TimingCoarse:
		r.Notes = append(r.Notes, "NCCL timestamps have whole-second resolution, too coarse for arrival lag; "+TimestampHint)
	}

	// A mismatch explains the hang and point-to-point stalls on its communicator.
	mismatched := map[string]*Finding{}
	for i := range mism {
		mismatched[mism[i].Comm] = &mism[i]
	}
	absorb := func(into *Finding, f *Finding) {
		into.addEvidence("also: %s", f.Summary)
	}
	var rest []Finding
	for _, f := range append(hangs, p2p...) {
		if m := mismatched[f.Comm]; m != nil {
			absorb(m, &f)
			continue
		}
		rest = append(rest, f)
	}
	// A death and a stall of the same rank are one root cause; which one it is depends on
	// the order: a rank that died and therefore stopped is a crash, a rank that hung and
	// was killed much later (PyTorch's timeout, the launcher) is a hang.
	var kept []Finding
	var crashKept []Finding
	byCulprit := map[string]int{}
	for i := range crashes {
		for _, k := range crashes[i].culpritKeys {
			byCulprit[k] = i
		}
	}
	absorbedCrash := map[int]bool{}
	for _, f := range rest {
		if len(f.culpritKeys) == 1 {
			if ci, ok := byCulprit[f.culpritKeys[0]]; ok {
				c := &crashes[ci]
				if diedLongAfter(c, &f, cfg) {
					f.addEvidence("then: %s", c.Summary)
					absorbedCrash[ci] = true
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
			if f.Kind == incident.KindP2PMismatch {
				if h := findByKey(kept, f.Key, incident.KindHang); h != nil {
					absorb(h, &f)
					continue
				}
			}
		}
		kept = append(kept, f)
	}
	for i, c := range crashes {
		if !absorbedCrash[i] {
			crashKept = append(crashKept, c)
		}
	}
	crashes = crashKept
	// Deaths after the job's first root cause are its consequences (ranks aborted by
	// PyTorch's watchdog, killed by the launcher): folded into it, never paged again.
	mism, kept, crashes = foldLaterDeaths(mism, kept, crashes)
	// A stuck collective is a consequence when the job has a culprit rank (every other
	// communicator then waits, level and spinning), or a link fault on its nodes; otherwise
	// all stuck communicators are one root cause, reported once.
	var stuckKept []Finding
	var causes []*Finding
	for i := range crashes {
		causes = append(causes, &crashes[i])
	}
	for i := range mism {
		causes = append(causes, &mism[i])
	}
	for i := range kept {
		causes = append(causes, &kept[i])
	}
	waiting := 0
	for _, st := range stuck {
		if l := linkOn(links, st.culpritKeys); l != nil {
			absorb(l, &st)
			continue
		}
		if len(causes) > 0 {
			waiting++
			continue
		}
		if len(stuckKept) == 0 {
			stuckKept = append(stuckKept, st)
			continue
		}
		first := &stuckKept[0]
		if st.FaultAt.Before(first.FaultAt) || (st.FaultAt.Equal(first.FaultAt) && st.Victims > first.Victims) {
			st.Evidence = append(st.Evidence, "also stuck: "+first.Summary)
			stuckKept[0] = st
		} else {
			first.addEvidence("also stuck: %s", st.Summary)
		}
	}
	if waiting > 0 {
		causes[0].addEvidence("%d other communicator(s) are level and wait behind it, their GPUs spinning", waiting)
	}
	r.Findings = append(r.Findings, crashes...)
	r.Findings = append(r.Findings, mism...)
	r.Findings = append(r.Findings, kept...)
	r.Findings = append(r.Findings, stuckKept...)
	r.Findings = append(r.Findings, links...)
	r.Findings = append(r.Findings, gpus...)
	r.Findings = append(r.Findings, straggle...)
	r.Findings = append(r.Findings, Diagnostics(j, len(r.Findings) > 0)...)
	for i := range r.Findings {
		torchEvidence(j, &r.Findings[i])
	}
	sortFindings(r.Findings)
	return r
}

// torchEvidence adds PyTorch's own view: its watchdog times out on ranks that were only
// waiting, which is why those ranks are not the culprits.
func torchEvidence(j *Job, f *Finding) {
	switch f.Kind {
	case incident.KindHang, incident.KindMismatch, incident.KindCrash, incident.KindP2PMismatch:
	default:
		return
	}
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

// diedLongAfter says whether a rank's death came well after it stopped progressing: then the
// stall is the root cause and the death its consequence.
func diedLongAfter(crash, stall *Finding, cfg Config) bool {
	if crash.FaultAt.IsZero() || stall.FaultAt.IsZero() {
		return false
	}
	return crash.FaultAt.Sub(stall.FaultAt) > cfg.HangFloor
}

// foldLaterDeaths absorbs every crash that happened after the earliest other root cause of
// the job into that root cause.
func foldLaterDeaths(mism, kept, crashes []Finding) ([]Finding, []Finding, []Finding) {
	var first *Finding
	consider := func(f *Finding) {
		if !f.FaultAt.IsZero() && (first == nil || f.FaultAt.Before(first.FaultAt)) {
			first = f
		}
	}
	for i := range mism {
		consider(&mism[i])
	}
	for i := range kept {
		consider(&kept[i])
	}
	for i := range crashes {
		consider(&crashes[i])
	}
	if first == nil {
		return mism, kept, crashes
	}
	drop := map[int]bool{}
	for i := range crashes {
		c := &crashes[i]
		if c != first && !c.FaultAt.IsZero() && c.FaultAt.After(first.FaultAt) {
			first.addEvidence("then: %s", c.Summary)
			drop[i] = true
		}
	}
	var out []Finding
	for i := range crashes {
		if !drop[i] {
			out = append(out, crashes[i])
		}
	}
	return mism, kept, out
}

func findByKey(fs []Finding, key string, kind incident.Kind) *Finding {
	for i := range fs {
		if fs[i].Key == key && fs[i].Kind == kind {
			return &fs[i]
		}
	}
	return nil
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

// StuckInFlight finds communicators where every rank entered the same collective and none
// moved past the hang window while their GPUs spin: the collective itself does not finish,
// which points at the network path or a GPU. The same picture with idle GPUs is a pause
// (checkpoint, data loader): reported as paused, never as an incident.
func StuckInFlight(j *Job, cfg Config) ([]Finding, []string) {
	if j.Offline {
		return nil, nil
	}
	var out []Finding
	var paused []string
	for _, g := range j.Groups {
		if len(g.Members) < 2 || len(g.Members) < g.NRanks {
			continue
		}
		count := g.Members[0].Comm.Count
		level := count > 0
		for _, m := range g.Members {
			level = level && m.Comm.Count == count
		}
		if !level {
			continue
		}
		ok, still := stalled(j, g, cfg)
		if !ok {
			continue
		}
		waiting, idle, unknown := 0, 0, 0
		for _, m := range g.Members {
			switch gs := gpuOf(j, m.Proc); {
			case gs == nil || gs.State == snapshot.GPUUnknown:
				unknown++
			case gs.State == snapshot.GPUWaiting:
				waiting++
			default:
				idle++
			}
		}
		if waiting == 0 || waiting < len(g.Members)-unknown {
			if idle > 0 {
				paused = append(paused, g.ID)
			}
			continue
		}
		last := g.Members[0].Comm.Last
		f := Finding{Kind: incident.KindStuckInFlight, Severity: incident.SeverityCritical, Comm: g.ID, Seq: count,
			Victims: len(g.Members), Key: fmt.Sprintf("stuck:%s:%d", g.ID, count)}
		op := "its last collective"
		if last != nil {
			op = describeOp(last)
			f.Ops = map[string]incident.Op{"all": Op(last)}
			f.FaultAt = last.T.Time()
		}
		f.Summary = fmt.Sprintf("all %d ranks of communicator %s entered %s at position %d and none completed it for %s while their GPUs spin: suspect the network path or a GPU",
			len(g.Members), shortComm(g.ID), op, count, still.Round(time.Second))
		nodes := map[string]bool{}
		for _, m := range g.Members {
			f.culpritKeys = append(f.culpritKeys, m.Proc.Key())
			if !nodes[m.Proc.Node] {
				nodes[m.Proc.Node] = true
				f.Culprits = append(f.Culprits, m.Proc.Culprit())
			}
			if gs := gpuOf(j, m.Proc); gs != nil {
				f.addEvidence("%s GPU: %s", m.Proc.Name(), describeGPU(gs))
			}
		}
		out = append(out, f)
	}
	return out, paused
}

// Incident renders a finding as a new open incident of a job.
func (f *Finding) Incident(job string, now time.Time) incident.Incident {
	return incident.Incident{
		Key: f.Key, Kind: f.Kind, State: incident.StateOpen, Severity: f.Severity, Job: job, Comm: f.Comm, Seq: f.Seq,
		Culprits: f.Culprits, Victims: f.Victims, Summary: f.Summary, Evidence: f.Evidence, Ops: f.Ops,
		LagSeconds: f.LagSeconds, OpenedAt: now, LastSeen: now, FaultAt: f.FaultAt,
	}
}
