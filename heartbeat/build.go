package heartbeat

import (
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat/proc"
	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Snapshot builds the node's current snapshot. It holds each rank's lock only while that
// rank is rendered, so log reading waits at most one rank's rendering.
func (s *Sidecar) Snapshot() *snapshot.Node { return s.snapshot(false) }

// snapshot builds the node; with delta, each communicator carries the ops since the last
// delta snapshot (up to RecentOps), so that the detector, which accumulates them, sees
// every position of moderately busy communicators at one write per second.
func (s *Sidecar) snapshot(delta bool) *snapshot.Node {
	now := s.opts.Now()
	s.mu.Lock()
	ranks := make([]*rankLog, 0, len(s.ranks))
	for k, r := range s.ranks {
		r.mu.Lock()
		gone := !r.goneAt.IsZero() && now.Sub(r.goneAt) > s.opts.KeepExited
		exited := !r.exitedAt.IsZero() && now.Sub(r.exitedAt) > s.opts.KeepExited
		r.mu.Unlock()
		if gone || exited {
			// Bounded: finished processes leave the snapshot after KeepExited.
			delete(s.ranks, k)
			if s.opts.Liveness != nil && r.pid > 0 && !s.regions.watches(r.pid) {
				s.opts.Liveness.Unwatch(r.pid)
			}
			continue
		}
		ranks = append(ranks, r)
	}
	gpus := append([]snapshot.GPU(nil), s.gpus...)
	ports := append([]snapshot.Port(nil), s.ports...)
	ras := s.ras
	seq := s.seq
	s.mu.Unlock()

	sort.Slice(ranks, func(a, b int) bool {
		if ranks[a].pid != ranks[b].pid {
			return ranks[a].pid < ranks[b].pid
		}
		return ranks[a].path < ranks[b].path
	})
	n := &snapshot.Node{
		Job: s.opts.Job, Node: s.opts.Node, Seq: seq, Time: snapshot.MicrosOf(now),
		Started: snapshot.MicrosOf(s.started), GPUs: gpus, Ports: ports, RAS: ras,
		LagMS: publishedLag(s.lag()),
	}
	since := now.Add(-s.opts.RecentFor).UnixMicro()
	starts := make([]uint64, 0, len(ranks))
	for _, r := range ranks {
		n.Processes = append(n.Processes, s.renderRank(r, since, gpus, delta))
		r.mu.Lock()
		starts = append(starts, r.info.StartTicks)
		r.mu.Unlock()
	}
	n.Processes = s.regions.join(n.Processes, starts, now, s.opts.KeepExited,
		recentOps{n: s.opts.RecentOps, min: s.opts.MinRecentOps, delta: delta})
	s.addProcStats(n.Processes)
	n.Processes = s.dumps.join(n.Processes, s.opts.Node, now)
	return n
}

// addProcStats copies /proc's latest reading of each running process (its scheduler state
// and CPU use) from the liveness watcher: only of processes it watches and still sees
// running, and only once it has measured their CPU use.
func (s *Sidecar) addProcStats(procs []snapshot.Process) {
	if s.opts.Liveness == nil {
		return
	}
	for i := range procs {
		p := &procs[i]
		if p.State != snapshot.ProcRunning || p.PID <= 0 {
			continue
		}
		info, ok := s.opts.Liveness.Info(p.PID)
		if !ok || info.State != proc.Running || !isLetter(info.Sched) {
			continue
		}
		p.Stat = snapshot.SchedState([]byte{info.Sched})
		p.CPU, p.CPUPct = math.Round(info.CPUSeconds()*100)/100, info.CPUPct
		p.RunqPct = max(info.RunqPct, 0)
	}
}

func isLetter(b byte) bool { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }

func (s *Sidecar) renderRank(r *rankLog, since int64, gpus []snapshot.GPU, delta bool) snapshot.Process {
	r.mu.Lock()
	o := logparse.SnapshotOptions{Recent: s.opts.RecentOps, RecentSince: since}
	if delta {
		if r.sent == nil {
			r.sent = map[uint64]int64{}
		}
		o.After, o.MinRecent = func(ptr uint64) int64 { return r.sent[ptr] }, s.opts.MinRecentOps
	}
	p := r.tracker.Snapshot(o)
	if delta {
		clear(r.sent)
		for _, c := range r.tracker.Comms() {
			r.sent[c.Ptr] = c.Count
		}
	}
	p.File = r.path
	if p.Host == "" {
		p.Host = r.host
	}
	if p.PID == 0 {
		p.PID = r.pid
	}
	switch {
	case !r.exitedAt.IsZero():
		p.State, p.ExitedAt = snapshot.ProcExited, snapshot.MicrosOf(r.exitedAt)
	case r.watched && r.info.State == proc.Running:
		p.State = snapshot.ProcRunning
	}
	if r.watched && !r.info.EnvKnown && s.opts.Liveness != nil {
		if info, ok := s.opts.Liveness.Info(r.pid); ok && info.EnvKnown {
			r.info.Env, r.info.EnvKnown = info.Env, true
		}
	}
	if r.info.EnvKnown {
		env := r.info.Env
		if env.Rank >= 0 {
			p.Rank = env.Rank
		}
		if env.LocalRank >= 0 {
			p.LocalRank = env.LocalRank
		}
		if env.WorldSize > 0 {
			p.WorldSize = env.WorldSize
		}
		p.JobID = env.JobID()
	}
	r.mu.Unlock()
	p.Events = append(p.Events, s.torch.forProcess(p.Rank, p.PID)...)
	if g := gpuFor(gpus, p.BusID); g != nil {
		p.GPUState = g.State
		if g.State == snapshot.GPUWaiting {
			markWaiting(&p)
		}
	}
	return p
}

// gpuFor finds the GPU whose packed bus id matches NCCL's busId.
func gpuFor(gpus []snapshot.GPU, bus string) *snapshot.GPU {
	if bus == "" {
		return nil
	}
	want := strings.TrimLeft(strings.ToLower(bus), "0")
	for i := range gpus {
		if strings.TrimLeft(strings.ToLower(gpus[i].BusID), "0") == want {
			return &gpus[i]
		}
	}
	return nil
}

// markWaiting flags the communicator holding the process's newest op: with a spinning GPU,
// that is the collective it waits in.
func markWaiting(p *snapshot.Process) {
	best := -1
	var newest snapshot.Micros
	for i, c := range p.Comms {
		if c.Last != nil && c.Last.T >= newest && c.State != snapshot.CommDestroyed {
			best, newest = i, c.Last.T
		}
	}
	if best >= 0 {
		p.Comms[best].Waiting = true
	}
}

// encode is the publisher's source. The content is compared without the volatile header
// (sequence number, time): an unchanged node returns the previous bytes, which the
// publisher does not rewrite.
func (s *Sidecar) encode() ([]byte, error) {
	if p, ok := s.opts.Publisher.(interface{ Every() time.Duration }); ok {
		s.publishLag.wake(time.Now(), p.Every())
	}
	n := s.snapshot(true)
	n.Seq, n.Time = 0, 0
	body, err := snapshot.Encode(n)
	if err != nil {
		return nil, err
	}
	s.encMu.Lock()
	defer s.encMu.Unlock()
	if s.lastBody != nil && string(body) == string(s.lastBody) {
		return s.lastOut, nil
	}
	s.mu.Lock()
	s.seq++
	n.Seq = s.seq
	s.mu.Unlock()
	n.Time = snapshot.MicrosOf(s.opts.Now())
	out, err := snapshot.Encode(n)
	if err != nil {
		return nil, err
	}
	s.lastBody, s.lastOut = body, out
	return out, nil
}

// rankLogs is the followed ranks now, taken under s.mu so that each can then be read under
// its own lock.
func (s *Sidecar) rankLogs() []*rankLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	ranks := make([]*rankLog, 0, len(s.ranks))
	for _, r := range s.ranks {
		ranks = append(ranks, r)
	}
	return ranks
}

// OwnsRank says whether a rank in a RAS report (host as NCCL prints it, an IP address, and
// pid) is one of this node's processes. RAS reports the whole job on every node; a sidecar
// keeps only its own ranks' counts (ras.Client.Keep), so a node snapshot stays kilobytes.
func (s *Sidecar) OwnsRank(host string, pid int) bool {
	for _, r := range s.rankLogs() {
		if r.pid != pid {
			continue
		}
		r.mu.Lock()
		addrs := r.tracker.Addrs
		r.mu.Unlock()
		if len(addrs) == 0 {
			return true
		}
		for _, a := range addrs {
			if a == host {
				return true
			}
		}
	}
	return false
}

// lag is the worst lateness of the sidecar's sampling and publishing lately.
func (s *Sidecar) lag() time.Duration {
	now := time.Now()
	return max(s.sampleLag.worst(now), s.publishLag.worst(now))
}
