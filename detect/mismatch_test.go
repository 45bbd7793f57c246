package detect

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

func TestMismatchMinorityAndSkip(t *testing.T) {
	t.Run("three ranks: the minority is the culprit", func(t *testing.T) {
		odd := rank(2, 30, 100*time.Millisecond, 0, func(s int64, o *snapshot.Op) {
			if s == 17 {
				o.Dtype = "bfloat16"
			}
		})
		f := only(t, Mismatch(job(5*time.Second, rank(0, 30, 100*time.Millisecond, 0, nil), rank(1, 30, 100*time.Millisecond, 0, nil), odd)), incident.KindMismatch)
		if got := culpritRanks(f); len(got) != 1 || got[0] != 2 || f.Seq != 17 || f.Ops["2"].Datatype != "bfloat16" {
			t.Fatalf("culprits %v seq %d ops %+v", got, f.Seq, f.Ops)
		}
	})
	t.Run("a skipped op is named as skipped", func(t *testing.T) {
		// Rank 1 skips op 14 (the 2M AllReduce of step 5): its later ops are the others' shifted by one.
		skipper := rank(1, 29, 100*time.Millisecond, 0, func(s int64, o *snapshot.Op) {
			if s >= 14 {
				n := step[s%int64(len(step))]
				o.Op, o.Count, o.Dtype, o.Red = n.Op, n.Count, n.Dtype, n.Red
			}
		})
		f := only(t, Mismatch(job(5*time.Second, rank(0, 30, 100*time.Millisecond, 0, nil), skipper)), incident.KindMismatch)
		if f.Seq != 14 || !strings.Contains(strings.Join(f.Evidence, " "), "skipped AllReduce(count 2000000") {
			t.Fatalf("seq %d evidence %q", f.Seq, f.Evidence)
		}
		if got := culpritRanks(f); len(got) != 1 || got[0] != 1 {
			t.Fatalf("culprits %v, want rank 1", got)
		}
	})
}

func TestMismatchFromMarksOutsideTheRecentWindow(t *testing.T) {
	a, b := rank(0, 10, time.Second, 0, nil), rank(1, 10, time.Second, 0, nil)
	a.Comms[0].Marks = []snapshot.Mark{{Seq: 4096, Digest: "aa"}, {Seq: 8192, Digest: "bb"}}
	b.Comms[0].Marks = []snapshot.Mark{{Seq: 4096, Digest: "aa"}, {Seq: 8192, Digest: "cc"}}
	a.Comms[0].Recent, b.Comms[0].Recent = nil, nil
	a.Comms[0].Last, b.Comms[0].Last = nil, nil
	fs := Mismatch(job(time.Second, a, b))
	f := only(t, fs, incident.KindMismatch)
	if f.Seq != 4097 || !strings.Contains(f.Summary, "between positions 4097 and 8192") {
		t.Fatalf("seq %d summary %q", f.Seq, f.Summary)
	}
}

// TestMismatchTieBetweenTwoRanks: with two ranks there is no majority; the rank that broke the
// step's pattern, or issued an op new to the communicator, is named, wherever it sits, and
// also when the history has holes (a busy communicator issues more ops between two
// snapshots than one carries: live, from the profiler plugin, 32 of every ~80).
func TestMismatchTieBetweenTwoRanks(t *testing.T) {
	at41 := func(change func(o *snapshot.Op)) func(int64, *snapshot.Op) {
		return func(s int64, o *snapshot.Op) {
			if s == 41 {
				change(o)
			}
		}
	}
	// irregular gives every step a different size: no period, on both ranks.
	irregular := func(change func(o *snapshot.Op)) func(int64, *snapshot.Op) {
		return func(s int64, o *snapshot.Op) {
			o.Count += uint64(s%7) * 1000
			if s == 41 && change != nil {
				change(o)
			}
		}
	}
	int32s := func(o *snapshot.Op) { o.Dtype = "int32" }
	broadcast := func(o *snapshot.Op) { o.Op, o.Red = "Broadcast", "" }
	holes := func(s int64) bool { return (s-1)%20 >= 8 } // keeps 1-8, 21-28, 41-48
	cases := []struct {
		name     string
		edits    [2]func(int64, *snapshot.Op)
		drop     func(int64) bool
		want     []int
		evidence string
	}{
		{name: "rank 0 breaks the pattern", edits: [2]func(int64, *snapshot.Op){at41(int32s), nil}, want: []int{0}},
		{name: "rank 0, history with holes", edits: [2]func(int64, *snapshot.Op){at41(int32s), nil}, drop: holes, want: []int{0}},
		{name: "rank 1, history with holes", edits: [2]func(int64, *snapshot.Op){nil, at41(broadcast)}, drop: holes, want: []int{1}},
		{name: "the ops before it aged out", edits: [2]func(int64, *snapshot.Op){at41(int32s), nil},
			drop: func(s int64) bool { return s < 41 }, want: []int{0}, evidence: "only one of its kind"},
		{name: "no pattern: the op new to the communicator",
			edits: [2]func(int64, *snapshot.Op){irregular(broadcast), irregular(nil)}, want: []int{0}, evidence: "only one of its kind"},
		{name: "nothing tells them apart: both named",
			edits: [2]func(int64, *snapshot.Op){irregular(broadcast), irregular(int32s)}, want: []int{0, 1}, evidence: "every rank at position 41"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps := []*Proc{rank(0, 60, 100*time.Millisecond, 0, tc.edits[0]), rank(1, 60, 100*time.Millisecond, 0, tc.edits[1])}
			if tc.drop != nil {
				for _, p := range ps {
					c := &p.Comms[0]
					c.Recent = slices.DeleteFunc(c.Recent, func(o snapshot.Op) bool { return tc.drop(o.Seq) })
				}
			}
			f := only(t, Mismatch(job(10*time.Second, ps...)), incident.KindMismatch)
			if got := culpritRanks(f); f.Seq != 41 || !slices.Equal(got, tc.want) {
				t.Fatalf("seq %d culprits %v, want %v: %s %q", f.Seq, got, tc.want, f.Summary, f.Evidence)
			}
			if tc.evidence != "" && !strings.Contains(strings.Join(f.Evidence, " "), tc.evidence) {
				t.Fatalf("evidence %q lacks %q", f.Evidence, tc.evidence)
			}
		})
	}
}
