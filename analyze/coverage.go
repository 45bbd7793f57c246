package analyze

import (
	"fmt"
	"sort"

	"github.com/ncclwatch/watchdog/logparse"
)

// Coverage says what the analysis could read: every report starts with it, so that "no
// problem found" is never said about logs that could not show one.
type Coverage struct {
	Files      int       `json:"files"`      // files looked at
	FilesRead  int       `json:"files_read"` // read as NCCL/PyTorch logs or RAS reports
	Skipped    []Skipped `json:"skipped,omitempty"`
	ReadErrors int       `json:"read_errors,omitempty"` // files that could not be read to their end
	Processes  int       `json:"processes"`
	Lines      int64     `json:"lines"`
	NCCLLines  int64     `json:"nccl_lines"`
	TorchLines int64     `json:"torch_lines"`
	OtherLines int64     `json:"other_lines"` // training output and other tools' lines
	// Collectives counts per-op lines (collectives and point-to-point).
	Collectives int64 `json:"collectives"`
	// Gaps are holes and NUL runs where lines began (GapBytes in all), in GapFiles files:
	// what a sidecar's log bound freed, or a copytruncate left.
	Gaps     int   `json:"gaps,omitempty"`
	GapBytes int64 `json:"gap_bytes,omitempty"`
	GapFiles int   `json:"gap_files,omitempty"`
	// Fragments are pieces of NCCL lines cut by interleaved writers that could not be
	// attributed; Rejoined were put back together; TooLong lines were cut at 1 MiB.
	Fragments  int64    `json:"fragments,omitempty"`
	Rejoined   int64    `json:"rejoined,omitempty"`
	TooLong    int64    `json:"too_long,omitempty"`
	Versions   []string `json:"nccl_versions,omitempty"`
	Subsystems []string `json:"subsystems,omitempty"` // NCCL_DEBUG_SUBSYS families whose lines were seen
	// Timestamps: "µs", "ms", "s" (the finest seen) or "none".
	Timestamps string `json:"timestamps"`
	RASReports int    `json:"ras_reports,omitempty"`
	// FRDumps are PyTorch Flight Recorder dumps read, FREntries their entries. Unseen are
	// the ranks their process groups hold that no file shows (the first MaxFRRanks).
	FRDumps   int   `json:"fr_dumps,omitempty"`
	FREntries int64 `json:"fr_entries,omitempty"`
	Unseen    []int `json:"unseen_ranks,omitempty"`
	// Communicators across ranks, and how many were inferred or could not be joined.
	Communicators int `json:"communicators"`
	Inferred      int `json:"inferred,omitempty"`
	Unjoined      int `json:"unjoined,omitempty"`
	// Limits are plain sentences on what keeps the analysis from judging everything.
	Limits []string `json:"limits,omitempty"`
}

// SubsysHint is what to set for logs an analysis can judge.
const SubsysHint = "run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET (and NCCL_DEBUG_FILE=/path/nccl.%h.%p.log so that processes do not interleave)"

// coverageOf counts what the files held.
func coverageOf(results []*fileResult, skipped []Skipped) Coverage {
	c := Coverage{Files: len(results) + len(skipped), Skipped: append([]Skipped(nil), skipped...)}
	versions := map[string]bool{}
	var kinds [logparse.NumKinds]int64
	digits := -1
	for _, r := range results {
		st := &r.stat
		if r.skip != "" {
			c.Skipped = append(c.Skipped, Skipped{Path: st.Path, Reason: r.skip})
			continue
		}
		if r.err != nil {
			c.ReadErrors++
			c.Limits = append(c.Limits, fmt.Sprintf("%s could not be read to its end (%v): what follows the error is not judged", st.Path, r.err))
		}
		if st.Lines > 0 || len(r.ras) > 0 || r.fr != nil {
			c.FilesRead++
		}
		if r.fr != nil {
			c.FRDumps++
			c.FREntries += st.FREntries
			if v := r.fr.dump.CommLib; v != "" {
				versions[v] = true
			}
		}
		c.RASReports += len(r.ras)
		c.Lines += st.Lines
		c.NCCLLines += st.NCCL
		c.TorchLines += st.Torch
		c.OtherLines += st.Unknown
		c.Collectives += st.Coll
		c.Fragments += st.Fragments
		c.Rejoined += st.Rejoined
		c.TooLong += st.TooLong
		if st.Gaps > 0 {
			c.Gaps += st.Gaps
			c.GapBytes += st.GapBytes
			c.GapFiles++
		}
		if r.version != "" {
			versions[logparse.VersionNumber(r.version)] = true
		}
		for _, rep := range r.ras {
			if rep.Version != "" {
				versions[rep.Version] = true
			}
		}
		for _, p := range r.procs {
			if p.version != "" {
				versions[p.version] = true
			}
			for k, n := range p.kinds {
				kinds[k] += n
			}
			digits = max(digits, p.tsDigits)
		}
	}
	for v := range versions {
		c.Versions = append(c.Versions, v)
	}
	sort.Strings(c.Versions)
	c.Subsystems = subsystems(&kinds)
	switch {
	case digits < 0:
		c.Timestamps = "none"
	case digits >= 6:
		c.Timestamps = "µs"
	case digits >= 3:
		c.Timestamps = "ms"
	default:
		c.Timestamps = "s"
	}
	sort.Slice(c.Skipped, func(a, b int) bool { return c.Skipped[a].Path < c.Skipped[b].Path })
	if c.Gaps > 0 {
		c.Limits = append(c.Limits, fmt.Sprintf("%d file(s) have %d gap(s) (%s of holes or NULs: what a sidecar's log bound freed, or a copytruncate left): the communicators a process had before a gap are not compared after it, since positions there are unknown", c.GapFiles, c.Gaps, humanBytes(c.GapBytes)))
	}
	if c.TooLong > 0 {
		c.Limits = append(c.Limits, fmt.Sprintf("%d line(s) longer than 1 MiB were cut there", c.TooLong))
	}
	if c.Fragments > 0 {
		c.Limits = append(c.Limits, fmt.Sprintf("%d piece(s) of NCCL lines cut by interleaved writers could not be attributed (%d were put back together); they are counted, not guessed", c.Fragments, c.Rejoined))
	}
	return c
}

// subsystems names the NCCL_DEBUG_SUBSYS families whose lines were seen.
func subsystems(k *[logparse.NumKinds]int64) []string {
	var out []string
	if k[logparse.KindInit]+k[logparse.KindCommInfo]+k[logparse.KindChannel]+k[logparse.KindRing] > 0 {
		out = append(out, "INIT")
	}
	if k[logparse.KindColl] > 0 {
		out = append(out, "COLL")
	}
	if k[logparse.KindNetIBDevices]+k[logparse.KindNetSocketDevices]+k[logparse.KindNetIBNone]+k[logparse.KindIBCompletion]+k[logparse.KindIBAsync] > 0 {
		out = append(out, "NET")
	}
	if k[logparse.KindBootstrap] > 0 {
		out = append(out, "BOOTSTRAP")
	}
	if k[logparse.KindTuning] > 0 {
		out = append(out, "TUNING")
	}
	if k[logparse.KindWarn]+k[logparse.KindSocketError]+k[logparse.KindProxyError]+k[logparse.KindCudaError]+k[logparse.KindSystemError] > 0 {
		out = append(out, "WARN")
	}
	return out
}

// humanBytes writes a size in B, KiB, MiB or GiB.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
