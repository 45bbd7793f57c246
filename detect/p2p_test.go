package detect

import (
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

func TestP2PMismatch(t *testing.T) {
	a, b := rank(0, 5, 100*time.Millisecond, 0, nil), rank(1, 5, 100*time.Millisecond, 0, nil)
	a.Comms[0].P2P = []snapshot.P2P{{Peer: 1, Sends: 12, Recvs: 12, LastSend: us(time.Second)}}
	b.Comms[0].P2P = []snapshot.P2P{{Peer: 0, Sends: 12, Recvs: 11, LastRecv: us(time.Second)}}
	f := only(t, P2PMismatch(job(30*time.Second, a, b), DefaultConfig()), incident.KindP2PMismatch)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 {
		t.Fatalf("culprits %v: rank 1 posted one receive too few", got)
	}
}
