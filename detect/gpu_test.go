package detect

import (
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

func TestGPUXID(t *testing.T) {
	j := job(2*time.Second, rank(0, 3, time.Second, 0, nil))
	j.Nodes = map[string]*snapshot.Node{"node0": gpuNode("node0", "idle", 79)}
	f := only(t, GPU(j, DefaultConfig()), incident.KindGPU)
	if f.Severity != incident.SeverityCritical || !strings.Contains(f.Summary, "fallen off the bus") || f.Culprits[0].Rank != 0 {
		t.Fatalf("%+v", f)
	}
}
