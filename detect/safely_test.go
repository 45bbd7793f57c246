package detect

import (
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/incident"
)

// A rule's failure (a bug, here a nil process, panicking in one of the rules' goroutines)
// costs that job its evaluation, said as a monitoring finding; the caller lives on.
func TestEvaluateSafelyTurnsARuleFailureIntoAFinding(t *testing.T) {
	j := job(0, rank(0, 10, fakePeriod, 0, nil))
	j.Procs = append(j.Procs, nil)
	res, err := EvaluateSafely(j, DefaultConfig(), TimingOK)
	if err == nil || len(res.Findings) != 1 || res.Findings[0].Kind != incident.KindMonitoring ||
		!strings.Contains(res.Findings[0].Summary, "could not judge job j") {
		t.Fatalf("err %v findings %+v", err, res.Findings)
	}
}

func TestParallelHandsAPanicToItsCaller(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "boom") {
			t.Fatalf("recovered %v, want the worker's panic", r)
		}
	}()
	parallel(1000, 1, func(i int) {
		if i == 500 {
			panic("boom")
		}
	})
	t.Fatal("parallel returned after a worker panicked")
}
