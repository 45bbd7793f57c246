package detect

import (
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
