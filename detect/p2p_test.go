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
	f := only(t, FindHangs(job(30*time.Second, a, b), DefaultConfig()).Stalls, incident.KindP2PMismatch)
	if got := culpritRanks(f); len(got) != 1 || got[0] != 1 {
		t.Fatalf("culprits %v: rank 1 posted one receive too few", got)
	}
	// Dated by the unmatched send: PyTorch killing rank 1 for it 30 s later is no crash.
	if !f.FaultAt.Equal(us(time.Second).Time()) {
		t.Fatalf("fault at %v, want rank 0's last send", f.FaultAt)
	}
	crash := Finding{Kind: incident.KindCrash, culpritKeys: f.culpritKeys, FaultAt: f.FaultAt.Add(30 * time.Second)}
	fs := findings{stalls: []Finding{f}, crashes: []Finding{crash}}
	deathAndStallOfOneRank(nil, DefaultConfig(), &fs)
	if len(fs.crashes) != 0 || len(fs.stalls) != 1 {
		t.Fatalf("the p2p mismatch should stay the cause: %+v", fs.all())
	}
}

// TestP2PMismatchFromThePlugin: with NCCL_DEBUG=WARN no Send/Recv line is logged; the
// profiler plugin counts each peer's sends and receives issued. Rank 1 skipped one exchange
// with rank 0 (the one-GPU dry run of p2p_skip): rank 0's 21st send waits, rank 1 posted 20
// receives. A peer cut from a full list of plugin rows is not judged as never posted.
func TestP2PMismatchFromThePlugin(t *testing.T) {
	peers := func(n int, rows ...snapshot.PeerProgress) *snapshot.Completion {
		d := &snapshot.Completion{Issued: 5, Done: 5, P2PIssued: rows[0].P2PIssued}
		d.Peers = append(d.Peers, rows...)
		for len(d.Peers) < n {
			d.Peers = append(d.Peers, snapshot.PeerProgress{Peer: 100 + len(d.Peers), Dir: snapshot.DirSend, P2PIssued: 1, P2PDone: 1})
		}
		return d
	}
	for _, c := range []struct {
		name  string
		fullB bool
		want  int
	}{{"rank 1 posted one receive too few", false, 1}, {"rank 1's rows were cut: not judged", true, 0}} {
		t.Run(c.name, func(t *testing.T) {
			a, b := rank(0, 5, 100*time.Millisecond, 0, nil), rank(1, 5, 100*time.Millisecond, 0, nil)
			a.Comms[0].Done = peers(2, snapshot.PeerProgress{Peer: 1, Dir: snapshot.DirSend, P2PIssued: 21, P2PDone: 20},
				snapshot.PeerProgress{Peer: 1, Dir: snapshot.DirRecv, P2PIssued: 20, P2PDone: 20})
			n := 1
			if c.fullB {
				n = snapshot.MaxPeers
			}
			// Rank 1's receives from rank 0: absent from a full list, else 20.
			row := snapshot.PeerProgress{Peer: 0, Dir: snapshot.DirRecv, P2PIssued: 20, P2PDone: 20}
			if c.fullB {
				row = snapshot.PeerProgress{Peer: 7, Dir: snapshot.DirSend, P2PIssued: 3, P2PDone: 3}
			}
			b.Comms[0].Done = peers(n, row, snapshot.PeerProgress{Peer: 0, Dir: snapshot.DirSend, P2PIssued: 20, P2PDone: 20})
			fs := FindHangs(job(30*time.Second, a, b), DefaultConfig()).Stalls
			if c.want == 0 {
				if len(fs) != 0 {
					t.Fatalf("want no finding, got %+v", fs)
				}
				return
			}
			f := only(t, fs, incident.KindP2PMismatch)
			if got := culpritRanks(f); len(got) != 1 || got[0] != c.want {
				t.Fatalf("culprits %v, want rank %d: %s", got, c.want, f.Summary)
			}
		})
	}
}
