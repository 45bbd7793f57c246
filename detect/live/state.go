package live

import (
	"sort"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/snapshot"
)

// History bounds per rank and communicator.
const (
	maxHistOps   = 32
	maxHistMarks = 16
)

// State is every job's latest view. Not safe for concurrent use: the detector serialises.
type State struct {
	jobs map[string]*jobState
}

type jobState struct {
	name  string
	nodes map[string]*nodeState
	// lastChange is when any node of the job last published.
	lastChange time.Time
	// ledger is the job's time accounting across evaluations: each snapshot carries only
	// the newest ops, a slowdown is judged over many steps.
	ledger *detect.Ledger
}

type nodeState struct {
	snap     *snapshot.Node
	seen     time.Time // when the detector last received this node
	lostAt   time.Time // lease expired without a clean stop (zero: not lost)
	stopped  bool      // the sidecar stopped cleanly
	hist     map[histKey]*memberHist
	received time.Time
}

type histKey struct {
	pid  int
	comm string
}

// memberHist accumulates one rank's ops and marks on one communicator across snapshots.
type memberHist struct {
	ops   []snapshot.Op
	marks []snapshot.Mark
}

// NewState returns an empty state.
func NewState() *State { return &State{jobs: map[string]*jobState{}} }

func (s *State) job(name string) *jobState {
	j := s.jobs[name]
	if j == nil {
		j = &jobState{name: name, nodes: map[string]*nodeState{}}
		s.jobs[name] = j
	}
	return j
}

// Put applies a node snapshot received at now.
func (s *State) Put(n *snapshot.Node, now time.Time) {
	j := s.job(n.Job)
	ns := j.nodes[n.Node]
	if ns == nil || (ns.snap != nil && ns.snap.Started != n.Started) {
		// A new node, or a restarted sidecar: its history starts over.
		ns = &nodeState{hist: map[histKey]*memberHist{}}
		j.nodes[n.Node] = ns
	}
	ns.snap, ns.seen, ns.lostAt, ns.stopped = n, now, time.Time{}, n.Stopping
	j.lastChange = now
	live := map[histKey]bool{}
	for pi := range n.Processes {
		p := &n.Processes[pi]
		for ci := range p.Comms {
			c := &p.Comms[ci]
			k := histKey{pid: p.PID, comm: c.ID}
			live[k] = true
			h := ns.hist[k]
			if h == nil {
				h = &memberHist{}
				ns.hist[k] = h
			}
			h.merge(c)
			// The stored snapshot carries the accumulated history itself, so that views
			// share it instead of copying every communicator each cycle.
			c.Recent, c.Marks = h.ops, h.marks
		}
	}
	for k := range ns.hist {
		if !live[k] {
			delete(ns.hist, k)
		}
	}
}

// Delete applies the removal of a node key. It returns true when the node was lost (its
// lease expired) rather than stopped cleanly.
func (s *State) Delete(job, node string, now time.Time) bool {
	j := s.jobs[job]
	if j == nil {
		return false
	}
	ns := j.nodes[node]
	if ns == nil {
		return false
	}
	if ns.stopped || ns.snap == nil {
		// A clean stop: the node stays, stopped, until the job ends (Forget).
		ns.stopped = true
		j.lastChange = now
		return false
	}
	ns.lostAt = now
	j.lastChange = now
	return true
}

// Forget drops lost nodes older than maxAge, and ends jobs whose sidecars all stopped
// cleanly (at once) or that have had no live node for maxAge.
func (s *State) Forget(now time.Time, maxAge time.Duration) (ended []string) {
	for name, j := range s.jobs {
		alive, lost := 0, 0
		for node, ns := range j.nodes {
			if !ns.lostAt.IsZero() && now.Sub(ns.lostAt) > maxAge {
				delete(j.nodes, node)
				continue
			}
			switch {
			case !ns.lostAt.IsZero():
				lost++
			case !ns.stopped:
				alive++
			}
		}
		if alive == 0 && (lost == 0 || now.Sub(j.lastChange) > maxAge) {
			delete(s.jobs, name)
			ended = append(ended, name)
		}
	}
	sort.Strings(ended)
	return ended
}

// Jobs lists job names.
func (s *State) Jobs() []string {
	out := make([]string, 0, len(s.jobs))
	for n := range s.jobs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// merge folds a snapshot's recent ops and marks into the history, keeping it sorted,
// contiguous where the snapshots were, and bounded.
func (h *memberHist) merge(c *snapshot.Comm) {
	if len(c.Recent) > 0 {
		h.ops = mergeOps(h.ops, c.Recent)
	} else if c.Last != nil {
		h.ops = mergeOps(h.ops, []snapshot.Op{*c.Last})
	}
	if len(c.Marks) > 0 {
		h.marks = mergeMarks(h.marks, c.Marks)
	}
	// A communicator restarted at a lower count (pointer reuse): drop history beyond it.
	for len(h.ops) > 0 && h.ops[len(h.ops)-1].Seq > c.Count {
		h.ops = h.ops[:len(h.ops)-1]
	}
}

func mergeOps(have, add []snapshot.Op) []snapshot.Op {
	for _, o := range add {
		i := sort.Search(len(have), func(i int) bool { return have[i].Seq >= o.Seq })
		if i < len(have) && have[i].Seq == o.Seq {
			have[i] = o
			continue
		}
		have = append(have, snapshot.Op{})
		copy(have[i+1:], have[i:])
		have[i] = o
	}
	if n := len(have) - maxHistOps; n > 0 {
		have = append(have[:0], have[n:]...)
	}
	return have
}

func mergeMarks(have, add []snapshot.Mark) []snapshot.Mark {
	for _, m := range add {
		i := sort.Search(len(have), func(i int) bool { return have[i].Seq >= m.Seq })
		if i < len(have) && have[i].Seq == m.Seq {
			have[i] = m
			continue
		}
		have = append(have, snapshot.Mark{})
		copy(have[i+1:], have[i:])
		have[i] = m
	}
	if n := len(have) - maxHistMarks; n > 0 {
		have = append(have[:0], have[n:]...)
	}
	return have
}

// View renders a job for the rules: the ranks of live nodes only, each communicator's
// recent ops and marks replaced by the accumulated history, and the nodes whose lease
// expired as Lost.
func (s *State) View(job string, now time.Time) *detect.Job {
	j := s.jobs[job]
	if j == nil {
		return detect.NewJob(job, now, nil, nil)
	}
	var procs []*detect.Proc
	var lost []*snapshot.Node
	nodes := map[string]*snapshot.Node{}
	names := make([]string, 0, len(j.nodes))
	for name := range j.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ns := j.nodes[name]
		if !ns.lostAt.IsZero() {
			lost = append(lost, ns.snap)
			continue
		}
		if ns.stopped {
			continue
		}
		nodes[name] = ns.snap
		for pi := range ns.snap.Processes {
			procs = append(procs, &detect.Proc{Process: ns.snap.Processes[pi], Node: name})
		}
	}
	view := detect.NewJob(job, now, procs, nodes)
	view.Lost = lost
	if j.ledger == nil {
		j.ledger = detect.NewLedger()
	}
	view.Ledger = j.ledger
	return view
}

// Counts reports the nodes and ranks tracked.
func (s *State) Counts() (jobs, nodes, ranks int) {
	for _, j := range s.jobs {
		jobs++
		for _, ns := range j.nodes {
			nodes++
			if ns.snap != nil && ns.lostAt.IsZero() {
				ranks += len(ns.snap.Processes)
			}
		}
	}
	return
}
