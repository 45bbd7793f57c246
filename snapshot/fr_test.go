package snapshot

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestFRCommID(t *testing.T) {
	a, b := FRCommID("1", []int{0, 1}), FRCommID("1", []int{2, 3})
	if a == b || !strings.HasPrefix(a, FRCommPrefix+"1#") || a != FRCommID("1", []int{0, 1}) {
		t.Errorf("ids %q %q", a, b)
	}
	if FRCommID("1", []int{1, 23}) == FRCommID("1", []int{12, 3}) {
		t.Error("ranks 1,23 and 12,3 share an id")
	}
	if got := FRCommID("0", nil); got != "fr:0" {
		t.Errorf("without ranks: %q", got)
	}
}

func TestFRGroupRoundTrip(t *testing.T) {
	c := Comm{ID: FRCommID("0", []int{0, 1}), Rank: 1, NRanks: 2, State: CommReady, Count: 5,
		Recent: Ops{{Seq: 5, Op: "AllReduce", Count: 8, Dtype: "float32", T: 10, Idx: 9}},
		Done:   &Completion{Issued: 5, Started: 5, Done: 4, InFlight: &Flight{Op: Op{Seq: 5, Op: "AllReduce"}, GPUStart: 12}},
		FR: &FRGroup{Name: "0", Desc: "default_pg", Ranks: []int{0, 1}, Pending: 1, Ops: []FROp{{
			Op: Op{Seq: 5, Op: "AllReduce", Count: 8, Dtype: "float32", T: 10, Idx: 9}, State: OpStarted,
			Name: "nccl:all_reduce", Started: 12, TimeoutMs: 600000, Where: "step (train.py:4)"}}}}
	last := c.Recent[0]
	c.Last = &last
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Comm
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip %v:\n got %+v\nwant %+v", err, back, c)
	}
	if HasCompletion := SourceFR.HasCompletion(); !HasCompletion || SourceFR.HasLog() || SourceFR.HasPlugin() {
		t.Error("SourceFR: completion yes, log and plugin no")
	}
}
