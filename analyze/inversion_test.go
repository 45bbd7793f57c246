package analyze

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
)

// TestOrderInversionFromINFOLogs: the Megatron deadlock (testdata/inversion/gen.go: rank 1
// calls its world AllReduce before its tensor-parallel one, the others the other way round)
// is one order_inversion finding naming rank 1, from the order of each rank's log lines,
// with NCCL timestamps or without. Every rank issued both ops and none is behind, so before
// this rule there was nothing to say, and live the job looked stuck in flight.
func TestOrderInversionFromINFOLogs(t *testing.T) {
	for _, mode := range []string{"timestamps", "plain", "ranahead"} {
		t.Run(mode, func(t *testing.T) {
			rep, err := Analyze(context.Background(), []string{filepath.Join("testdata", "inversion", mode)},
				Options{Location: time.UTC, Rules: detect.DefaultConfig()})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Findings) != 1 {
				t.Fatalf("want one finding, got %+v", rep.Findings)
			}
			f := rep.Findings[0]
			if f.Kind != incident.KindOrderInversion || len(f.Culprits) != 1 || f.Culprits[0].Rank != 1 || f.Culprits[0].PID != 2102 {
				t.Fatalf("finding %+v", f)
			}
			if !strings.Contains(f.Summary, "before AllReduce(count 4194304 bfloat16 sum) on communicator 0x5e1f0a4d3c2b1a09/s1c1840383466") ||
				!strings.Contains(strings.Join(f.Evidence, "\n"), "sibling communicator 0x5e1f0a4d3c2b1a09/s2c953477190") {
				t.Fatalf("%s\n%s", f.Summary, strings.Join(f.Evidence, "\n"))
			}
		})
	}
}
