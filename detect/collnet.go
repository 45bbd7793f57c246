package detect

import (
	"fmt"
	"path"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// collNetFellBack reports whether NCCL printed "Cannot initialize CollNet, using
// point-to-point network instead" in the job: every local rank of a node shares its CollNet
// set-up result before local rank 0 prints it, so the set-up errors of the job's ranks were
// handled, not fatal.
func collNetFellBack(j *Job) bool {
	for _, p := range j.Procs {
		for _, e := range p.Events {
			if e.Kind == snapshot.EventWarn && e.Code == snapshot.WarnCollNetFallback {
				return true
			}
		}
	}
	return false
}

// collNetCrumb reports a breadcrumb on the path of a failed CollNet set-up: NCCL's transport
// set-up (transport.cc, transport/coll_net.cc), init.cc that calls it and cleans up, and the
// SHARP plugin.
func collNetCrumb(src string) bool {
	switch base := path.Base(src); {
	case base == "transport.cc", base == "init.cc", base == "coll_net.cc", strings.Contains(base, "sharp"):
		return true
	}
	return false
}

// CollNet reads the set-up errors of CollNet (NVIDIA SHARP's in-network reductions). When NCCL
// fell back to its point-to-point network the job runs without SHARP's offload: a warning
// (performance, not failure). When it did not, the SHARP failure is why init failed.
func CollNet(j *Job, cfg Config) []Finding {
	quote := max(cfg.SetupEvidence, 1)
	var procs []*Proc
	var evidence []string
	for _, p := range j.Procs {
		for _, e := range p.Events {
			if e.Kind != snapshot.EventWarn || (e.Code != snapshot.WarnCollNet && e.Code != snapshot.WarnCollNetFallback) ||
				!recentEvent(j, cfg.EventConfig, int64(e.T)) {
				continue
			}
			if e.Code == snapshot.WarnCollNet && (len(procs) == 0 || procs[len(procs)-1] != p) {
				procs = append(procs, p)
			}
			if len(evidence) < quote {
				evidence = append(evidence, fmt.Sprintf("%s: %s", p.Name(), e.Msg))
			}
		}
	}
	recovered := collNetFellBack(j)
	if len(procs) == 0 && !recovered {
		return nil
	}
	f := Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{}, Key: "config:collnet"}
	for i, p := range procs {
		if i < 16 {
			f.Culprits = append(f.Culprits, p.Culprit())
		}
		f.culpritKeys = append(f.culpritKeys, p.Key())
	}
	if recovered {
		f.Severity = incident.SeverityWarning
		f.Summary = "CollNet (NVIDIA SHARP in-network reductions) could not be set up and NCCL fell back to its point-to-point network: the job runs without SHARP's offload (performance, not a failure; the error breadcrumbs of that set-up were handled); if SHARP is expected, check the SHARP Aggregation Manager and sharpd, else set NCCL_COLLNET_ENABLE=0"
	} else {
		f.Summary = fmt.Sprintf("%s could not create its CollNet (NVIDIA SHARP) group or job, and no fallback to the point-to-point network is logged: the SHARP Aggregation Manager (sharp_am) or the SHARP daemon (sharpd) refused it (no SHARP trees or quota left, a tree another job holds, SHARP not set up for this fabric); NCCL_COLLNET_ENABLE=0 avoids it (NCCL then uses its point-to-point network)",
			procWords(procs))
	}
	for _, e := range evidence {
		f.addEvidence("%s", e)
	}
	return []Finding{f}
}

// procWords names one process, or counts several.
func procWords(procs []*Proc) string {
	if len(procs) == 1 {
		return procs[0].Name()
	}
	return fmt.Sprintf("%d processes (%s first)", len(procs), procs[0].Name())
}
