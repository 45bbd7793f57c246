package jobsim

import (
	"fmt"
	"time"
)

// resolvedFault is a Fault checked against the job, with its op chosen.
type resolvedFault struct {
	Fault
	index int
	op    int // index in the rank's plan (op faults), -1 otherwise
	rank  *simRank
	hca   int // ib-port: the HCA index
}

func (s *Sim) resolveFaults() error {
	for i, f := range s.cfg.Faults {
		if f.Rank < 0 || f.Rank >= len(s.ranks) {
			return fmt.Errorf("jobsim: fault %s: rank %d of %d", f, f.Rank, len(s.ranks))
		}
		if f.Step < 0 || f.Step >= s.cfg.Steps {
			return fmt.Errorf("jobsim: fault %s: step %d of %d", f, f.Step, s.cfg.Steps)
		}
		r := s.ranks[f.Rank]
		rf := resolvedFault{Fault: f, index: i, op: -1, rank: r, hca: r.hca}
		switch f.Kind {
		case FaultSkip, FaultWrongOp, FaultWrongSize, FaultWrongDtype:
			rf.op = f.Op
			if rf.op < 0 {
				rf.op = s.defaultOp(r, f.Kind)
			}
			if rf.op < 0 || rf.op >= len(r.plan) || !r.plan[rf.op].coll {
				return fmt.Errorf("jobsim: fault %s: op %d is not a collective of rank %d's step (see StepOps)", f, rf.op, f.Rank)
			}
			if f.Kind == FaultWrongSize && f.Count == r.plan[rf.op].count {
				return fmt.Errorf("jobsim: fault %s: count %d is the right one", f, f.Count)
			}
		case FaultSilent, FaultCrash:
			rf.op = max(f.Op, 0)
			if rf.op >= len(r.plan) {
				return fmt.Errorf("jobsim: fault %s: op %d of %d ops in rank %d's step", f, rf.op, len(r.plan), f.Rank)
			}
		case FaultStraggler:
			if f.Delay <= 0 {
				return fmt.Errorf("jobsim: fault %s: a straggler needs a Delay", f)
			}
		case FaultPause:
			if f.Duration <= 0 {
				return fmt.Errorf("jobsim: fault %s: a pause needs a Duration", f)
			}
		case FaultIBPort:
			if f.Port != "" {
				var n int
				if _, err := fmt.Sscanf(f.Port, "mlx5_%d", &n); err != nil || n < 0 || n >= hcaCount || fmt.Sprintf("mlx5_%d", n) != f.Port {
					return fmt.Errorf("jobsim: fault %s: port %q: want mlx5_0 to mlx5_%d", f, f.Port, hcaCount-1)
				}
				rf.hca = n
			}
		case FaultXID:
			if rf.XID == 0 {
				rf.XID = 48
			}
		case FaultStuck:
		default:
			return fmt.Errorf("jobsim: fault %s: unknown kind", f)
		}
		s.faults = append(s.faults, rf)
	}
	return nil
}

// defaultOp: a tensor-parallel op for a skip (later ops of the step follow it on the same
// communicator, so the shift shows), the first data-parallel AllReduce for the wrong-* kinds
// (a group of one rank per node, as in the real mismatch capture).
func (s *Sim) defaultOp(r *simRank, k FaultKind) int {
	want := []CommKind{CommDP, CommTP, CommWorld}
	if k == FaultSkip {
		want = []CommKind{CommTP, CommDP, CommWorld}
	}
	for _, c := range want {
		for i, op := range r.plan {
			if op.coll && op.comm == c && (k == FaultSkip || op.name == "AllReduce") {
				return i
			}
		}
	}
	for i, op := range r.plan {
		if op.coll {
			return i
		}
	}
	return -1
}

// schedule is the job's timeline, in nanoseconds from the job's start.
type schedule struct {
	base     int64 // Unix ns of offset 0
	initDur  int64
	start    []int64 // per step that runs
	baseDur  []int64 // the period without stragglers
	dur      []int64
	pause    []int64 // pause before the step
	hangStep int     // the step after which the job hangs; -1 for none
	last     int     // the last step that runs
	end      int64   // the clean end (Destroy lines)
	noiseMax int64
	gap      int64 // spacing of consecutive lines of one burst (init, destroy)
	byStep   map[int][]*resolvedFault
}

func (s *Sim) buildSchedule() {
	c := &s.cfg
	T := int64(c.StepTime)
	sc := schedule{base: c.Start.UnixNano(), hangStep: -1, byStep: map[int][]*resolvedFault{}}
	sc.initDur = min(max(2*T, int64(20*time.Millisecond)), int64(2*time.Second))
	sc.noiseMax = max(min(int64(300*time.Microsecond), T/400), 1000)
	sc.gap = max(min(sc.initDur/4000, int64(500*time.Microsecond)), 2000)
	for i := range s.faults {
		f := &s.faults[i]
		sc.byStep[f.Step] = append(sc.byStep[f.Step], f)
		if f.hangs() && (sc.hangStep < 0 || f.Step < sc.hangStep) {
			sc.hangStep = f.Step
		}
	}
	sc.last = c.Steps - 1
	if sc.hangStep >= 0 {
		sc.last = sc.hangStep
	}
	t := sc.initDur
	for st := 0; st <= sc.last; st++ {
		var pause int64
		for _, f := range sc.byStep[st] {
			if f.Kind == FaultPause {
				pause += int64(f.Duration)
			}
		}
		t += pause
		bd := T + int64(float64(c.Jitter)*(2*s.unit(purposeJitter, uint64(st))-1))
		bd = max(bd, T/10)
		var extra int64
		for i := range s.faults {
			if f := &s.faults[i]; f.Kind == FaultStraggler {
				extra = max(extra, s.lag(f.rank, st))
			}
		}
		sc.pause = append(sc.pause, pause)
		sc.start = append(sc.start, t)
		sc.baseDur = append(sc.baseDur, bd)
		sc.dur = append(sc.dur, bd+extra)
		t += bd + extra
	}
	sc.end = t + sc.gap*10
	s.sched = sc
}

// lag is how late a rank arrives at its collectives in a step.
func (s *Sim) lag(r *simRank, step int) int64 {
	var d int64
	for i := range s.faults {
		f := &s.faults[i]
		if f.Kind == FaultStraggler && f.rank == r && step >= f.Step {
			d += int64(f.Delay)
		}
	}
	return d
}

// opTime is when a rank issues op k of a step.
func (s *Sim) opTime(r *simRank, step, k int) int64 {
	sc := &s.sched
	t := sc.start[step] + int64(r.plan[k].frac*float64(sc.baseDur[step])) + s.lag(r, step)
	return t + int64(s.rnd(purposeNoise, uint64(r.Rank), uint64(step), uint64(k))%uint64(sc.noiseMax))
}

// positions gives, for each communicator of the rank, the 1-based position of its first
// collective at or after op k of a step (k == len(plan) means the step's end).
func (s *Sim) positions(r *simRank, step, k int) map[string]int64 {
	out := map[string]int64{}
	for c, cr := range r.comms {
		if cr == nil {
			continue
		}
		seq := int64(step) * r.perStep[c]
		for _, op := range r.plan[:k] {
			if op.coll && op.comm == CommKind(c) {
				seq++
			}
		}
		out[cr.g.id] = seq + 1
	}
	return out
}

// collPosition is the 1-based position of collective op k of a step on its communicator.
func (s *Sim) collPosition(r *simRank, step, k int) int64 {
	c := r.plan[k].comm
	seq := int64(step) * r.perStep[c]
	for _, op := range r.plan[:k+1] {
		if op.coll && op.comm == c {
			seq++
		}
	}
	return seq
}
