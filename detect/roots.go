package detect

import (
	"cmp"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/detect/blame"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Hangs is what the waits-for graph says about a job's stalls: one finding per root (a rank
// that stopped issuing, whose GPU never started the op, that skipped a send or receive,
// that froze inside an op) and per cycle (an order inversion), the ranks that waited for it
// as its victims, never as findings of their own.
type Hangs struct {
	Stalls     []Finding // roots, and point-to-point ops a finished job never matched
	Stuck      []Finding // collectives every rank entered and none finished, pointing at no one
	Inversions []Finding // cycles: ranks that called two communicators' ops in other orders
	Paused     []string  // communicators where every rank is level and every GPU idle (live)
}

// FindHangs gathers the open waits from every edge producer (waits.go, inversion.go),
// follows them to their roots and cycles, and says what each root did and why.
func FindHangs(j *Job, cfg Config) Hangs {
	e := &engine{j: j, cfg: cfg, byID: make(map[string]*Group, len(j.Groups)), ix: commIndex{}, deaths: &deaths{j: j}}
	for _, g := range j.Groups {
		e.byID[g.ID] = g
	}
	var h Hangs
	edges, stuck := e.gather(&h)
	e.graph = NewWaitGraph(edges)
	roots, cycles := e.graph.Ends()
	for _, r := range roots {
		h.addRoot(e.rootFinding(r))
	}
	byKey := map[string]int{}
	for _, c := range cycles {
		inv, ok := e.cycleFinding(c)
		if !ok { // no order tells them apart: each stopped where the other waits
			for _, r := range c {
				h.addRoot(e.rootFinding(r))
			}
			continue
		}
		if i, dup := byKey[inv.Key]; dup {
			h.Inversions[i].addEvidence("also: %s", inv.Summary)
			continue
		}
		byKey[inv.Key] = len(h.Inversions)
		h.Inversions = append(h.Inversions, inv)
	}
	h.Stalls = append(foldNodeRoots(j, h.Stalls), finishedP2P(edges)...)
	for _, s := range stuck {
		if inv := inversionOn(h.Inversions, s.Comm); inv != nil {
			absorb(inv, &s)
			continue
		}
		h.Stuck = append(h.Stuck, s)
	}
	return h
}

// addRoot files a root's finding: a collective stuck on a rank stays with the stuck ones,
// which follow a cause found elsewhere (merge.go).
func (h *Hangs) addRoot(f Finding, ok bool) {
	switch {
	case !ok:
	case f.Kind == incident.KindStuckInFlight:
		h.Stuck = append(h.Stuck, f)
	default:
		h.Stalls = append(h.Stalls, f)
	}
}

// engine is one evaluation of the hang side: the job, its communicators by id, the graph of
// its open waits and the order verdicts of its stuck communicators.
type engine struct {
	j        *Job
	cfg      Config
	byID     map[string]*Group
	ix       commIndex
	graph    *WaitGraph
	verdicts map[[2]*Group]*orderVerdict
	deaths   *deaths               // why dead roots ended
	gpus     map[*snapshot.GPU]int // the job's live ranks per GPU, built on the first root asked
}

// gather runs the edge producers: per communicator (in parallel), then the cross-communicator
// following of ranks whose GPU is busy in another communicator's op, then the orders.
func (e *engine) gather(h *Hangs) ([]Wait, []Finding) {
	j, cfg := e.j, e.cfg
	type perGroup struct {
		waits  []Wait
		stuck  *Finding
		paused bool
	}
	res := make([]perGroup, len(j.Groups))
	j.eachGroup(func(i int, g *Group) {
		if len(g.Members) < 2 {
			return
		}
		r := &res[i]
		r.waits = append(behindWaits(j, g, cfg), p2pWaits(j, g, cfg)...)
		if j.Offline {
			return
		}
		window := cfg.CompletionWindow(g) + j.InputLag
		r.waits = append(r.waits, pluginWaits(j, g, window)...)
		tw, ts := transferWaits(j, g, window)
		r.waits, r.stuck = append(r.waits, tw...), ts
		if tw == nil && ts == nil { // what the plugin saw of a stuck op replaces what the GPUs suggest
			r.stuck, r.paused = spinning(j, g, cfg)
		}
	})
	var edges []Wait
	var stuck []Finding
	produced := map[*Group]bool{}
	for i, r := range res {
		edges = append(edges, r.waits...)
		produced[j.Groups[i]] = len(r.waits) > 0
		if r.stuck != nil {
			stuck = append(stuck, *r.stuck)
		}
		if r.paused {
			h.Paused = append(h.Paused, j.Groups[i].ID)
		}
	}
	edges = append(edges, e.follow(edges, produced)...)
	hostAwaited := map[*Proc]bool{}
	for _, w := range edges {
		hostAwaited[w.Awaited] = hostAwaited[w.Awaited] || w.Class == blame.WaitHost && w.Open
	}
	var order [][2]*Group
	e.verdicts, order = orderVerdicts(j, cfg, e.ix)
	for _, pr := range order {
		// A tie that names a rank which never issued one of the ops compared nothing: that
		// rank stopped, and the others wait for it.
		v := e.verdicts[pr]
		stopped := false
		for _, p := range append(v.aFirst, v.bFirst...) {
			stopped = stopped || hostAwaited[p]
		}
		if !v.tie || !stopped {
			edges = append(edges, v.waits()...)
		}
	}
	return edges, stuck
}

// follow: a rank whose GPU has not started an op because it is busy in an op of another
// communicator waits for whoever that op waits for, whether or not that communicator's own
// window has passed (its peers' already did).
func (e *engine) follow(edges []Wait, produced map[*Group]bool) []Wait {
	waits := map[*Proc]bool{}
	for _, w := range edges {
		waits[w.Waiter] = true
	}
	var out []Wait
	for _, w := range edges {
		p := w.Awaited
		if w.Class != blame.WaitGPU || waits[p] {
			continue
		}
		waits[p] = true
		for i := range p.Comms {
			g := e.byID[p.Comms[i].ID]
			if g == nil || produced[g] || onGPU(Member{p, &p.Comms[i]}) == nil {
				continue
			}
			produced[g] = true
			tw, _ := transferWaits(e.j, g, 0)
			out = append(append(out, pluginWaits(e.j, g, 0)...), tw...)
		}
	}
	return out
}

// rootFinding says what a root did, from the waits for it: the plugin's view of an op it
// never issued or started first, then the logs' counts, skipped sends and receives, and
// transfers that wait on it; the others are its evidence. A root whose GPU was only found
// not to start an op, while it runs an NCCL op of its own, is a waiter whose wait is not
// traced yet: no finding.
func (e *engine) rootFinding(r *Proc) (Finding, bool) {
	in := e.graph.WaitedBy(r, true)
	queuedOnly := true
	for _, w := range in {
		queuedOnly = queuedOnly && w.Class == blame.WaitGPU
	}
	if queuedOnly && ncclRunning(r) {
		return Finding{}, false
	}
	waiters, via := e.graph.Waiters(r)
	var views []Finding
	var lead []Wait // the waits of the first view
	for _, ws := range runs(in, func(w Wait) blame.WaitSeen { return w.Seen }) {
		if ws[0].Seen <= blame.SeenTransfers {
			if lead == nil {
				lead = ws
			}
			views = append(views, e.view(r, ws[0].Seen, ws, len(waiters)))
		}
	}
	if len(views) == 0 {
		return Finding{}, false
	}
	f, first := views[0], lead[0]
	f.Victims = len(waiters)
	if f.Kind != incident.KindP2PMismatch {
		processEvidence(e.j, r, &f)
		if first.Peer != nil {
			processEvidence(e.j, first.Peer, &f)
		}
	}
	e.stoppedBehind(r, waiters, via, &f)
	var why string
	if f.Cause, why = e.rootCause(r, first, f.FaultAt); why != "" {
		f.addEvidence("%s", why)
	}
	if _, t := left(r, first.Comm); !t.IsZero() && (f.FaultAt.IsZero() || t.Before(f.FaultAt)) {
		f.FaultAt = t // it left after its last op there: the deaths its leaving caused come later
	}
	for _, v := range views[1:] {
		absorb(&f, &v)
	}
	return f, true
}

// runs orders waits by a key (stably: the first value named first, unless the key is
// ordered, as WaitSeen is best first) and cuts them where the key changes: the groups
// share ws's memory.
func runs[K cmp.Ordered](ws []Wait, key func(Wait) K) [][]Wait {
	sort.SliceStable(ws, func(a, b int) bool { return key(ws[a]) < key(ws[b]) })
	var out [][]Wait
	for i := 0; i < len(ws); {
		k := i + 1
		for k < len(ws) && key(ws[k]) == key(ws[i]) {
			k++
		}
		out = append(out, ws[i:k])
		i = k
	}
	return out
}

// byFirst groups waits by a key, in the order they first name each value.
func byFirst[K comparable](ws []Wait, key func(Wait) K) [][]Wait {
	first := map[K]int{}
	for i, w := range ws {
		if _, ok := first[key(w)]; !ok {
			first[key(w)] = i
		}
	}
	return runs(ws, func(w Wait) int { return first[key(w)] })
}

func byComm(ws []Wait) [][]Wait { return byFirst(ws, func(w Wait) string { return w.Comm }) }

// cycleFinding: members that wait for each other across communicators are an order
// inversion, named by the order of their calls (inversion.go); false when no order tells.
func (e *engine) cycleFinding(cycle []*Proc) (Finding, bool) {
	in := map[*Proc]bool{}
	for _, p := range cycle {
		in[p] = true
	}
	var comms []*Group
	seen := map[string]bool{}
	for _, p := range cycle {
		for _, w := range e.graph.Waits(p, true) {
			if in[w.Awaited] && !seen[w.Comm] && e.byID[w.Comm] != nil {
				seen[w.Comm] = true
				comms = append(comms, e.byID[w.Comm])
			}
		}
	}
	for i, a := range comms {
		for _, b := range comms[i+1:] {
			if v := e.verdicts[orderedPair(a, b)]; v != nil {
				f := v.f
				f.Evidence = append([]string(nil), f.Evidence...)
				f.addEvidence("%s", cyclePath(e.graph, cycle, in))
				return f, true
			}
		}
	}
	return Finding{}, false
}

// cyclePath is the cycle in words, from its first member round to it again.
func cyclePath(g *WaitGraph, cycle []*Proc, in map[*Proc]bool) string {
	var path []Wait
	done := map[*Proc]bool{}
	for p := cycle[0]; !done[p] && len(path) < 16; {
		done[p] = true
		for _, w := range g.Waits(p, true) {
			if in[w.Awaited] {
				path = append(path, w)
				p = w.Awaited
				break
			}
		}
	}
	return waitsInWords(path)
}

// stoppedBehind says, for the first waiters that others wait for in turn (they stopped
// too, where their peers wait), whom they wait for: the path to the root.
func (e *engine) stoppedBehind(r *Proc, waiters []*Proc, via map[*Proc]*Wait, f *Finding) {
	n := 0
	for _, w := range waiters {
		var best *Wait
		for _, in := range e.graph.WaitedBy(w, true) {
			if in.Waiter != r && (best == nil || in.Seen < best.Seen) {
				best = &in
			}
		}
		if best != nil && n < maxPaths {
			n++
			f.addEvidence("%s", waitsInWords(append([]Wait{*best}, pathOf(w, via, r)...)))
		}
	}
}

// maxPaths bounds the paths a finding quotes.
const maxPaths = 3

// pathOf is a waiter's way to the root, one wait a step.
func pathOf(from *Proc, via map[*Proc]*Wait, root *Proc) []Wait {
	var path []Wait
	for p := from; p != root && len(path) < 16; {
		w, ok := via[p]
		if !ok {
			break
		}
		path = append(path, *w)
		p = w.Awaited
	}
	return path
}

// waitsInWords is a path of waits in words: "rank 0 waits in op 92 of communicator X for
// rank 3 to issue it; rank 3 waits in op 17 of communicator Y for the GPU of rank 1 to
// start it".
func waitsInWords(path []Wait) string {
	parts := make([]string, len(path))
	for i, w := range path {
		what := map[blame.WaitClass]string{blame.WaitHost: "for %s to issue it", blame.WaitGPU: "for the GPU of %s to start it",
			blame.WaitLink: "for data from %s"}[w.Class]
		op := fmt.Sprintf("op %d", w.Seq)
		if w.Seen == blame.SeenP2P {
			op, what = "a send or receive", "for %s to post its match"
		}
		parts[i] = fmt.Sprintf("%s waits in %s of communicator %s "+what, w.Waiter.Name(), op, shortComm(w.Comm), w.Awaited.Name())
	}
	return strings.Join(parts, "; ")
}

// ncclRunning says whether a process has an NCCL op running on its GPU, on any communicator.
func ncclRunning(p *Proc) bool {
	for i := range p.Comms {
		if d := p.Comms[i].Done; d != nil && d.InFlight != nil && d.InFlight.GPUStart != 0 {
			return true
		}
	}
	return false
}

// rootCause names the class of a root's cause from its own evidence (issue 22, item 4),
// and says what showed it ("" when nothing more than the class): dead (before its stall
// mattered: a rank killed long after it stopped, by PyTorch's timeout, stalled first), and
// why; its GPU faulted; its GPU busy (issued, not started; or not issuing while its GPU
// computes), with another process if NVML lists one; its link; else its host is stalled,
// in the state /proc shows.
func (e *engine) rootCause(r *Proc, w Wait, faultAt time.Time) (incident.Cause, string) {
	if w.Seen == blame.SeenP2P {
		return incident.CauseMismatch, ""
	}
	if w.Seen == blame.SeenPastEnd {
		return incident.CauseApplication, pastEndCause
	}
	if r.State == snapshot.ProcExited && (faultAt.IsZero() || r.ExitedAt == 0 || r.ExitedAt.Time().Sub(faultAt) <= e.cfg.HangFloor) {
		return incident.CauseDied, e.deaths.reason(r)
	}
	if gone, _ := left(r, w.Comm); gone {
		return incident.CauseApplication, "it destroyed its communicator (destroy_process_group, ncclCommDestroy) and lives on: it left the job early (fewer steps or batches than its peers, an early return), and will never join the op its peers wait in"
	}
	g := gpuOf(e.j, r)
	switch {
	case g != nil && e.gpuFaulted(g):
		return incident.CauseGPUFault, ""
	case w.Class == blame.WaitGPU || g != nil && g.State == snapshot.GPUComputing && e.ranksOn(g) == 1:
		if g != nil {
			if n, _ := gpuShared(e.j, r, g); n > 0 {
				return incident.CauseGPUBusy, fmt.Sprintf("its GPU %d also runs %d other process(es) (NVML)", g.Index, n)
			}
		}
		return incident.CauseGPUBusy, ""
	case w.Class == blame.WaitLink && w.Peer != nil:
		return incident.CauseLink, ""
	}
	state := map[snapshot.SchedState]string{snapshot.SchedStopped: "the process is stopped (SIGSTOP, job control)",
		snapshot.SchedTraced: "the process is stopped by a debugger", snapshot.SchedDiskWait: "the process is in uninterruptible I/O (state D)",
		snapshot.SchedSleeping: "the process sleeps (state S): its host waits on something outside NCCL (a lock, a queue, I/O)",
		snapshot.SchedZombie:   "the process is a zombie: it exited and its parent has not reaped it"}[r.Stat]
	if r.Stat == snapshot.SchedRunning && r.CPUPct > 0 {
		state = fmt.Sprintf("the process burns %.0f%% CPU without issuing", r.CPUPct)
	}
	return incident.CauseHostStalled, state
}

// left says whether a live process destroyed its member of communicator id, and when it
// issued its last op there (zero when unknown).
func left(p *Proc, id string) (bool, time.Time) {
	for i := range p.Comms {
		if c := &p.Comms[i]; c.ID == id && p.State != snapshot.ProcExited && c.State.Ended() {
			if c.Last != nil && c.Last.T > 0 {
				return true, c.Last.T.Time()
			}
			return true, time.Time{}
		}
	}
	return false, time.Time{}
}

// ranksOn counts the job's ranks on a GPU: NVML's state of a GPU that several share is not
// any one rank's.
func (e *engine) ranksOn(g *snapshot.GPU) int {
	if e.gpus == nil {
		e.gpus = map[*snapshot.GPU]int{}
		for _, p := range e.j.Procs {
			if q := gpuOf(e.j, p); q != nil && p.State != snapshot.ProcExited {
				e.gpus[q]++
			}
		}
	}
	return e.gpus[g]
}

func (e *engine) gpuFaulted(g *snapshot.GPU) bool {
	for _, x := range g.XIDs {
		if _, severe := snapshot.XIDMeaning(x.Code); severe && recentEvent(e.j, e.cfg.EventConfig, int64(x.T)) {
			return true
		}
	}
	return g.ECCVolatileDBE > 0
}
