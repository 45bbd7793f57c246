package detect

import (
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// timedRank is rank r whose plugin timed its collectives on 0xc0ffee: mean busy and queue.
func timedRank(r int, busy, queue time.Duration) *Proc {
	p := rank(r, 40, 100*time.Millisecond, 0, nil)
	p.Comms[0].Done = &snapshot.Completion{Issued: 40, Done: 40,
		Timing: &snapshot.Timing{N: 200, Window: 30e6, Busy: busy.Microseconds(), Queue: queue.Microseconds()}}
	return p
}

func TestMeasuredStraggler(t *testing.T) {
	cfg := DefaultConfig()
	ms := time.Millisecond
	for _, c := range []struct {
		name    string
		procs   []*Proc
		culprit int // -1: none
		why     string
	}{
		// Rank 2 starts its kernels 25 ms later than the others, because its GPU is busy
		// before each collective: the others wait 25 ms longer in theirs.
		{"slow GPU", []*Proc{timedRank(0, 31*ms, ms), timedRank(1, 30*ms, ms), timedRank(2, 5*ms, 26*ms), timedRank(3, 30*ms, ms)},
			2, "its GPU is busy"},
		{"late host", []*Proc{timedRank(0, 31*ms, ms), timedRank(1, 5*ms, ms), timedRank(2, 30*ms, ms)}, 1, "its host issues them late"},
		{"two ranks", []*Proc{timedRank(0, 40*ms, ms), timedRank(1, 8*ms, ms)}, 1, ""},
		{"jitter", []*Proc{timedRank(0, 31*ms, ms), timedRank(1, 28*ms, ms), timedRank(2, 33*ms, ms)}, -1, ""},
		{"lag under the floor", []*Proc{timedRank(0, 12*ms, ms), timedRank(1, 2*ms, ms)}, -1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := MeasuredStragglers(job(10*time.Second, c.procs...), cfg)
			if c.culprit < 0 {
				if len(fs) != 0 {
					t.Fatalf("%+v", fs)
				}
				return
			}
			f := only(t, fs, incident.KindStraggler)
			if got := culpritRanks(f); got[0] != c.culprit || !f.measured || f.LagSeconds < 0.02 ||
				!strings.Contains(strings.Join(f.Evidence, "\n"), c.why) {
				t.Fatalf("culprit %v lag %.3f: %s\n%s", got, f.LagSeconds, f.Summary, strings.Join(f.Evidence, "\n"))
			}
		})
	}
}

// TestMeasuredStragglerReplacesArrivalLag: the log rule infers the same straggler from
// arrival times; the measured finding is the one incident.
func TestMeasuredStragglerReplacesArrivalLag(t *testing.T) {
	ms := time.Millisecond
	var ps []*Proc
	for r, busy := range []time.Duration{40 * ms, 40 * ms, 10 * ms} {
		lag := time.Duration(0)
		if r == 2 {
			lag = 30 * ms
		}
		p := rank(r, 40, 100*ms, lag, nil)
		p.Comms[0].Done = &snapshot.Completion{Issued: 40, Done: 40, Timing: &snapshot.Timing{N: 200, Window: 30e6, Busy: busy.Microseconds()}}
		ps = append(ps, p)
	}
	res := Evaluate(job(4100*ms, ps...), DefaultConfig(), TimingOK)
	if len(res.Findings) != 1 || !res.Findings[0].measured || culpritRanks(res.Findings[0])[0] != 2 ||
		!strings.Contains(strings.Join(res.Findings[0].Evidence, "\n"), "also: rank 2 (node2 pid 102) is a straggler: it arrives 30ms late") {
		t.Fatalf("findings %+v", res.Findings)
	}
}

func TestSlowLink(t *testing.T) {
	cfg := DefaultConfig()
	ring := func(slow int64) *Job {
		var ps []*Proc
		for r := 0; r < 4; r++ {
			p := timedRank(r, 30*time.Millisecond, time.Millisecond)
			p.NetDevs = []string{"mlx5_" + string(rune('0'+r)) + ":1/IB"}
			net := int64(300)
			if r == 1 {
				net = slow
			}
			p.Comms[0].Done.Peers = []snapshot.PeerProgress{{Peer: (r + 1) % 4, Dir: snapshot.DirSend, NetUs: net, NetSteps: 5000},
				{Peer: (r + 3) % 4, Dir: snapshot.DirRecv}}
			ps = append(ps, p)
		}
		return job(10*time.Second, ps...)
	}
	if fs := SlowLinks(ring(500), cfg); len(fs) != 0 {
		t.Fatalf("a link within the spread: %+v", fs)
	}
	f := only(t, SlowLinks(ring(2000), cfg), incident.KindLink)
	if got := culpritRanks(f); len(got) != 2 || got[0] != 1 || got[1] != 2 || !strings.Contains(f.Summary, "2ms on the network") ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "its NIC mlx5_1:1/IB") {
		t.Fatalf("culprits %v: %s\n%s", got, f.Summary, strings.Join(f.Evidence, "\n"))
	}
}

// TestSlowLinkNeedsOtherLinks: live on one H100, a two-rank communicator's send steps from
// rank 3 to rank 2 took 857 µs against 143 µs the other way, before any fault: rank 2's
// GPU, shared with three other ranks, posted its receives late. A pair's reverse direction
// does not witness against it; with no other link to compare, nothing is said.
func TestSlowLinkNeedsOtherLinks(t *testing.T) {
	var ps []*Proc
	for r, net := range []int64{143, 857} {
		p := timedRank(r, 30*time.Millisecond, time.Millisecond)
		p.Comms[0].Done.Peers = []snapshot.PeerProgress{{Peer: 1 - r, Dir: snapshot.DirSend, NetUs: net, NetSteps: 136},
			{Peer: 1 - r, Dir: snapshot.DirRecv}}
		ps = append(ps, p)
	}
	if fs := SlowLinks(job(10*time.Second, ps...), DefaultConfig()); len(fs) != 0 {
		t.Fatalf("one direction of a two-rank communicator is no slow link: %+v", fs)
	}
}
