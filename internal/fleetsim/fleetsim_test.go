package fleetsim

import (
	"testing"

	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
)

// TestFleetNamesEveryBadPart: 1,000 nodes, 100 jobs, three bad parts among background
// trouble: every bad part is named by a node incident, and no good part is.
func TestFleetNamesEveryBadPart(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet of 1,000 nodes")
	}
	_, cli := etcdtest.Start(t, etcdembed.Options{})
	res, err := Run(t.Context(), cli, Config{Nodes: 1000, Jobs: 100, Seed: 1, Drain: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d jobs over %.0f simulated hours (%.0f job-hours on %d nodes), %d incidents (%d on bad parts, %d background); %d node incidents; ledger %d keys, %d bytes; %.1f s",
		res.JobsRun, res.SimHours, res.JobHours, res.BusyNodes, res.Incidents, res.BadPartRoots, res.NoiseRoots, res.NodeIncidents,
		res.LedgerKeys, res.LedgerBytes, res.WallSeconds)
	for _, b := range res.BadParts {
		t.Logf("%-15s %-28s named %v after %.1f h and %d jobs on its node (a root in %d)", b.What, b.Part.Key(), b.Named,
			b.NamedAfterHours, b.NamedAfterJobs, b.RootedJobs)
		if !b.Named {
			t.Errorf("the %s (%s) was never named", b.What, b.Part.Key())
		}
	}
	if res.FalseNodeIncidents != 0 {
		t.Errorf("%d node incidents on good parts: %v", res.FalseNodeIncidents, res.FalseParts)
	}
}
