package detect

import (
	"fmt"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// strayAllocations are the events of p that a stray connection to the remote-allocator
// service of NCCL's bootstrap (before 2.12) explains: any client that reaches that port
// (a scanner, a health check) is read as an allocation request, the connection closes
// mid-read, "[Rem Allocator] Allocation failed" follows, and the garbage size it read
// fails cudaMalloc with "out of memory". The closed connection before it and the OOM after
// it are that request's, not a dead peer's or a full GPU's. Breadcrumbs between them are
// the same thread's path.
func strayAllocations(p *Proc) map[int]bool {
	var stray map[int]bool
	for i, e := range p.Events {
		if e.Kind != snapshot.EventWarn || e.Code != snapshot.WarnRemAllocator {
			continue
		}
		if stray == nil {
			stray = map[int]bool{}
		}
		stray[i] = true
		if k := nextNonBreadcrumb(p.Events, i, -1); k >= 0 && (p.Events[k].Kind == snapshot.EventConnClosedRemote || p.Events[k].Kind == snapshot.EventSocketError) {
			stray[k] = true
		}
		if k := nextNonBreadcrumb(p.Events, i, 1); k >= 0 && p.Events[k].Kind == snapshot.EventCudaError &&
			strings.Contains(strings.ToLower(p.Events[k].Detail), "out of memory") {
			stray[k] = true
		}
	}
	return stray
}

// nextNonBreadcrumb is the index of the first event from i in direction dir (1 or -1) that
// is not a breadcrumb, or -1.
func nextNonBreadcrumb(es []snapshot.Event, i, dir int) int {
	for k := i + dir; k >= 0 && k < len(es); k += dir {
		if es[k].Kind != snapshot.EventBreadcrumb {
			return k
		}
	}
	return -1
}

// StrayAllocator reports, as a warning, the remote-allocator failures strayAllocations
// recognises: harmless when the job goes on, worth knowing because the port is reachable
// by clients that are not the job's.
func StrayAllocator(j *Job, cfg Config) []Finding {
	var out []Finding
	for _, p := range j.Procs {
		stray := strayAllocations(p)
		if len(stray) == 0 {
			continue
		}
		f := Finding{Kind: incident.KindConfig, Severity: incident.SeverityWarning, Culprits: []incident.Culprit{p.Culprit()},
			culpritKeys: []string{p.Key()}, Key: "stray-allocator:" + p.Key()}
		f.Summary = fmt.Sprintf("%s: a stray connection reached the remote-allocator service of NCCL's bootstrap (NCCL before 2.12) and its \"allocation\" failed; the \"out of memory\" that follows is that request's, not the GPU's: harmless when the job goes on (a port scanner, a health check or another job's rank reached NCCL's port; NCCL 2.12 and later have no such service)", p.Name())
		for i, e := range p.Events {
			if stray[i] && recentEvent(j, cfg.EventConfig, int64(e.T)) {
				f.addEvidence("%s: %s", p.Name(), e.Msg)
			}
		}
		out = append(out, f)
	}
	return out
}
