package detect

import (
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The Megatron deadlock: four ranks, a world communicator and two tensor-parallel groups
// ({0,1} and {2,3}, split from the world). Each step every rank calls its tensor-parallel
// AllReduce, then the world AllReduce; the ranks in `inverted` call the world one first.

const world, tp0, tp1 = "0xw0r1d", "0xw0r1d/s1c0", "0xw0r1d/s2c1"

// megatron builds the ranks after `steps` steps; extra[r] more calls of rank r's next step
// (1: only its first call of it).
func megatron(steps int, inverted map[int]bool, extra map[int]int, plugin bool) []*Proc {
	var ps []*Proc
	for r := 0; r < 4; r++ {
		tp := tp0
		if r >= 2 {
			tp = tp1
		}
		p := &Proc{Process: snapshot.Process{Host: "node" + string(rune('0'+r)), PID: 100 + r, Rank: r, CudaDev: 0, BusID: "1b000",
			Comms: []snapshot.Comm{{ID: world, Rank: r, NRanks: 4, State: "ready"}, {ID: tp, Rank: r % 2, NRanks: 2, State: "ready"}}},
			Node: "node" + string(rune('0'+r))}
		if plugin {
			p.Source = snapshot.SourcePlugin
		}
		idx := int64(0)
		call := func(c *snapshot.Comm, s int, o snapshot.Op) {
			idx++
			c.Count++
			o.Seq, o.Idx, o.T = c.Count, idx, us(time.Duration(s)*100*time.Millisecond+time.Duration(idx)*time.Millisecond)
			c.Recent = append(c.Recent, o)
			last := o
			c.Last = &last
		}
		for s := 1; s <= steps+1; s++ {
			calls := []int{1, 0} // tensor-parallel, then world
			if inverted[r] {
				calls = []int{0, 1}
			}
			n := 2
			if s == steps+1 {
				n = extra[r]
			}
			for _, ci := range calls[:n] {
				o := snapshot.Op{Op: "AllReduce", Count: 5000, Dtype: "float32", Red: "sum"}
				if ci == 1 {
					o.Count = 1000
				}
				call(&p.Comms[ci], s, o)
			}
		}
		ps = append(ps, p)
	}
	return ps
}

// mjob is job without its setting every communicator's size to the number of ranks.
func mjob(now time.Duration, ps ...*Proc) *Job {
	return NewJob("j", t0.Add(now), ps, map[string]*snapshot.Node{})
}

func TestOrderInversionNamesTheRankThatCalledOutOfOrder(t *testing.T) {
	cfg := DefaultConfig()
	for _, c := range []struct {
		name  string
		extra map[int]int
	}{
		{"every rank issued both", nil},
		{"every rank issued both, some a step ahead", map[int]int{2: 2, 3: 2}},
		// Rank 1's host stopped right after its first call: it issued the world op only.
		{"the culprit issued one of the two", map[int]int{0: 2, 1: 1, 2: 2, 3: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := mjob(0, megatron(20, map[int]bool{1: true}, c.extra, false)...)
			j.Offline = true
			f := only(t, FindHangs(j, cfg).Inversions, incident.KindOrderInversion)
			if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.Key != "rank:node1:101" || f.Comm != tp0 {
				t.Fatalf("culprits %v key %s comm %s: %s", got, f.Key, f.Comm, f.Summary)
			}
			if !strings.Contains(f.Summary, "AllReduce(count 5000 float32 sum) on communicator "+world+" before ") ||
				!strings.Contains(f.Summary, "on communicator "+tp0) ||
				!strings.Contains(strings.Join(f.Evidence, "\n"), "ranks 2 and 3, in the sibling communicator "+tp1+", called theirs before") {
				t.Fatalf("%s\n%s", f.Summary, strings.Join(f.Evidence, "\n"))
			}
		})
	}
}

// TestOrderInversionLiveReplacesStuckInFlight: live, with INFO logs, every rank is level and
// its GPU spins: the rule for stuck collectives blamed the network and rank 0; the inversion
// explains it, and is the one incident.
func TestOrderInversionLiveReplacesStuckInFlight(t *testing.T) {
	j := mjob(2100*time.Millisecond+15*time.Second, megatron(20, map[int]bool{1: true}, nil, false)...)
	j.Nodes = map[string]*snapshot.Node{}
	for r := 0; r < 4; r++ {
		n := "node" + string(rune('0'+r))
		j.Nodes[n] = gpuNode(n, snapshot.GPUWaiting)
	}
	if f, _ := spinning(j, j.Groups[0], DefaultConfig()); f == nil {
		t.Fatal("the stuck-in-flight rule should fire on this job (it is what the inversion must replace)")
	}
	res := Evaluate(j, DefaultConfig(), TimingOK)
	if len(res.Findings) != 1 || res.Findings[0].Kind != incident.KindOrderInversion || culpritRanks(res.Findings[0])[0] != 1 {
		t.Fatalf("findings %+v", res.Findings)
	}
	if ev := strings.Join(res.Findings[0].Evidence, "\n"); !strings.Contains(ev, "also: all 4 ranks of communicator "+world) {
		t.Fatalf("the stuck world collective should be evidence:\n%s", ev)
	}
}

// TestOrderInversionFromThePlugin: with NCCL_DEBUG=WARN the order comes from the plugin's
// per-process count of calls, the stuck state from its ops in flight, within seconds.
func TestOrderInversionFromThePlugin(t *testing.T) {
	ps := megatron(20, map[int]bool{1: true}, nil, true)
	for _, p := range ps {
		for i := range p.Comms {
			c := &p.Comms[i]
			last := *c.Last
			// Only the newest op is known, and it is in flight; nothing completed since it was issued.
			c.Recent = []snapshot.Op{last}
			c.Done = &snapshot.Completion{Issued: c.Count, Done: c.Count - 1, LastDone: us(2 * time.Second),
				InFlight: &snapshot.Flight{Op: last}}
		}
	}
	j := mjob(2100*time.Millisecond+3500*time.Millisecond, ps...)
	f := only(t, FindHangs(j, DefaultConfig()).Inversions, incident.KindOrderInversion)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || !strings.Contains(strings.Join(f.Evidence, "\n"), "profiler plugin counted") {
		t.Fatalf("culprits %v: %s\n%s", got, f.Summary, strings.Join(f.Evidence, "\n"))
	}
}

// TestOrderInversionTie: two ranks alone share both communicators and no sibling shows the
// usual order: both are named, and the finding says it cannot tell.
func TestOrderInversionTie(t *testing.T) {
	ps := megatron(20, map[int]bool{1: true}, nil, false)[:2]
	for _, p := range ps {
		p.Comms[0].NRanks = 2
	}
	j := mjob(0, ps...)
	j.Offline = true
	f := only(t, FindHangs(j, DefaultConfig()).Inversions, incident.KindOrderInversion)
	if got := culpritRanks(f); len(got) != 2 || !strings.Contains(f.Summary, "cannot be told") {
		t.Fatalf("culprits %v: %s", got, f.Summary)
	}
}

func TestNoOrderInversion(t *testing.T) {
	for _, c := range []struct {
		name string
		j    func() *Job
	}{
		{"every rank in the same order", func() *Job {
			j := mjob(0, megatron(20, nil, map[int]int{0: 1, 2: 2}, false)...)
			j.Offline = true
			return j
		}},
		{"communicators still moving (live)", func() *Job {
			return mjob(2200*time.Millisecond, megatron(20, map[int]bool{1: true}, nil, false)...)
		}},
		{"communicators destroyed at the end", func() *Job {
			ps := megatron(20, map[int]bool{1: true}, nil, false)
			for _, p := range ps {
				for i := range p.Comms {
					p.Comms[i].State = snapshot.CommDestroyed
				}
			}
			j := mjob(0, ps...)
			j.Offline = true
			return j
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if fs := FindHangs(c.j(), DefaultConfig()).Inversions; len(fs) != 0 {
				t.Fatalf("%+v", fs)
			}
		})
	}
}

// megatronOnce is the deadlock as PyTorch runs it: every rank calls tensor-parallel then
// world AllReduce each step, except rank 1 at step `fault`, which calls them the other way
// round; then every host goes on issuing `after` more normal steps before it blocks (the
// GPU is deadlocked, the host is not), so the inverted pair is not the last thing issued.
func megatronOnce(fault, after int) []*Proc {
	var ps []*Proc
	for r := 0; r < 4; r++ {
		tp := tp0
		if r >= 2 {
			tp = tp1
		}
		p := &Proc{Process: snapshot.Process{Host: "node" + string(rune('0'+r)), PID: 100 + r, Rank: r, CudaDev: 0, BusID: "1b000",
			Comms: []snapshot.Comm{{ID: world, Rank: r, NRanks: 4, State: "ready"}, {ID: tp, Rank: r % 2, NRanks: 2, State: "ready"}}},
			Node: "node" + string(rune('0'+r))}
		idx := int64(0)
		for s := 1; s <= fault+after; s++ {
			calls := []int{1, 0}
			if r == 1 && s == fault {
				calls = []int{0, 1}
			}
			for _, ci := range calls {
				c := &p.Comms[ci]
				idx++
				c.Count++
				o := snapshot.Op{Seq: c.Count, Idx: idx, Op: "AllReduce", Count: 5000, Dtype: "float32", Red: "sum",
					T: us(time.Duration(s)*100*time.Millisecond + time.Duration(idx)*time.Millisecond)}
				if ci == 1 {
					o.Count = 1000
				}
				c.Recent = append(c.Recent, o)
				last := o
				c.Last = &last
			}
		}
		ps = append(ps, p)
	}
	return ps
}

func TestOrderInversionWhenHostsWentOnIssuing(t *testing.T) {
	cfg := DefaultConfig()
	for _, after := range []int{0, 1, 5} {
		j := mjob(0, megatronOnce(20, after)...)
		j.Offline = true
		f := only(t, FindHangs(j, cfg).Inversions, incident.KindOrderInversion)
		if got := culpritRanks(f); len(got) != 1 || got[0] != 1 || f.Seq != 20 {
			t.Fatalf("after %d more steps: culprits %v at position %d, want rank 1 at 20: %s\n%s", after, got, f.Seq, f.Summary, strings.Join(f.Evidence, "\n"))
		}
	}
}
