package analyze

import (
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/logparse"
	"github.com/ncclwatch/watchdog/snapshot"
)

func TestResolveRanks(t *testing.T) {
	none := logparse.RankClaims{Init: -1, Own: -1, Job: -1, Node: -1, Task: -1}
	with := func(f func(*logparse.RankClaims)) logparse.RankClaims {
		c := none
		f(&c)
		return c
	}
	type proc struct {
		claims logparse.RankClaims
		file   string
		pid    int
	}
	for _, tc := range []struct {
		name    string
		procs   []proc
		records map[int]int
		want    []int
		notes   []string // words the notes must hold, in order of the notes
	}{
		{name: "init alone", procs: []proc{{with(func(c *logparse.RankClaims) { c.Init, c.InitRanks = 3, 4 }), "a", 1}}, want: []int{3}},
		{name: "init and [rankN]: agree",
			procs: []proc{{with(func(c *logparse.RankClaims) { c.Init, c.InitRanks, c.Job = 3, 4, 3 }), "a", 1}}, want: []int{3}},
		{name: "init and [rankN]: disagree: no rank, said",
			procs: []proc{{with(func(c *logparse.RankClaims) { c.Init, c.InitRanks, c.Job = 2, 4, 3 }), "a", 1}}, want: []int{-1},
			notes: []string{`"[rankN]:" prefix says rank 3, its Init lines (rank 2 of 4) says rank 2`}},
		{name: "torchrun's record against init",
			procs:   []proc{{with(func(c *logparse.RankClaims) { c.Init, c.InitRanks = 2, 4 }), "a", 77}},
			records: map[int]int{77: 1}, want: []int{-1}, notes: []string{"failure record for its pid says rank 1"}},
		{name: "a subgroup's init is weak beside [rankN]:",
			procs: []proc{
				{with(func(c *logparse.RankClaims) { c.Init, c.InitRanks, c.Job = 0, 2, 5 }), "a", 1},
				{with(func(c *logparse.RankClaims) { c.Init, c.InitRanks, c.Job = 1, 2, 6 }), "a", 2},
				{with(func(c *logparse.RankClaims) { c.Init, c.InitRanks, c.Job = 0, 2, 7 }), "a", 3},
			}, want: []int{5, 6, 7}},
		{name: "one process per label: the label is the rank",
			procs: []proc{{with(func(c *logparse.RankClaims) { c.Task = 0 }), "con", 1}, {with(func(c *logparse.RankClaims) { c.Task = 1 }), "con", 2}},
			want:  []int{0, 1}},
		{name: "a label on two processes is a node's task: no rank",
			procs: []proc{{with(func(c *logparse.RankClaims) { c.Task = 1 }), "con", 1}, {with(func(c *logparse.RankClaims) { c.Task = 1 }), "con", 2}},
			want:  []int{-1, -1}},
		{name: "labels against init: init wins, the labels are said not to be ranks",
			procs: []proc{
				{with(func(c *logparse.RankClaims) { c.Task, c.Init, c.InitRanks = 0, 1, 2 }), "con", 1},
				{with(func(c *logparse.RankClaims) { c.Task, c.Init, c.InitRanks = 1, 0, 2 }), "con", 2},
			}, want: []int{1, 0}, notes: []string{"task 0 runs rank 1"}},
		{name: "weak sources disagree: no rank",
			procs: []proc{{with(func(c *logparse.RankClaims) { c.Task, c.Own = 2, 5 }), "con", 1}},
			want:  []int{-1}, notes: []string{"label 2: (srun --label) says rank 2, its channel and proxy lines says rank 5"}},
		{name: "two [rankN]: prefixes on one process",
			procs: []proc{{with(func(c *logparse.RankClaims) { c.Init, c.InitRanks, c.JobMixed = 1, 2, true }), "a", 1}},
			want:  []int{1}, notes: []string{`two "[rankN]:" prefixes`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := map[*detect.Proc]procClaims{}
			var procs []*detect.Proc
			for _, p := range tc.procs {
				dp := &detect.Proc{Process: snapshot.Process{Host: "h", PID: p.pid, Rank: 99}}
				procs = append(procs, dp)
				claims[dp] = procClaims{RankClaims: p.claims, file: p.file}
			}
			notes := newRankResolver(procs, claims).resolve(procs, tc.records)
			for i, p := range procs {
				if p.Rank != tc.want[i] {
					t.Errorf("process %d: rank %d, want %d (notes %q)", i, p.Rank, tc.want[i], notes)
				}
			}
			if len(notes) != len(tc.notes) {
				t.Fatalf("notes %q, want %d", notes, len(tc.notes))
			}
			for i, w := range tc.notes {
				if !strings.Contains(notes[i], w) {
					t.Errorf("note %q lacks %q", notes[i], w)
				}
			}
		})
	}
}

// TestEventProc: a PyTorch line under a label goes to the label's one process, or to no
// process where the label holds several; "[defaultN]:" names a process only on one node.
func TestEventProc(t *testing.T) {
	none := logparse.RankClaims{Init: -1, Own: -1, Job: -1, Node: -1, Task: -1}
	a := &detect.Proc{Process: snapshot.Process{Host: "n1", PID: 1, Rank: 0, LocalRank: 0}}
	b := &detect.Proc{Process: snapshot.Process{Host: "n1", PID: 2, Rank: 1, LocalRank: 1}}
	c := &detect.Proc{Process: snapshot.Process{Host: "n2", PID: 3, Rank: 2, LocalRank: 0}}
	ca, cb, cc := none, none, none
	ca.Task, cb.Task, cc.Task = 0, 0, 1 // two tasks, one per node, torchrun in each
	rr := newRankResolver([]*detect.Proc{a, b, c}, map[*detect.Proc]procClaims{a: {ca, "con"}, b: {cb, "con"}, c: {cc, "con"}})
	procs := []*detect.Proc{a, b, c}
	for _, tc := range []struct {
		name        string
		task, local int
		want        *detect.Proc
	}{
		{"a task of two processes names none", 0, -1, nil},
		{"a task of one process in a file whose labels are tasks of several names none", 1, -1, nil},
		{"a rank on a node of a two-node job names none", -1, 0, nil},
	} {
		if got := rr.eventProc(torchEvent{rank: -1, task: tc.task, local: tc.local, file: "con"}, procs); got != tc.want {
			t.Errorf("%s: got %+v", tc.name, got)
		}
	}
	one := newRankResolver([]*detect.Proc{a, b}, map[*detect.Proc]procClaims{a: {none, "x"}, b: {none, "x"}})
	if got := one.eventProc(torchEvent{rank: -1, task: -1, local: 1, file: "con"}, []*detect.Proc{a, b}); got != b {
		t.Errorf("one node: [default1]: names %+v, want rank 1", got)
	}
}
