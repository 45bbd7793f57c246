package analyze

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Report is the result of an analysis. Its JSON field names are a contract: other tools
// read them.
type Report struct {
	Communicators []CommReport    `json:"communicators"`
	Ranks         []RankReport    `json:"ranks"`
	Findings      []FindingReport `json:"findings"`
	Notes         []string        `json:"notes"`
	Files         []FileStat      `json:"files"`
}

// CommReport is one communicator across ranks.
type CommReport struct {
	ID     string           `json:"id"`
	NRanks int              `json:"nranks"`
	Ranks  []CommRankReport `json:"ranks"`
}

// CommRankReport is one rank's progress on a communicator.
type CommRankReport struct {
	Rank        int                `json:"rank"`
	Host        string             `json:"host"`
	PID         int                `json:"pid"`
	Collectives int64              `json:"collectives"`
	State       snapshot.CommState `json:"state,omitempty"`
}

// RankReport is one process.
type RankReport struct {
	Rank    int                  `json:"rank"`
	Host    string               `json:"host"`
	PID     int                  `json:"pid"`
	CudaDev int                  `json:"cuda_dev"`
	BusID   string               `json:"bus_id,omitempty"`
	NCCL    string               `json:"nccl,omitempty"`
	Network string               `json:"network,omitempty"`
	Lines   int64                `json:"lines"`
	Events  []snapshot.EventKind `json:"events,omitempty"`
}

// FindingReport is one finding.
type FindingReport struct {
	Kind       incident.Kind          `json:"kind"`
	Severity   incident.Severity      `json:"severity"`
	Comm       string                 `json:"comm,omitempty"`
	Seq        int64                  `json:"seq,omitempty"`
	Culprits   []incident.Culprit     `json:"culprits"`
	Victims    int                    `json:"victims,omitempty"`
	Ops        map[string]incident.Op `json:"ops,omitempty"`
	LagSeconds float64                `json:"lag_seconds,omitempty"`
	Summary    string                 `json:"summary"`
	Evidence   []string               `json:"evidence,omitempty"`
}

// NewReport renders a detect view and its result.
func NewReport(j *detect.Job, res detect.Result, files []FileStat) *Report {
	r := &Report{Notes: res.Notes, Files: files}
	if r.Notes == nil {
		r.Notes = []string{}
	}
	for _, g := range j.Groups {
		c := CommReport{ID: g.ID, NRanks: g.NRanks}
		for _, m := range g.Members {
			c.Ranks = append(c.Ranks, CommRankReport{Rank: m.Comm.Rank, Host: m.Proc.Host, PID: m.Proc.PID,
				Collectives: m.Comm.Count, State: m.Comm.State})
		}
		r.Communicators = append(r.Communicators, c)
	}
	for _, p := range j.Procs {
		rr := RankReport{Rank: p.Rank, Host: p.Host, PID: p.PID, CudaDev: p.CudaDev, BusID: p.BusID,
			NCCL: p.NCCL, Network: p.Network, Lines: p.Lines}
		for _, e := range p.Events {
			rr.Events = append(rr.Events, e.Kind)
		}
		r.Ranks = append(r.Ranks, rr)
	}
	sort.SliceStable(r.Ranks, func(a, b int) bool {
		if r.Ranks[a].Rank != r.Ranks[b].Rank {
			return r.Ranks[a].Rank < r.Ranks[b].Rank
		}
		return r.Ranks[a].PID < r.Ranks[b].PID
	})
	r.Findings = []FindingReport{}
	for _, f := range res.Findings {
		r.Findings = append(r.Findings, FindingReport{Kind: f.Kind, Severity: f.Severity, Comm: f.Comm, Seq: f.Seq,
			Culprits: f.Culprits, Victims: f.Victims, Ops: f.Ops, LagSeconds: f.LagSeconds, Summary: f.Summary,
			Evidence: f.Evidence})
	}
	if r.Communicators == nil {
		r.Communicators = []CommReport{}
	}
	return r
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// WriteText writes the readable report: communicators and ranks, then findings, most
// severe first.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Ranks (%d)\n", len(r.Ranks))
	for _, k := range r.Ranks {
		dev := ""
		if k.CudaDev >= 0 {
			dev = fmt.Sprintf(" GPU %d", k.CudaDev)
			if k.BusID != "" {
				dev += " (bus " + k.BusID + ")"
			}
		}
		fmt.Fprintf(&b, "  rank %-4d %s pid %d%s  NCCL %s  net %s  %d lines\n", k.Rank, k.Host, k.PID, dev,
			orDash(k.NCCL), orDash(k.Network), k.Lines)
	}
	fmt.Fprintf(&b, "\nCommunicators (%d)\n", len(r.Communicators))
	for _, c := range r.Communicators {
		var parts []string
		for _, m := range c.Ranks {
			parts = append(parts, fmt.Sprintf("rank %d: %d", m.Rank, m.Collectives))
		}
		fmt.Fprintf(&b, "  %s  %d ranks  collectives %s\n", c.ID, c.NRanks, strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "\nFindings (%d)\n", len(r.Findings))
	if len(r.Findings) == 0 {
		b.WriteString("  none: no mismatch, hang, crash, straggler or link problem found\n")
	}
	for i, f := range r.Findings {
		fmt.Fprintf(&b, "  %d. [%s] %s: %s\n", i+1, strings.ToUpper(string(f.Severity)), f.Kind, f.Summary)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "       - %s\n", e)
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	var unknown, lines int64
	for _, f := range r.Files {
		unknown += f.Unknown
		lines += f.Lines
	}
	fmt.Fprintf(&b, "\n%d files, %d lines (%d not NCCL/PyTorch lines we use)\n", len(r.Files), lines, unknown)
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
