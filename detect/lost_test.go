package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestLostNodeAndMassLoss: one lease expiring is a lost node; many at once is one
// monitoring incident, not one per node; once the burst is older than the window, the
// nodes still missing are lost nodes again.
func TestLostNodeAndMassLoss(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MassLossNodes, cfg.MassLossFraction, cfg.MassLossWindow = 3, 0.25, 15*time.Second
	j := NewJob("train", t0, nil, map[string]*snapshot.Node{})
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("n%d", i)
		j.Nodes[name] = &snapshot.Node{Job: "train", Node: name, Time: us(0),
			Processes: []snapshot.Process{{Host: name, PID: 100 + i, Rank: i}}}
	}
	lose := func(at time.Duration, names ...string) []Finding {
		j.Now = t0.Add(at)
		for _, n := range names {
			j.Lost = append(j.Lost, j.Nodes[n])
			delete(j.Nodes, n)
			j.LeaseLosses = append(j.LeaseLosses, j.Now)
		}
		return LostNodes(j, cfg)
	}
	fs := lose(10*time.Second, "n3")
	if len(fs) != 1 || fs[0].Kind != incident.KindLostNode || fs[0].Culprits[0].Host != "n3" || !fs[0].FaultAt.Equal(t0) {
		t.Fatalf("one lost node: %+v", fs)
	}
	fs = lose(11*time.Second, "n4", "n5")
	if len(fs) != 1 || fs[0].Kind != incident.KindMonitoring || fs[0].Key != "monitoring:mass-loss:train" {
		t.Fatalf("three nodes at once must be one monitoring incident: %+v", fs)
	}
	if fs = lose(40 * time.Second); len(fs) != 3 || fs[0].Kind != incident.KindLostNode {
		t.Fatalf("after the window the three are lost nodes: %+v", fs)
	}
}

func TestMonitoringEtcdDown(t *testing.T) {
	j := NewJob("_ncclwatch", t0, nil, nil)
	if fs := Monitoring(j); len(fs) != 0 {
		t.Fatalf("etcd reachable: %+v", fs)
	}
	j.EtcdDownSince = t0.Add(-time.Minute)
	fs := Monitoring(j)
	if len(fs) != 1 || fs[0].Kind != incident.KindMonitoring || fs[0].Severity != incident.SeverityCritical || !fs[0].FaultAt.Equal(j.EtcdDownSince) {
		t.Fatalf("etcd down: %+v", fs)
	}
}
