package detect

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Proc is one rank process of a job.
type Proc struct {
	snapshot.Process
	Node string // the node that reported it (sidecar node name; the host offline)
}

// Key identifies a process across the job.
func (p *Proc) Key() string {
	if p.Host == "?" && p.PID == 0 {
		// Known by its rank alone (PyTorch's lines): one process per rank.
		return "?:rank" + strconv.Itoa(p.Rank)
	}
	return p.Host + ":" + strconv.Itoa(p.PID)
}

// Culprit renders the process as an incident culprit.
func (p *Proc) Culprit() incident.Culprit {
	c := incident.Culprit{Rank: p.Rank, Host: p.Host, PID: max(p.PID, 0)}
	if c.Host == "?" {
		// Known by its rank alone (PyTorch's lines).
		c.Host = ""
	}
	switch {
	case p.CudaDev >= 0 && p.BusID != "":
		c.GPU = fmt.Sprintf("%d (bus %s)", p.CudaDev, p.BusID)
	case p.CudaDev >= 0:
		c.GPU = strconv.Itoa(p.CudaDev)
	}
	return c
}

// Name is "rank N (host pid P)" for sentences.
func (p *Proc) Name() string {
	if p.PID < 0 {
		// Known from its peers only (missingLocal).
		if p.Rank >= 0 {
			return fmt.Sprintf("rank %d (%s local rank %d, no log)", p.Rank, p.Host, p.LocalRank)
		}
		return fmt.Sprintf("local rank %d of %s (no log)", p.LocalRank, p.Host)
	}
	switch {
	case p.Rank >= 0 && p.PID == 0:
		return fmt.Sprintf("rank %d", p.Rank)
	case p.Rank >= 0:
		return fmt.Sprintf("rank %d (%s pid %d)", p.Rank, p.Host, p.PID)
	case p.PID == 0 && p.Host != "" && p.Host != "?":
		// nccl-tests named its host, not its pid.
		return "a process on " + p.Host
	case p.PID == 0 && p.LocalRank < 0 && p.Lines > 0:
		// NCCL lines whose "host:pid:tid" prefix the poster or a collector cut away.
		return "a rank (its lines carry no host:pid)"
	case p.PID == 0 && p.LocalRank < 0:
		return "a rank (PyTorch's output does not say which)"
	case p.LocalRank >= 0:
		return fmt.Sprintf("local rank %d (%s pid %d)", p.LocalRank, p.Host, p.PID)
	}
	return fmt.Sprintf("%s pid %d", p.Host, p.PID)
}

// Member is one process's view of a communicator.
type Member struct {
	Proc *Proc
	Comm *snapshot.Comm
}

// Group is one communicator across the ranks that reported it.
type Group struct {
	ID      string
	NRanks  int
	Members []Member // ordered by communicator rank
}

// Job is what the rules judge.
type Job struct {
	Name   string
	Now    time.Time
	Procs  []*Proc
	Groups []*Group
	Nodes  map[string]*snapshot.Node // GPU, port and RAS samples by node (live only)
	// Offline is set for post-mortem analysis of finished logs: state at the end of the
	// logs is judged as final, without hang windows.
	Offline bool

	// What the live detector saw in etcd besides the snapshots (all zero offline).
	// Lost are the nodes whose lease expired without a clean stop, as last reported.
	Lost []*snapshot.Node
	// LeaseLosses are when the job's node leases expired, one per expiry the detector
	// watched: a node lost twice counts twice, and a reload from etcd adds none, so that
	// a detector catching up after a watch failure does not see a mass loss.
	LeaseLosses []time.Time
	// EtcdDownSince is when the detector lost etcd (zero: reachable).
	EtcdDownSince time.Time
	// InputLag is how late the inputs may be (the sidecars' own sampling and publish lag,
	// the detector's evaluation lag): it widens the hang and completion windows, so that a
	// starved watchdog never blames a rank for its own lateness.
	InputLag time.Duration
	// Ledger is the job's time accounting across evaluations (the live detector keeps one
	// per job); nil: a fresh one from this job's history alone, as offline.
	Ledger *Ledger
}

// NewJob groups the processes' communicators by cross-rank identity.
func NewJob(name string, now time.Time, procs []*Proc, nodes map[string]*snapshot.Node) *Job {
	j := &Job{Name: name, Now: now, Procs: procs, Nodes: nodes}
	byID := map[string]*Group{}
	for _, p := range procs {
		for i := range p.Comms {
			c := &p.Comms[i]
			if c.ID == "" || c.Rank < 0 {
				continue
			}
			g := byID[c.ID]
			if g == nil {
				g = &Group{ID: c.ID, NRanks: c.NRanks}
				byID[c.ID] = g
				j.Groups = append(j.Groups, g)
			}
			g.Members = append(g.Members, Member{Proc: p, Comm: c})
		}
	}
	for _, g := range j.Groups {
		sort.SliceStable(g.Members, func(a, b int) bool { return g.Members[a].Comm.Rank < g.Members[b].Comm.Rank })
	}
	sort.SliceStable(j.Groups, func(a, b int) bool {
		if j.Groups[a].NRanks != j.Groups[b].NRanks {
			return j.Groups[a].NRanks > j.Groups[b].NRanks
		}
		return j.Groups[a].ID < j.Groups[b].ID
	})
	return j
}

// eachGroup runs fn on every group, in parallel across GOMAXPROCS workers: groups are
// independent, and a 100k-rank job has thousands. fn must only write to its own index.
func (j *Job) eachGroup(fn func(i int, g *Group)) {
	parallel(len(j.Groups), 64, func(i int) { fn(i, j.Groups[i]) })
}

// parallel runs fn(0..n-1) on up to GOMAXPROCS workers, one per grain items at least, so
// that small inputs stay on the caller's goroutine. fn must only write to its own index.
func parallel(n, grain int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n/max(grain, 1)+1)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[string]
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				// A rule's bug must reach the caller's goroutine, where the detector
				// recovers it for this job alone, not end the process from a worker.
				if r := recover(); r != nil {
					msg := fmt.Sprintf("%v\n%s", r, debug.Stack())
					failed.CompareAndSwap(nil, &msg)
				}
			}()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
	if msg := failed.Load(); msg != nil {
		panic(*msg)
	}
}
