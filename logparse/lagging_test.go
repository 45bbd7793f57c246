package logparse

import (
	"slices"
	"testing"

	"github.com/ncclwatch/watchdog/snapshot"
)

// TestDesyncReport: the lines of PyTorch's desync report that name the ranks behind a
// timeout, behind torchrun's prefix; the report's other lines are no event.
func TestDesyncReport(t *testing.T) {
	for _, c := range []struct {
		line   string
		ranks  []int
		code   int
		detail string
	}{
		{"[rank0]:\t - To our best knowledge, ranks [3, 7] are the lagging ranks that caused this timeout. They never joined any collectives",
			[]int{3, 7}, 0, "never joined any collective"},
		{"[rank2]:\t   - [5] joined but didn't finish collective #41 (count from 1)", []int{5}, 41, "joined but did not finish collective #41"},
		{"\t     [0, 1, 2] finished collective #41, but didn't join collective #42 (count from 1)", []int{0, 1, 2}, 42,
			"finished the collective before it but did not join collective #42"},
		{"[rank0]:\t - [0] Timeout at collective: ALLREDUCE, #42", nil, 0, ""},
		{"[rank0]:\t     [0, 1, 2] started ALLREDUCE", nil, 0, ""},
		{"[rank0]:\t   - [ joined but didn't finish collective #", nil, 0, ""},
	} {
		var l Line
		Parse([]byte(c.line), &l)
		e, ok := EventOf(&l, 0)
		if c.ranks == nil {
			if ok && e.Kind == snapshot.EventTorchLagging {
				t.Errorf("%q read as %+v", c.line, e)
			}
			continue
		}
		if !ok || e.Kind != snapshot.EventTorchLagging || !slices.Equal(e.Ranks, c.ranks) || e.Code != c.code || e.Detail != c.detail {
			t.Errorf("%q: %+v", c.line, e)
		}
	}
}
