package heartbeat

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/profile"
	"github.com/ncclwatch/watchdog/snapshot"
)

// How a region becomes snapshot state: its process's completion state per communicator,
// joined with the communicators of the process's log when there is one, or a process of its
// own (a job logging at NCCL_DEBUG=WARN has no per-op lines at all).
//
// Joining: a root communicator's log Init line and the plugin both give NCCL's commId, so
// they join by it. A split child's log line has no commId (its log identity is
// "<parent>/s<n>c<color>"); it joins the plugin communicator of the same process with the
// same size and rank, in creation order (log lines and plugin inits come in the order NCCL
// created them), and then takes the plugin's commId as its identity, which every rank's
// plugin reports alike. So with the plugin a job's communicators are named by commId
// everywhere; without it, as before.

// timingWindow is how far back per-op durations are averaged: long enough for a few
// training steps, short enough that a lateness that ended stops counting within seconds
// (30 s kept a slowed rank named long after, live on two H100s).
const timingWindow = 10 * time.Second

// windowSamples bounds the samples a window keeps; sampleGap spaces them so that they span
// timingWindow whatever the polling rate.
const (
	windowSamples = 64
	sampleGap     = 2 * timingWindow / windowSamples
)

// window keeps cumulative counters as read at successive polls: the difference between its
// oldest sample within timingWindow and its newest is what happened in between.
type window[T any] struct {
	at [windowSamples]time.Time
	v  [windowSamples]T
	n  int
}

// add takes a poll's counters. Samples closer than sampleGap to the one before the newest
// replace the newest, so the ring spans timingWindow even at fast polls.
func (w *window[T]) add(now time.Time, v T) {
	if w.n >= 2 && now.Sub(w.at[(w.n-2)%windowSamples]) < sampleGap {
		w.n--
	}
	w.at[w.n%windowSamples], w.v[w.n%windowSamples] = now, v
	w.n++
}

// span returns the oldest sample within timingWindow of the newest, the newest, and the time
// between them.
func (w *window[T]) span() (first, last T, d time.Duration, ok bool) {
	if w.n < 2 {
		return first, last, 0, false
	}
	newest := (w.n - 1) % windowSamples
	oldest := newest
	for back := 1; back < min(w.n, windowSamples); back++ {
		i := (w.n - 1 - back) % windowSamples
		if w.at[newest].Sub(w.at[i]) > timingWindow {
			break
		}
		oldest = i
	}
	return w.v[oldest], w.v[newest], w.at[newest].Sub(w.at[oldest]), oldest != newest
}

type timedSample struct{ colls, queue, busy uint64 }

type netSample struct{ us, steps uint64 }

// commWindow keeps a communicator's timing counters, and its send links' network time by
// peer rank, over recent polls.
type commWindow struct {
	colls window[timedSample]
	peers map[int]*window[netSample]
	seen  time.Time
	sent  uint64 // the newest position a delta snapshot carried
}

// observe takes the region just read into the windows and the issue clock.
func (rr *rankRegion) observe(now time.Time) {
	for _, c := range rr.reg.Comms {
		for _, o := range []*profile.Op{c.InFlight, c.Last} {
			if o != nil {
				rr.issue.see(o.ProcSeq)
			}
		}
		k := commKey{slot: c.Slot, gen: c.Gen}
		w := rr.windows[k]
		if w == nil {
			w = &commWindow{peers: map[int]*window[netSample]{}}
			rr.windows[k] = w
		}
		w.seen = now
		w.colls.add(now, timedSample{colls: c.TimedColls, queue: c.QueueUs, busy: c.BusyUs})
		for _, p := range c.Peers {
			pw := w.peers[p.Rank]
			if pw == nil {
				pw = &window[netSample]{}
				w.peers[p.Rank] = pw
			}
			pw.add(now, netSample{us: p.Send.NetUs, steps: p.Send.NetSteps})
		}
	}
	// Slots finalized (or reused) leave their windows behind: bounded by the plugin's slots.
	for k, w := range rr.windows {
		if w.seen != now {
			delete(rr.windows, k)
		}
	}
}

func (w *commWindow) timing() *snapshot.Timing {
	a, b, d, ok := w.colls.span()
	if !ok || b.colls <= a.colls || b.busy < a.busy || b.queue < a.queue {
		return nil
	}
	n := b.colls - a.colls
	return &snapshot.Timing{N: int64(n), Window: d.Microseconds(), Busy: int64((b.busy - a.busy) / n),
		Queue: int64((b.queue - a.queue) / n)}
}

// net is a peer's mean network µs per send step over the window, and the steps it covers.
func net(pw *window[netSample]) (us, steps int64) {
	a, b, _, ok := pw.span()
	if !ok || b.steps <= a.steps || b.us < a.us {
		return 0, 0
	}
	n := b.steps - a.steps
	return int64((b.us - a.us) / n), int64(n)
}

// dtypeName spells NCCL's datatype names ("ncclFloat32") as the log parser does ("float32").
func dtypeName(s string) string {
	s, ok := strings.CutPrefix(s, "nccl")
	if !ok || s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

func (rr *rankRegion) op(o *profile.Op) snapshot.Op {
	root := o.Root
	if o.Kind == profile.OpColl {
		root = rootOf(o.Func, o.Root)
	}
	return snapshot.Op{Seq: int64(o.Seq), Op: o.Func, Count: o.Count, Dtype: dtypeName(o.Datatype), Root: root,
		T: o.Issued, Idx: rr.issue.at(o.ProcSeq)}
}

// rootOf is a collective's root where it has one: NCCL hands the plugin whatever root the
// caller passed to the others, which ranks need not agree on (the digest ignores it too).
func rootOf(fn string, root int) int {
	switch fn {
	case "Broadcast", "Reduce", "Gather", "Scatter":
		return root
	}
	return 0
}

func hasSeq(ops snapshot.Ops, seq int64) bool {
	for i := range ops {
		if ops[i].Seq == seq {
			return true
		}
	}
	return false
}

func (rr *rankRegion) flight(o *profile.Op) *snapshot.Flight {
	if o == nil {
		return nil
	}
	return &snapshot.Flight{Op: rr.op(o), P2P: o.Kind == profile.OpP2P, Algo: o.Algo, Proto: o.Proto,
		GPUStart: o.GPUStarted, Channels: o.NChannels, ChannelsStarted: o.KernelChStarted,
		ChannelsDone: o.KernelChDone, ProxyOpen: o.ProxyOpen}
}

var proxyStates = map[profile.ProxyState]snapshot.ProxyState{
	profile.StateSendGPUWait: snapshot.ProxySendGPUWait, profile.StateSendPeerWait: snapshot.ProxySendPeerWait,
	profile.StateSendWait: snapshot.ProxySendWait, profile.StateRecvWait: snapshot.ProxyRecvWait,
	profile.StateRecvFlushWait: snapshot.ProxyRecvFlushWait, profile.StateRecvGPUWait: snapshot.ProxyRecvGPUWait,
	profile.StateInProgress: snapshot.ProxyInProgress,
}

// completion renders one communicator's plugin state.
func (rr *rankRegion) completion(c *profile.Comm) *snapshot.Completion {
	d := &snapshot.Completion{Issued: int64(c.CollIssued), Started: int64(c.CollStarted), Done: int64(c.CollDone),
		P2PIssued: int64(c.P2PIssued), P2PDone: int64(c.P2PDone), LastDone: c.LastDone, LastEvent: c.LastEvent,
		InFlight: rr.flight(c.InFlight), Dropped: int64(c.DroppedEvents)}
	w := rr.windows[commKey{slot: c.Slot, gen: c.Gen}]
	if w != nil {
		d.Timing = w.timing()
	}
	for _, p := range c.Peers {
		for _, dir := range []struct {
			d  snapshot.Dir
			pd profile.PeerDir
		}{{snapshot.DirSend, p.Send}, {snapshot.DirRecv, p.Recv}} {
			pd := dir.pd
			if pd.ProxyOps == 0 && pd.P2PIssued == 0 {
				continue
			}
			pp := snapshot.PeerProgress{Peer: p.Rank, Dir: dir.d, Channel: pd.Channel, Steps: int64(pd.Steps),
				StepsDone: int64(pd.StepsDone), Open: int64(pd.OpenProxyOps()), LastStep: pd.LastStep,
				State: proxyStates[pd.State], StateAt: pd.StateAt, P2PIssued: int64(pd.P2PIssued), P2PDone: int64(pd.P2PDone)}
			if dir.d == snapshot.DirSend && w != nil {
				if pw := w.peers[p.Rank]; pw != nil {
					pp.NetUs, pp.NetSteps = net(pw)
				}
			}
			d.Peers = append(d.Peers, pp)
		}
	}
	d.Peers = keepPeers(d.Peers)
	return d
}

// keepPeers keeps at most snapshot.MaxPeers rows: open transfers first, those waiting
// longest first among them, then the slowest links.
func keepPeers(ps []snapshot.PeerProgress) []snapshot.PeerProgress {
	open := func(p *snapshot.PeerProgress) bool { return p.Open > 0 || p.P2PDone < p.P2PIssued }
	sort.SliceStable(ps, func(a, b int) bool {
		pa, pb := &ps[a], &ps[b]
		if open(pa) != open(pb) {
			return open(pa)
		}
		if open(pa) && pa.StateAt != pb.StateAt {
			return pa.StateAt < pb.StateAt
		}
		if pa.NetUs != pb.NetUs {
			return pa.NetUs > pb.NetUs
		}
		if pa.Peer != pb.Peer {
			return pa.Peer < pb.Peer
		}
		return pa.Dir < pb.Dir
	})
	if len(ps) > snapshot.MaxPeers {
		ps = ps[:snapshot.MaxPeers]
	}
	return ps
}

// recentOps says which of a communicator's newest ops a snapshot carries, as the log's
// SnapshotOptions do: up to n; for a delta snapshot only those after what the detector has,
// but at least min of them.
type recentOps struct {
	n, min int
	delta  bool
}

// pluginComm renders a plugin communicator that no log communicator stands for. Its ops are
// the plugin's newest signatures (and the op in flight, when older), its marks the plugin's
// digests. The plugin does not record the reduction op.
func (rr *rankRegion) pluginComm(c *profile.Comm, ro recentOps) snapshot.Comm {
	sc := snapshot.Comm{ID: c.ID.String(), Rank: c.Rank, NRanks: max(c.NRanks, 0), State: snapshot.CommReady,
		Count: int64(c.CollIssued), Done: rr.completion(c)}
	w := rr.windows[commKey{slot: c.Slot, gen: c.Gen}]
	after := uint64(0)
	if ro.delta && w != nil {
		after = w.sent
	}
	sigs := c.Sigs
	if ro.n > 0 && len(sigs) > ro.n {
		sigs = sigs[len(sigs)-ro.n:]
	}
	i := 0
	for i < len(sigs)-ro.min && sigs[i].Seq <= after {
		i++
	}
	for _, g := range sigs[i:] {
		sc.Recent = append(sc.Recent, snapshot.Op{Seq: int64(g.Seq), Op: g.Func, Count: g.Count, Dtype: dtypeName(g.Datatype),
			Root: rootOf(g.Func, g.Root), T: g.Issued, Idx: rr.issue.at(g.ProcSeq)})
	}
	for _, o := range []*profile.Op{c.InFlight, c.Last} {
		if o == nil || o.Kind != profile.OpColl || o.Seq == 0 || hasSeq(sc.Recent, int64(o.Seq)) {
			continue
		}
		sc.Recent = append(sc.Recent, rr.op(o))
	}
	sort.Slice(sc.Recent, func(a, b int) bool { return sc.Recent[a].Seq < sc.Recent[b].Seq })
	marks := c.Marks
	j := 0
	for j < len(marks)-1 && marks[j].Seq <= after {
		j++
	}
	for _, m := range marks[j:] {
		sc.Marks = append(sc.Marks, snapshot.Mark{Seq: int64(m.Seq), Digest: snapshot.PluginDigest + strconv.FormatUint(m.Digest, 16), T: m.T})
	}
	if ro.delta && w != nil {
		w.sent = c.CollIssued
	}
	if n := len(sc.Recent); n > 0 && sc.Recent[n-1].Seq == sc.Count {
		last := sc.Recent[n-1]
		sc.Last = &last
	}
	return sc
}

// pluginInfo is the plugin's state of the process.
func (rr *rankRegion) pluginInfo() *snapshot.Plugin {
	p := rr.reg.Process
	info := &snapshot.Plugin{ABI: p.ABI, Version: p.Plugin, Dropped: int64(p.DroppedEvents + p.DroppedComms),
		Read: snapshot.MicrosOf(rr.readAt), Finalized: p.CommsInited > 0 && p.CommsFinalized >= p.CommsInited}
	if p.Disabled {
		info.Disabled = p.DisabledReason
		if info.Disabled == "" {
			info.Disabled = "disabled"
		}
	}
	return info
}

// comms returns the region's communicators in the order NCCL created them.
func (rr *rankRegion) comms() []*profile.Comm {
	out := make([]*profile.Comm, 0, len(rr.reg.Comms))
	for i := range rr.reg.Comms {
		out = append(out, &rr.reg.Comms[i])
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Init < out[b].Init })
	return out
}

// render is the region as a process of its own.
func (rr *rankRegion) render(ro recentOps) snapshot.Process {
	hp := rr.reg.Process
	p := snapshot.Process{Host: rr.host, PID: rr.pid, Rank: hp.Rank, LocalRank: hp.LocalRank, WorldSize: max(hp.WorldSize, 0),
		JobID: hp.JobID, NCCL: hp.NCCLVersion, CudaDev: -1, Source: snapshot.SourcePlugin, Plugin: rr.pluginInfo()}
	if p.Rank < 0 {
		// As the log's global rank: the rank in the largest communicator.
		best := 0
		for _, c := range rr.reg.Comms {
			if c.NRanks > best && c.Rank >= 0 {
				best, p.Rank = c.NRanks, c.Rank
			}
		}
	}
	now := map[commKey]snapshot.Comm{}
	for _, c := range rr.comms() {
		sc := rr.pluginComm(c, ro)
		now[commKey{slot: c.Slot, gen: c.Gen}] = sc
		p.Comms = append(p.Comms, sc)
	}
	p.Comms = rr.withFinalized(p.Comms, now)
	rr.liveness(&p)
	return p
}

// maxFinalized bounds the finalized communicators a region remembers.
const maxFinalized = 64

// withFinalized adds the communicators the process finalized while it lives on, as last
// seen and marked destroyed: the plugin frees a communicator's slot at finalize, and a rank
// that destroyed its process group and stays alive must not vanish from its communicators,
// where its peers wait for it (INFO logs say "destroyed" the same way).
func (rr *rankRegion) withFinalized(comms []snapshot.Comm, now map[commKey]snapshot.Comm) []snapshot.Comm {
	for k, sc := range rr.last {
		if _, live := now[k]; live || !rr.exitedAt.IsZero() {
			continue
		}
		sc.State, sc.Recent, sc.Marks = snapshot.CommDestroyed, nil, nil
		if sc.Done != nil {
			d := *sc.Done
			d.InFlight, d.Timing, d.Peers = nil, nil, nil
			sc.Done = &d
		}
		rr.finalized = append(rr.finalized, sc)
		if len(rr.finalized) > maxFinalized {
			rr.finalized = rr.finalized[1:]
		}
	}
	rr.last = now
	byID := map[string]int{}
	for i, c := range comms {
		byID[c.ID] = i
	}
	for _, sc := range rr.finalized {
		if i, ok := byID[sc.ID]; ok {
			if !comms[i].State.Ended() {
				comms[i].State = snapshot.CommDestroyed
			}
			continue
		}
		comms = append(comms, sc)
	}
	return comms
}

// attach adds the region to the process rendered from the same process's log.
func (rr *rankRegion) attach(p *snapshot.Process, ro recentOps) {
	p.Source, p.Plugin = snapshot.SourceBoth, rr.pluginInfo()
	if p.NCCL == "" {
		p.NCCL = rr.reg.Process.NCCLVersion
	}
	byID := map[string]int{}
	for i, c := range p.Comms {
		byID[c.ID] = i
	}
	joined := make([]bool, len(p.Comms))
	var rest []*profile.Comm
	for _, c := range rr.comms() {
		if i, ok := byID[c.ID.String()]; ok && !joined[i] {
			joined[i] = true
			p.Comms[i].Done = rr.completion(c)
			continue
		}
		rest = append(rest, c)
	}
	for _, c := range rest {
		i := splitChildFor(p.Comms, joined, c)
		if i < 0 {
			p.Comms = append(p.Comms, rr.pluginComm(c, ro))
			continue
		}
		joined[i] = true
		p.Comms[i].ID = c.ID.String()
		p.Comms[i].Done = rr.completion(c)
	}
	now := map[commKey]snapshot.Comm{}
	for _, c := range rr.comms() {
		for i := range p.Comms {
			if p.Comms[i].ID == c.ID.String() {
				now[commKey{slot: c.Slot, gen: c.Gen}] = p.Comms[i]
			}
		}
	}
	p.Comms = rr.withFinalized(p.Comms, now)
	rr.liveness(p)
}

// splitChildFor finds the log communicator a plugin communicator without a commId match
// stands for: the first, in creation order, not yet joined, live, with no commId of its
// own, of the same size and rank.
func splitChildFor(comms []snapshot.Comm, joined []bool, c *profile.Comm) int {
	for i := range comms {
		lc := &comms[i]
		if i >= len(joined) || joined[i] || lc.State.Ended() || isCommID(lc.ID) {
			continue
		}
		if lc.NRanks == c.NRanks && lc.Rank == c.Rank {
			return i
		}
	}
	return -1
}

// isCommID says whether a log identity is NCCL's own commId ("0x..." alone), which the
// plugin's would have matched.
func isCommID(id string) bool { return strings.HasPrefix(id, "0x") && !strings.Contains(id, "/") }

// liveness says what the region knows of its process: gone, or running while its lock is
// held. A log's /proc view stays when it knows more.
func (rr *rankRegion) liveness(p *snapshot.Process) {
	switch {
	case !rr.exitedAt.IsZero():
		if p.State != snapshot.ProcExited {
			at := rr.exitTime
			if at.IsZero() {
				at = rr.exitedAt
			}
			p.State, p.ExitedAt = snapshot.ProcExited, snapshot.MicrosOf(at)
		}
	case rr.alive && p.State == snapshot.ProcUnknown:
		p.State = snapshot.ProcRunning
	}
}
