package detect

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// GPU finds GPU faults: recent XID errors (with their meaning), uncorrectable ECC errors,
// NVLink and PCIe errors. CUDA failures NCCL logged are the CUDA rule's (cuda.go).
func GPU(j *Job, cfg Config) []Finding {
	var out []Finding
	var nodes []string
	for n := range j.Nodes {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, name := range nodes {
		for i := range j.Nodes[name].GPUs {
			g := &j.Nodes[name].GPUs[i]
			if f, ok := gpuFinding(j, cfg, name, g); ok {
				out = append(out, f)
			}
		}
	}
	return out
}

func gpuFinding(j *Job, cfg Config, node string, g *snapshot.GPU) (Finding, bool) {
	f := Finding{Kind: incident.KindGPU, Severity: incident.SeverityWarning, Key: "gpu:" + node + ":" + g.BusID}
	var first string
	for _, x := range g.XIDs {
		if !recentEvent(j, cfg.EventConfig, int64(x.T)) {
			continue
		}
		text, severe := snapshot.XIDMeaning(x.Code)
		if severe {
			f.Severity = incident.SeverityCritical
		}
		f.addEvidence("XID %d at %s: %s", x.Code, fmtTime(x.T.Time()), text)
		if first == "" {
			first = fmt.Sprintf("XID %d (%s)", x.Code, text)
			f.FaultAt = x.T.Time()
		}
	}
	if g.ECCVolatileDBE > 0 {
		f.Severity = incident.SeverityCritical
		f.addEvidence("%d uncorrectable (double-bit) ECC errors since the driver loaded", g.ECCVolatileDBE)
		if first == "" {
			first = fmt.Sprintf("%d uncorrectable ECC errors", g.ECCVolatileDBE)
		}
	}
	if len(f.Evidence) == 0 {
		return f, false
	}
	c := incident.Culprit{Rank: -1, Host: node, GPU: strconv.Itoa(g.Index) + " (bus " + g.BusID + ")"}
	var ranks []*Proc
	for _, p := range j.Procs {
		if p.Node == node && gpuOf(j, p) == g {
			ranks = append(ranks, p)
		}
	}
	if len(ranks) > 0 {
		c.Rank, c.PID = ranks[0].Rank, ranks[0].PID
		f.culpritKeys = []string{ranks[0].Key()}
	}
	f.Culprits = []incident.Culprit{c}
	f.Summary = fmt.Sprintf("GPU %d on %s (bus %s): %s", g.Index, node, g.BusID, first)
	if len(ranks) > 0 {
		f.Summary += fmt.Sprintf("; it runs %s", ranks[0].Name())
	}
	f.addEvidence("GPU now: %s", describeGPU(g))
	return f, true
}
