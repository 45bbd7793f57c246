package ras

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/snapshot"
)

func checkReport(t *testing.T, rep *snapshot.RAS) {
	t.Helper()
	if _, err := json.Marshal(rep); err != nil {
		t.Fatalf("report does not marshal: %v", err)
	}
	for _, c := range rep.Comms {
		for _, s := range [][]int{c.Missing, c.Unresp, c.Dead} {
			if !slices.IsSorted(s) || len(slices.Compact(slices.Clone(s))) != len(s) {
				t.Fatalf("rank list %v not sorted and unique", s)
			}
		}
		if c.Size < 0 || rep.Dead < 0 || rep.Unresp < 0 || rep.Timeouts < 0 {
			t.Fatalf("negative count in %+v", rep)
		}
	}
}

func FuzzParseJSON(f *testing.F) {
	for _, p := range captures(f) {
		if strings.HasSuffix(p, ".json.txt") {
			f.Add(loadCapture(f, p))
		}
	}
	f.Add([]byte(jsonSynthetic))
	f.Add([]byte(`{"communicators":[{"hash":"0x","ranks":[{"rank":-1,"collective_counts":{"AllReduce":18446744073709551615,"Broadcast":18446744073709551615}}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := ParseJSONKeep(b, nil)
		if err != nil {
			if rep != nil {
				t.Fatal("report with error")
			}
			return
		}
		checkReport(t, rep)
	})
}

func FuzzParseText(f *testing.F) {
	for _, p := range captures(f) {
		if strings.HasSuffix(p, ".text.txt") {
			f.Add(loadCapture(f, p))
		}
	}
	f.Add([]byte(textAllBlocks))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := ParseText(b)
		if err != nil && rep == nil {
			return
		}
		checkReport(t, rep)
	})
}
