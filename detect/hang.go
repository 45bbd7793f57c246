package detect

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Config holds the rule settings.
type Config struct {
	// HangFloor and HangK set the hang window: max(HangFloor, HangK × the communicator's
	// recent p99 gap between ops).
	HangFloor time.Duration `yaml:"hang_floor"`
	HangK     float64       `yaml:"hang_k"`
	// A straggler's median arrival lag must exceed max(StragglerMinLag,
	// StragglerFraction × step period) over at least StragglerMinSamples positions.
	StragglerMinLag     time.Duration `yaml:"straggler_min_lag"`
	StragglerFraction   float64       `yaml:"straggler_fraction"`
	StragglerWindow     int           `yaml:"straggler_window"`
	StragglerMinSamples int           `yaml:"straggler_min_samples"`
	// ExpectedIBGbps, when set, is the rate every IB port must run at; otherwise a port is
	// judged against the job's usual rate.
	ExpectedIBGbps float64 `yaml:"expected_ib_gbps"`
	// XmitWaitPerSecond above which a port is called congested.
	XmitWaitPerSecond float64 `yaml:"xmit_wait_per_second"`
	// EventMaxAge ignores WARN events and XIDs older than this (live).
	EventMaxAge time.Duration `yaml:"event_max_age"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		HangFloor:           10 * time.Second,
		HangK:               4,
		StragglerMinLag:     20 * time.Millisecond,
		StragglerFraction:   0.05,
		StragglerWindow:     64,
		StragglerMinSamples: 8,
		XmitWaitPerSecond:   1e6,
		EventMaxAge:         10 * time.Minute,
	}
}

// HangWindow is how long a communicator may sit still, given its recent pace.
func (c Config) HangWindow(g *Group) time.Duration {
	gaps := recentGaps(g)
	w := c.HangFloor
	if len(gaps) >= 4 {
		sort.Slice(gaps, func(a, b int) bool { return gaps[a] < gaps[b] })
		p99 := gaps[min(len(gaps)-1, len(gaps)*99/100)]
		if d := time.Duration(c.HangK * float64(p99) * float64(time.Microsecond)); d > w {
			w = d
		}
	}
	return w
}

// recentGaps are the µs between successive ops of the most advanced member.
func recentGaps(g *Group) []int64 {
	var best *snapshot.Comm
	for _, m := range g.Members {
		if best == nil || m.Comm.Count > best.Count {
			best = m.Comm
		}
	}
	if best == nil {
		return nil
	}
	var gaps []int64
	r := best.Recent
	for i := 1; i < len(r); i++ {
		if r[i].Seq == r[i-1].Seq+1 && r[i].T > 0 && r[i-1].T > 0 && r[i].T >= r[i-1].T {
			gaps = append(gaps, int64(r[i].T-r[i-1].T))
		}
	}
	return gaps
}

// lastProgress is the newest op time of any member on the communicator.
func lastProgress(g *Group) snapshot.Micros {
	var t snapshot.Micros
	for _, m := range g.Members {
		if m.Comm.Last != nil && m.Comm.Last.T > t {
			t = m.Comm.Last.T
		}
		for _, p := range m.Comm.P2P {
			t = max(t, p.LastSend, p.LastRecv)
		}
	}
	return t
}

// stalled says whether a communicator has not moved for its hang window (live), or is in
// its final state (offline: a communicator destroyed by every member is not stalled).
func stalled(j *Job, g *Group, cfg Config) (bool, time.Duration) {
	if j.Offline {
		for _, m := range g.Members {
			if m.Comm.State != snapshot.CommDestroyed {
				return true, 0
			}
		}
		return false, 0
	}
	last := lastProgress(g)
	if last == 0 {
		return false, 0
	}
	still := j.Now.Sub(last.Time())
	return still >= cfg.HangWindow(g), still
}

type behind struct {
	group   *Group
	member  Member
	leader  Member // the most advanced member
	awaited *snapshot.Op
	still   time.Duration
}

// Hang finds ranks whose collective count on a communicator is below the others' while the
// communicator does not move: they are the culprits, the others only wait. One finding per
// culprit process, however many communicators it stalled.
func Hang(j *Job, cfg Config) []Finding {
	byProc := map[string][]behind{}
	var order []string
	for _, g := range j.Groups {
		if len(g.Members) < 2 {
			continue
		}
		lo, hi := int64(1<<62), int64(-1)
		var leader Member
		for _, m := range g.Members {
			lo = min(lo, m.Comm.Count)
			if m.Comm.Count > hi {
				hi, leader = m.Comm.Count, m
			}
		}
		if lo == hi {
			continue
		}
		ok, still := stalled(j, g, cfg)
		if !ok {
			continue
		}
		for _, m := range g.Members {
			if m.Comm.Count != lo {
				continue
			}
			k := m.Proc.Key()
			if _, seen := byProc[k]; !seen {
				order = append(order, k)
			}
			byProc[k] = append(byProc[k], behind{group: g, member: m, leader: leader,
				awaited: opAt(leader.Comm, lo+1), still: still})
		}
	}
	var out []Finding
	for _, k := range order {
		out = append(out, hangFinding(j, byProc[k]))
	}
	return out
}

func hangFinding(j *Job, bs []behind) Finding {
	first := bs[0]
	p := first.member.Proc
	victims := map[string]bool{}
	for _, b := range bs {
		for _, m := range b.group.Members {
			if m.Comm.Count > b.member.Comm.Count {
				victims[m.Proc.Key()] = true
			}
		}
	}
	f := Finding{Kind: incident.KindHang, Severity: incident.SeverityCritical, Comm: first.group.ID,
		Seq: first.member.Comm.Count + 1, Culprits: []incident.Culprit{p.Culprit()}, Victims: len(victims),
		culpritKeys: []string{p.Key()}, Key: "rank:" + p.Key()}
	waitIn := ""
	if first.awaited != nil {
		waitIn = " " + describeOp(first.awaited)
		f.Ops = map[string]incident.Op{fmt.Sprint(first.leader.Comm.Rank): Op(first.awaited)}
	}
	more := ""
	if len(bs) > 1 {
		more = fmt.Sprintf("; it stalled %d communicators", len(bs))
	}
	f.Summary = fmt.Sprintf("%s stopped issuing collectives after position %d of communicator %s; %s reached position %d and waits in op %d%s (%d rank(s) waiting)%s",
		p.Name(), first.member.Comm.Count, shortComm(first.group.ID), first.leader.Proc.Name(),
		first.leader.Comm.Count, first.member.Comm.Count+1, waitIn, len(victims), more)
	for _, b := range bs {
		m := b.member
		last := "no op yet"
		if m.Comm.Last != nil {
			last = "its last op was " + describeOp(m.Comm.Last)
		}
		f.addEvidence("communicator %s (%d ranks): %s is at %d, %s; %s is at %d", shortComm(b.group.ID), b.group.NRanks,
			p.Name(), m.Comm.Count, last, b.leader.Proc.Name(), b.leader.Comm.Count)
		if b.still > 0 {
			f.addEvidence("communicator %s has not moved for %s", shortComm(b.group.ID), b.still.Round(100*time.Millisecond))
		}
	}
	if first.member.Comm.Last != nil && first.member.Comm.Last.T != 0 {
		f.FaultAt = first.member.Comm.Last.T.Time()
	}
	processEvidence(j, p, &f)
	return f
}

// processEvidence adds what is known about a culprit process: liveness and its GPU.
func processEvidence(j *Job, p *Proc, f *Finding) {
	switch p.State {
	case snapshot.ProcExited:
		f.addEvidence("the process has exited (at %s)", fmtTime(p.ExitedAt.Time()))
	case snapshot.ProcRunning:
		f.addEvidence("the process is still alive")
	}
	if g := gpuOf(j, p); g != nil {
		f.addEvidence("its GPU %d: %s", g.Index, describeGPU(g))
		switch g.State {
		case snapshot.GPUIdle:
			f.addEvidence("its GPU is idle: the host code is stuck before the collective (data loader, deadlock, I/O), not NCCL")
		case snapshot.GPUWaiting:
			f.addEvidence("its GPU spins in an NCCL kernel: it waits on a collective of another communicator")
		}
	}
	if p.LastLine != 0 && !j.Offline {
		f.addEvidence("its last NCCL log line was %s ago", j.Now.Sub(p.LastLine.Time()).Round(100*time.Millisecond))
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "unknown time"
	}
	return t.UTC().Format("15:04:05.000Z")
}

// gpuOf finds the GPU sample of a process's device by bus id on its node.
func gpuOf(j *Job, p *Proc) *snapshot.GPU {
	n := j.Nodes[p.Node]
	if n == nil {
		return nil
	}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if p.BusID != "" && strings.EqualFold(strings.TrimLeft(g.BusID, "0"), strings.TrimLeft(p.BusID, "0")) {
			return g
		}
	}
	return nil
}

func describeGPU(g *snapshot.GPU) string {
	s := fmt.Sprintf("%d%% util, %.0f W", g.Util, g.PowerW)
	if g.PowerLimitW > 0 {
		s += fmt.Sprintf(" of %.0f W", g.PowerLimitW)
	}
	if g.SMClockMHz > 0 {
		s += fmt.Sprintf(", SM %d MHz", g.SMClockMHz)
		if g.SMMaxMHz > 0 {
			s += fmt.Sprintf(" of %d", g.SMMaxMHz)
		}
	}
	if g.TempC > 0 {
		s += fmt.Sprintf(", %d C", g.TempC)
	}
	if len(g.Reasons) > 0 {
		s += ", clock events " + strings.Join(g.Reasons, "+")
	}
	if g.State != "" {
		s += ", state " + string(g.State)
	}
	return s
}

// P2PMismatch finds Sends from a to b that do not equal b's Recvs from a, once the
// communicator has stopped moving. The rank with fewer posted is the culprit.
func P2PMismatch(j *Job, cfg Config) []Finding {
	byProc := map[string]*Finding{}
	var order []string
	for _, g := range j.Groups {
		if len(g.Members) < 2 {
			continue
		}
		byRank := map[int]Member{}
		for _, m := range g.Members {
			byRank[m.Comm.Rank] = m
		}
		ok, _ := stalled(j, g, cfg)
		if !ok {
			continue
		}
		for _, a := range g.Members {
			for _, pa := range a.Comm.P2P {
				b, ok := byRank[pa.Peer]
				if !ok {
					continue
				}
				recvs := int64(0)
				for _, pb := range b.Comm.P2P {
					if pb.Peer == a.Comm.Rank {
						recvs = pb.Recvs
					}
				}
				if pa.Sends == recvs {
					continue
				}
				culprit, other := b, a
				what := fmt.Sprintf("rank %d sent %d times to rank %d, which posted only %d receives", a.Comm.Rank, pa.Sends, b.Comm.Rank, recvs)
				if pa.Sends < recvs {
					culprit, other = a, b
					what = fmt.Sprintf("rank %d posted %d receives from rank %d, which sent only %d times", b.Comm.Rank, recvs, a.Comm.Rank, pa.Sends)
				}
				k := culprit.Proc.Key()
				f := byProc[k]
				if f == nil {
					f = &Finding{Kind: incident.KindP2PMismatch, Severity: incident.SeverityCritical, Comm: g.ID,
						Culprits: []incident.Culprit{culprit.Proc.Culprit()}, culpritKeys: []string{k}, Key: "rank:" + k}
					f.Summary = fmt.Sprintf("point-to-point mismatch on communicator %s: %s; culprit %s",
						shortComm(g.ID), what, culprit.Proc.Name())
					byProc[k] = f
					order = append(order, k)
				}
				f.Victims++
				f.addEvidence("communicator %s: %s (peer %s)", shortComm(g.ID), what, other.Proc.Name())
			}
		}
	}
	var out []Finding
	for _, k := range order {
		out = append(out, *byProc[k])
	}
	return out
}
