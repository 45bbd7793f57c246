package detect

import (
	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
)

// What an error NCCL printed explains: the deaths, stalls and init hangs that follow it; an
// init that failed silently echoes it; an error no rule explains is reported only alone.

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
		if f.origin == knowledge.InitHang {
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
		if f.origin == knowledge.SilentInit {
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
		if fs.errors[i].origin == knowledge.Versions {
			versions = &fs.errors[i]
			break
		}
	}
	if versions == nil {
		return
	}
	var rest []Finding
	for _, f := range fs.rest {
		if f.origin == knowledge.NetSize {
			absorb(versions, &f)
			continue
		}
		rest = append(rest, f)
	}
	fs.rest = rest
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
