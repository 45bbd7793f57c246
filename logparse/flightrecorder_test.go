package logparse

import (
	"fmt"
	"strings"
	"testing"
)

// TestFlightRecorderReport: the lines of PyTorch's Flight Recorder analyzer that name a
// collective or ranks, as its releases print them, and look-alikes that must stay unknown.
func TestFlightRecorderReport(t *testing.T) {
	many := "missing ranks: {" + strings.Repeat("7, ", 3) + func() string {
		var rs []string
		for r := range 200 {
			rs = append(rs, fmt.Sprint(r))
		}
		return strings.Join(rs, ", ")
	}() + "}"
	cases := []struct{ name, line, want string }{
		{"header 2.5", "Collective 39 at entry 38 errors", "fr_collective code=39 ranks=[] detail="},
		{"header 2.8", "Collective sequence number: 12 has errors", "fr_collective code=12 ranks=[] detail="},
		{"not joining 2.5", "Not all ranks joining collective 5 at entry 4", "fr_collective code=5 ranks=[] detail="},
		{"not joining 2.8", "Not all ranks joining collective, sequence number: 5", "fr_collective code=5 ranks=[] detail="},
		{"not joining one line", "Not all ranks joining collective for group 0:default_pg collective nccl:all_reduce  Missing ranks are {1, 3}  [[3, 4]] [[3, 4]] 4 scheduled",
			"fr_missing code=2 ranks=[1 3] detail="},
		{"culprits", "error msg: Culprit rank 22; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[1025]]' does not match found input sizes: '[[262144]]', Culprit rank 110; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[1025]]' does not match found input sizes: '[[262144]]'",
			"fr_culprit code=2 ranks=[22 110] detail=SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[1025]]' does not match found input sizes: '[[262144]]'"},
		{"culprit launcher tagged", "[rank0]: error msg: Culprit rank 3; Error type: COLLECTIVE_STATE_MISMATCH, Expected state: 'completed' does not match found state: 'scheduled'",
			"fr_culprit code=1 ranks=[3] detail=COLLECTIVE_STATE_MISMATCH, Expected state: 'completed' does not match found state: 'scheduled'"},
		{"culprit bare type", "error msg: Culprit rank 4; Error type: COLLECTIVE_DTYPE_MISMATCH", "fr_culprit code=1 ranks=[4] detail=COLLECTIVE_DTYPE_MISMATCH"},
		{"missing", "missing ranks: {1}", "fr_missing code=1 ranks=[1] detail="},
		{"missing many, bounded and distinct", many, "fr_missing code=200 ranks=64 detail="},
		{"missing huge number", "missing ranks: {99999999999999999999999, 2}", "fr_missing code=1 ranks=[2] detail="},
		{"not the analyzer", "Collective errors", ""},
		{"not the analyzer 2", "Collective operations errors", ""},
		{"not the analyzer 3", "the error msg: Culprit rank was", ""},
	}
	for _, c := range cases {
		var l Line
		Parse([]byte(c.line), &l)
		e, ok := EventOf(&l, 0)
		got := ""
		if ok {
			ranks := fmt.Sprint(e.Ranks)
			if len(e.Ranks) > 8 {
				ranks = fmt.Sprint(len(e.Ranks))
			}
			if e.Ranks == nil {
				ranks = "[]"
			}
			got = fmt.Sprintf("%s code=%d ranks=%s detail=%s", e.Kind, e.Code, ranks, e.Detail)
		}
		if got != c.want {
			t.Errorf("%s: %q\n got %q\nwant %q", c.name, c.line, got, c.want)
		}
	}
}
