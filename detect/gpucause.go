package detect

import (
	"fmt"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The GPU as a slowdown's cause, from NVML: another process sharing it, clocks throttled,
// and which of the job's ranks it serves.

// oneGPU is the GPU all of ps run on, with the job's ranks on it; nil when they use several
// or it is not known.
func oneGPU(j *Job, ps []*Proc) (*snapshot.GPU, []*Proc) {
	var gpu *snapshot.GPU
	for _, p := range ps {
		g := gpuOf(j, p)
		if g == nil || gpu != nil && g != gpu {
			return nil, nil
		}
		gpu = g
	}
	if gpu == nil {
		return nil, nil
	}
	if _, on := ranksOnGPU(j, ps[0], gpu); len(on) > 0 {
		return gpu, on
	}
	return gpu, ps // the ranks exited since: the suspects are what is known
}

// slowCause names why a rank is late, from its own evidence: its GPU shared with another
// process or throttled or faulted (NVML), its kernels queued behind others (the plugin), or
// else its host: late at every step (input pipeline, CPU), or stalling now and then.
func slowCause(j *Job, p *Proc, e episode, m *measuredSample) (incident.Cause, string) {
	if g := gpuOf(j, p); g != nil {
		if n, mine := gpuShared(j, p, g); n > 0 {
			return incident.CauseGPUBusy, fmt.Sprintf("its GPU %d is shared with %d other process(es) (NVML lists %d on it, %d of them this job's)",
				g.Index, n, len(g.Procs), mine)
		}
		if r := throttled(g); r != "" {
			return incident.CauseGPUThrottled, fmt.Sprintf("its GPU %d is throttled (%s, SM at %d of %d MHz)", g.Index, r, g.SMClockMHz, g.SMMaxMHz)
		}
		if len(g.XIDs) > 0 {
			return incident.CauseGPUFault, fmt.Sprintf("its GPU %d reported XID %d", g.Index, g.XIDs[len(g.XIDs)-1].Code)
		}
	}
	if m != nil && m.late > 0 && m.queue*2 >= m.late {
		return incident.CauseGPUBusy, "its GPU starts its collectives late after the host issued them: the GPU is busy with its own work (longer kernels, slower compute)"
	}
	host := "its host issues its collectives late every step (input pipeline, CPU, Python)"
	if e.intermittent {
		host = "its host stalls now and then before issuing its collectives (checkpoints, garbage collection, I/O, data loading)"
	}
	switch p.Stat {
	case "D":
		host += "; the process is in uninterruptible I/O (state D)"
	case "R":
		if p.CPUPct > 0 {
			host += fmt.Sprintf("; the process burns %.0f%% CPU", p.CPUPct)
		}
	case "S":
		host += "; the process sleeps"
	}
	if e.intermittent {
		return incident.CauseHostStalled, host
	}
	return incident.CauseHostSlow, host
}

// gpuShared counts the processes on a rank's GPU beyond the job's ranks using it, and those
// ranks. NVML may list host PIDs the sidecar's namespace does not share, so counts decide.
func gpuShared(j *Job, p *Proc, g *snapshot.GPU) (others, mine int) {
	if !g.Has("procs") || len(g.Procs) == 0 {
		return 0, 0
	}
	for _, q := range j.Procs {
		// Exited ranks too: NVML lists a process's context for a while after it exits, and
		// a job's own ranks that ended are no foreign process.
		if q.Node == p.Node && gpuOf(j, q) == g {
			mine++
		}
	}
	return max(len(g.Procs)-mine, 0), mine
}

// rootKey is the key of a slowdown's root: the GPU where another process shares it (every
// rank on that GPU, and the job's own slowdown seen from its steps, are one root then),
// else the rank, whose hang, slowdown and death are one incident.
func rootKey(j *Job, p *Proc, cause incident.Cause) string {
	if g := gpuOf(j, p); g != nil && cause == incident.CauseGPUBusy {
		if n, _ := gpuShared(j, p, g); n > 0 {
			return gpuKey(p, g)
		}
	}
	return "rank:" + p.Key()
}

func gpuKey(p *Proc, g *snapshot.GPU) string { return "gpu:" + p.Node + ":" + g.BusID }

// ranksOnGPU counts the job's live ranks on p's node that use GPU g.
func ranksOnGPU(j *Job, p *Proc, g *snapshot.GPU) (n int, ranks []*Proc) {
	for _, q := range j.Procs {
		if q.Node == p.Node && q.State != snapshot.ProcExited && gpuOf(j, q) == g {
			n++
			ranks = append(ranks, q)
		}
	}
	return n, ranks
}

// throttled names the clock-event reasons that slow a busy GPU. Idle and application-clock
// settings do not; a software power cap is what every busy GPU at its power limit reports,
// so it counts only where the SM clock fell well below its maximum.
func throttled(g *snapshot.GPU) string {
	slowed := g.SMMaxMHz > 0 && g.SMClockMHz > 0 && g.SMClockMHz*100 < g.SMMaxMHz*85
	var r []string
	for _, x := range g.Reasons {
		switch strings.ToLower(strings.ReplaceAll(x, "_", "")) {
		case "gpuidle", "applicationsclockssetting", "none", "":
		case "swpowercap", "syncboost":
			if slowed {
				r = append(r, x)
			}
		default:
			r = append(r, x)
		}
	}
	return strings.Join(r, "+")
}
