package detect

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclwatch/watchdog/detect/knowledge"
	"github.com/ncclwatch/watchdog/incident"
)

// versionLines compares the NCCL versions the processes printed: ranks of one job that
// load different NCCL libraries disagree on protocols and hang or fail in init.
func versionLines(j *Job) []Finding {
	byVersion := map[string][]*Proc{}
	for _, p := range j.Procs {
		if p.NCCL != "" {
			byVersion[p.NCCL] = append(byVersion[p.NCCL], p)
		}
	}
	if len(byVersion) < 2 {
		return nil
	}
	var versions []string
	for v := range byVersion {
		versions = append(versions, v)
	}
	// The most common version is the job's, the others are the odd ones out; between as
	// many, the lowest rank's (where the job was launched from).
	lowest := func(v string) int {
		lo := int(^uint(0) >> 1)
		for _, p := range byVersion[v] {
			if p.Rank >= 0 {
				lo = min(lo, p.Rank)
			}
		}
		return lo
	}
	sort.Slice(versions, func(a, b int) bool {
		if len(byVersion[versions[a]]) != len(byVersion[versions[b]]) {
			return len(byVersion[versions[a]]) > len(byVersion[versions[b]])
		}
		if la, lb := lowest(versions[a]), lowest(versions[b]); la != lb {
			return la < lb
		}
		return versions[a] < versions[b]
	})
	f := Finding{Kind: incident.KindConfig, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{}, Key: "config:versions",
		origin: knowledge.Versions}
	var odd []string
	for _, v := range versions[1:] {
		for _, p := range byVersion[v] {
			if len(f.Culprits) < 16 {
				f.Culprits = append(f.Culprits, p.Culprit())
			}
			f.culpritKeys = append(f.culpritKeys, p.Key())
			odd = append(odd, fmt.Sprintf("%s runs %s", p.Name(), v))
		}
	}
	f.Summary = fmt.Sprintf("the ranks of this job load different NCCL versions (%d rank(s) run %s; %s): every rank must use the same NCCL, or they disagree on the protocol and fail or hang",
		len(byVersion[versions[0]]), versions[0], foldWords(odd, 4))
	return []Finding{f}
}

func foldWords(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
}
