package detect

import (
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

func TestLinkPortDegraded(t *testing.T) {
	j := job(time.Second, rank(0, 3, time.Second, 0, nil), rank(1, 3, time.Second, 0, nil))
	j.Procs[1].NetDevs = []string{"mlx5_0:1/IB", "mlx5_1:1/IB"}
	port := func(dev string, gbps float64, width string) snapshot.Port {
		return snapshot.Port{Kind: "ib", Device: dev, Port: 1, State: "ACTIVE", RateGbps: gbps, Width: width, Speed: "NDR"}
	}
	j.Nodes = map[string]*snapshot.Node{
		"node0": {Node: "node0", Ports: []snapshot.Port{port("mlx5_0", 400, "4X"), port("mlx5_1", 400, "4X")}},
		"node1": {Node: "node1", Ports: []snapshot.Port{port("mlx5_0", 400, "4X"), port("mlx5_1", 100, "1X")}},
	}
	f := only(t, Link(j, DefaultConfig()), incident.KindLink)
	if f.Culprits[0].Host != "node1" || f.Culprits[0].Port != "mlx5_1:1" || !strings.Contains(f.Summary, "100 of 400 Gb/s") {
		t.Fatalf("%+v", f)
	}
	if len(f.Culprits) != 2 || f.Culprits[1].Rank != 1 {
		t.Fatalf("the rank using the port should be named: %+v", f.Culprits)
	}
}
