// Package detect holds the rules that name the culprit of a hang, a mismatch, a crash, a
// straggler, a degraded link or a GPU fault. Rules are pure functions of a Job (the ranks of
// one job as snapshots, live from etcd or rebuilt offline from log files) and a clock.
package detect

import (
	"fmt"
	"runtime"
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
func (p *Proc) Key() string { return p.Host + ":" + strconv.Itoa(p.PID) }

// Culprit renders the process as an incident culprit.
func (p *Proc) Culprit() incident.Culprit {
	c := incident.Culprit{Rank: p.Rank, Host: p.Host, PID: p.PID}
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
	switch {
	case p.Rank >= 0:
		return fmt.Sprintf("rank %d (%s pid %d)", p.Rank, p.Host, p.PID)
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
	n := len(j.Groups)
	workers := min(runtime.GOMAXPROCS(0), n/64+1)
	if workers <= 1 {
		for i, g := range j.Groups {
			fn(i, g)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i, j.Groups[i])
			}
		}()
	}
	wg.Wait()
}

// Finding is one rule's verdict about one root cause.
type Finding struct {
	Kind       incident.Kind
	Severity   incident.Severity
	Comm       string
	Seq        int64
	Culprits   []incident.Culprit
	Victims    int
	Ops        map[string]incident.Op
	LagSeconds float64
	Summary    string
	Evidence   []string
	// FaultAt estimates when the condition began (zero when unknown).
	FaultAt time.Time
	// Key identifies the root cause across evaluations: equal keys are one incident.
	Key string
	// culpritKeys are the host:pid of culprit processes, for merging findings.
	culpritKeys []string
}

func (f *Finding) addEvidence(format string, args ...any) {
	if len(f.Evidence) < 24 {
		f.Evidence = append(f.Evidence, fmt.Sprintf(format, args...))
	}
}

// Op renders a snapshot op as an incident op.
func Op(o *snapshot.Op) incident.Op {
	return incident.Op{Op: o.Op, Count: o.Count, Datatype: o.Dtype, RedOp: o.Red, Root: o.Root}
}

// SameSignature reports whether two ranks issued the same call at one position.
func SameSignature(a, b *snapshot.Op) bool {
	return a.Op == b.Op && a.Count == b.Count && a.Dtype == b.Dtype && a.Red == b.Red && a.Root == b.Root
}

// describeOp is "AllReduce(count 250000 float32 sum)".
func describeOp(o *snapshot.Op) string {
	s := fmt.Sprintf("%s(count %d %s", o.Op, o.Count, o.Dtype)
	if o.Red != "" {
		s += " " + o.Red
	}
	if o.Root != 0 {
		s += fmt.Sprintf(" root %d", o.Root)
	}
	return s + ")"
}

// opAt finds a member's op at a sequence position among its recent and last ops.
func opAt(c *snapshot.Comm, seq int64) *snapshot.Op {
	if c.Last != nil && c.Last.Seq == seq {
		return c.Last
	}
	r := c.Recent
	if len(r) == 0 {
		return nil
	}
	// Recent is ordered by Seq and usually contiguous.
	if i := seq - r[0].Seq; i >= 0 && i < int64(len(r)) && r[i].Seq == seq {
		return &r[i]
	}
	i := sort.Search(len(r), func(i int) bool { return r[i].Seq >= seq })
	if i < len(r) && r[i].Seq == seq {
		return &r[i]
	}
	return nil
}

// shortComm abbreviates a communicator identity for sentences.
func shortComm(id string) string {
	if len(id) > 40 {
		return id[:37] + "..."
	}
	return id
}
