package detect

import (
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Live on two H100s with four ranks each its own NCCL host, NCCL probed IB at init, logged
// its error trace ("transport/net_ib.cc:... -> 3") and went on over sockets; the
// communicators finished their init seconds later. Paged at once, that was a false crash.
// An init is stuck only once it has gone on for the hang window after the error.
func TestInitErrorTraceWaitsForTheHangWindow(t *testing.T) {
	crumbAt := 5 * time.Second
	for _, c := range []struct {
		now  time.Duration
		want int
	}{{crumbAt + 2*time.Second, 0}, {crumbAt + 15*time.Second, 1}} {
		p := &Proc{Process: snapshot.Process{Host: "vm", PID: 10, Rank: 0, Comms: []snapshot.Comm{{ID: "0xa", Rank: 0, NRanks: 2, State: snapshot.CommInit}},
			Events: []snapshot.Event{{Kind: snapshot.EventBreadcrumb, Code: 3, Msg: "transport/net_ib.cc:712 -> 3", Src: "transport/net_ib.cc",
				Stage: snapshot.StageInit, T: us(crumbAt)}}}, Node: "vm"}
		j := NewJob("j", t0.Add(c.now), []*Proc{p}, map[string]*snapshot.Node{})
		if fs := Messages(j, DefaultConfig()); len(fs) != c.want {
			t.Errorf("%s after the error trace: %d findings, want %d: %+v", c.now-crumbAt, len(fs), c.want, fs)
		}
	}
}
