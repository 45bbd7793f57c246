package detect

import (
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// Every rank of one node that stops at once is one root, the node: one finding, one page.
// Two ranks of a node that stopped far apart are two roots.
func TestRanksOfOneNodeStoppingTogetherAreOneRoot(t *testing.T) {
	period := 100 * time.Millisecond
	for _, tc := range []struct {
		name       string
		stopA      int // positions issued by ranks 2 and 3 (of 300 for their peers)
		stopB      int
		wantKeys   []string
		wantRanks0 []int
	}{
		{"together", 270, 270, []string{"node:nodeB"}, []int{2, 3}},
		{"apart: rank 3 only waits for rank 2", 200, 270, []string{"rank:nodeB:102"}, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := []*Proc{rank(0, 300, period, 0, nil), rank(1, 300, period, 0, nil), rank(2, tc.stopA, period, 0, nil), rank(3, tc.stopB, period, 0, nil)}
			for i, p := range ps {
				p.Node = map[bool]string{true: "nodeA", false: "nodeB"}[i < 2]
				p.Host = p.Node
			}
			fs := FindHangs(job(60*time.Second, ps...), DefaultConfig()).Stalls
			var keys []string
			for _, f := range fs {
				if f.Kind == incident.KindHang {
					keys = append(keys, f.Key)
				}
			}
			if len(keys) != len(tc.wantKeys) {
				t.Fatalf("keys %v, want %v", keys, tc.wantKeys)
			}
			for i := range keys {
				if keys[i] != tc.wantKeys[i] {
					t.Fatalf("keys %v, want %v", keys, tc.wantKeys)
				}
			}
			if got := culpritRanks(fs[0]); len(got) != len(tc.wantRanks0) || got[0] != tc.wantRanks0[0] {
				t.Fatalf("culprits %v, want %v", got, tc.wantRanks0)
			}
		})
	}
}
