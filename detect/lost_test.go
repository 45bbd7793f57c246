package detect

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestLostNodeAndMassLoss: one lease expiring with proof (its ranks' peers stopped too) is a
// lost node; many at once is one monitoring incident, not one per node; once the burst is
// older than the window, the nodes still missing are lost nodes again.
func TestLostNodeAndMassLoss(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MassLossNodes, cfg.MassLossFraction, cfg.MassLossWindow = 3, 0.25, 15*time.Second
	// Eight one-rank nodes on one communicator, all still since t0+1s: a job that stopped.
	var procs []*Proc
	for i := 0; i < 8; i++ {
		procs = append(procs, rank(i, 1, time.Second, 0, nil))
	}
	j := job(0, procs...)
	lost := map[string]*snapshot.Node{}
	for _, p := range procs {
		lost[p.Node] = &snapshot.Node{Job: "j", Node: p.Node, Time: us(time.Second), Processes: []snapshot.Process{p.Process}}
	}
	lose := func(at time.Duration, names ...string) []Finding {
		j.Now = t0.Add(at)
		for _, n := range names {
			j.Lost = append(j.Lost, lost[n])
			j.LeaseLosses = append(j.LeaseLosses, j.Now)
			procs = slices.DeleteFunc(procs, func(p *Proc) bool { return p.Node == n })
		}
		now, lostNodes, losses := j.Now, j.Lost, j.LeaseLosses
		j = NewJob("j", now, procs, map[string]*snapshot.Node{})
		j.Lost, j.LeaseLosses = lostNodes, losses
		return LostNodes(j, cfg)
	}
	fs := lose(15*time.Second, "node3")
	if len(fs) != 1 || fs[0].Kind != incident.KindLostNode || fs[0].Severity != incident.SeverityCritical || fs[0].Culprits[0].Host != "node3" ||
		!fs[0].FaultAt.Equal(t0.Add(time.Second)) || !strings.Contains(fs[0].Summary, "have not moved") {
		t.Fatalf("one lost node whose peers stopped: %+v", fs)
	}
	fs = lose(16*time.Second, "node4", "node5")
	if len(fs) != 1 || fs[0].Kind != incident.KindMonitoring || fs[0].Key != "monitoring:mass-loss:j" {
		t.Fatalf("three nodes at once must be one monitoring incident: %+v", fs)
	}
	if fs = lose(45 * time.Second); len(fs) != 3 || fs[0].Kind != incident.KindLostNode {
		t.Fatalf("after the window the three are lost nodes: %+v", fs)
	}
}

// TestLostNodeNeedsProof: a node whose lease expired is a critical lost node only with
// proof that its ranks are gone; peers that keep completing collectives make it a warning
// that the watchdog is blind there.
func TestLostNodeNeedsProof(t *testing.T) {
	const period = 100 * time.Millisecond
	// node1 (rank 1) went silent at t0+2s, its last op #20; rank 0 on node0 goes on.
	silent := rank(1, 20, period, 0, nil)
	lostNode := &snapshot.Node{Job: "j", Node: "node1", Time: us(2 * time.Second), Processes: []snapshot.Process{silent.Process}}
	cases := []struct {
		name      string
		now       time.Duration
		peerOps   int // rank 0's ops, one per period
		peerDone  int64
		ras       bool
		noComm    bool
		want      incident.Kind // "" none
		severity  incident.Severity
		summaryIn string
	}{
		{name: "peers keep issuing", now: 12 * time.Second, peerOps: 110, want: incident.KindMonitoring, severity: incident.SeverityWarning,
			summaryIn: "its ranks keep completing collectives"},
		{name: "peers complete past it (plugin)", now: 12 * time.Second, peerOps: 22, peerDone: 22, want: incident.KindMonitoring,
			severity: incident.SeverityWarning, summaryIn: "completed collective #22"},
		{name: "peers stopped for the hang window", now: 20 * time.Second, peerOps: 21, want: incident.KindLostNode,
			severity: incident.SeverityCritical, summaryIn: "have not moved"},
		{name: "peers not yet still for the window", now: 6 * time.Second, peerOps: 21},
		{name: "RAS says dead", now: 6 * time.Second, peerOps: 21, ras: true, want: incident.KindLostNode, severity: incident.SeverityCritical,
			summaryIn: "NCCL RAS on node0"},
		{name: "no peer to ask", now: 20 * time.Second, noComm: true, want: incident.KindMonitoring, severity: incident.SeverityWarning,
			summaryIn: "cannot be judged"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			peer := rank(0, tc.peerOps, period, 0, nil)
			if tc.peerDone > 0 {
				peer.Comms[0].Done = &snapshot.Completion{Issued: int64(tc.peerOps), Done: tc.peerDone}
			}
			n := lostNode
			if tc.noComm {
				peer.Comms[0].ID = "0xother"
			}
			j := job(tc.now, peer)
			j.Lost = []*snapshot.Node{n}
			j.Nodes["node0"] = &snapshot.Node{Node: "node0"}
			if tc.ras {
				j.Nodes["node0"].RAS = &snapshot.RAS{Comms: []snapshot.RASComm{{Hash: "0xc0ffee", Dead: []int{1}}}}
			}
			fs := LostNodes(j, DefaultConfig())
			if tc.want == "" {
				if len(fs) != 0 {
					t.Fatalf("no proof yet, want nothing: %+v", fs)
				}
				return
			}
			if len(fs) != 1 || fs[0].Kind != tc.want || fs[0].Severity != tc.severity || !strings.Contains(fs[0].Summary, tc.summaryIn) {
				t.Fatalf("want one %s %s finding saying %q: %+v", tc.severity, tc.want, tc.summaryIn, fs)
			}
		})
	}
}

func TestMonitoringEtcdDown(t *testing.T) {
	j := NewJob("_ncclwatch", t0, nil, nil)
	if fs := Monitoring(j); len(fs) != 0 {
		t.Fatalf("etcd reachable: %+v", fs)
	}
	j.EtcdDownSince = t0.Add(-time.Minute)
	fs := Monitoring(j)
	if len(fs) != 1 || fs[0].Kind != incident.KindMonitoring || fs[0].Severity != incident.SeverityWarning || !fs[0].FaultAt.Equal(j.EtcdDownSince) {
		t.Fatalf("etcd down: %+v", fs)
	}
}

// TestInputLagWidensHangWindow: a rank still for 12 s is a hang with timely inputs, and not
// yet one while the inputs run 5 s late (Job.InputLag): a starved watchdog judges later, it
// never blames a rank for its own lateness.
func TestInputLagWidensHangWindow(t *testing.T) {
	const period = 100 * time.Millisecond
	for _, c := range []struct {
		lag  time.Duration
		hang bool
	}{{0, true}, {5 * time.Second, false}} {
		// rank 0 reached op 21 at 2.1 s and waits; rank 1 stopped at op 20; now is 14.1 s.
		j := job(14100*time.Millisecond, rank(0, 21, period, 0, nil), rank(1, 20, period, 0, nil))
		j.InputLag = c.lag
		hang := false
		for _, f := range Evaluate(j, DefaultConfig(), TimingOK).Findings {
			hang = hang || f.Kind == incident.KindHang
		}
		if hang != c.hang {
			t.Errorf("input lag %s: hang %v, want %v", c.lag, hang, c.hang)
		}
	}
}
