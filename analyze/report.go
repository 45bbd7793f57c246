package analyze

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Verdicts, and the exit codes of `watchdog analyze` that go with them.
const (
	VerdictFindings    = "findings"         // exit 1
	VerdictClean       = "no_problem_found" // exit 0: read fine, nothing found
	VerdictCannotJudge = "cannot_judge"     // exit 3: too little could be read
)

// Exit codes of `watchdog analyze`.
const (
	ExitClean       = 0
	ExitFindings    = 1
	ExitInput       = 2 // usage or input error: no such path, nothing to read
	ExitCannotJudge = 3
)

// Report is the result of an analysis. Its JSON field names are a contract: other tools
// read them.
type Report struct {
	Coverage Coverage `json:"coverage"`
	Verdict  string   `json:"verdict"`
	ExitCode int      `json:"exit_code"`
	// Jobs lists the training runs found when the files hold more than one; every
	// communicator, rank and finding then names its run (1-based).
	Jobs          []JobSummary    `json:"jobs,omitempty"`
	Communicators []CommReport    `json:"communicators"`
	Ranks         []RankReport    `json:"ranks"`
	Findings      []FindingReport `json:"findings"`
	Notes         []string        `json:"notes"`
	Files         []FileStat      `json:"files"`
}

// JobSummary is one training run among several in the files.
type JobSummary struct {
	Job      int      `json:"job"`
	Ranks    int      `json:"ranks"`
	Files    []string `json:"files"`
	Findings int      `json:"findings"`
}

// CommReport is one communicator across ranks.
type CommReport struct {
	Job    int              `json:"job,omitempty"`
	ID     string           `json:"id"`
	NRanks int              `json:"nranks"`
	Join   Join             `json:"join"`
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
	Job     int                  `json:"job,omitempty"`
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
	Job        int                    `json:"job,omitempty"`
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
	// Cause is the root's cause class; Episode the span of a slowdown or a stall that
	// resolved, with the share of the job's time it cost.
	Cause   incident.Cause    `json:"cause,omitempty"`
	Episode *incident.Episode `json:"episode,omitempty"`
}

// add renders one run's detect view and result into the report.
func (r *Report) add(jobIdx int, jb *job, j *detect.Job, res detect.Result) {
	tag := ""
	if jobIdx > 0 {
		tag = fmt.Sprintf("job %d: ", jobIdx)
		js := JobSummary{Job: jobIdx, Ranks: len(j.Procs), Findings: len(res.Findings)}
		for f := range jb.files {
			js.Files = append(js.Files, f)
		}
		sort.Strings(js.Files)
		r.Jobs = append(r.Jobs, js)
	}
	for _, n := range res.Notes {
		r.Notes = append(r.Notes, tag+n)
	}
	for _, g := range j.Groups {
		c := CommReport{Job: jobIdx, ID: g.ID, NRanks: g.NRanks, Join: joinOf(g.ID, jb.joins)}
		for _, m := range g.Members {
			c.Ranks = append(c.Ranks, CommRankReport{Rank: m.Comm.Rank, Host: m.Proc.Host, PID: m.Proc.PID,
				Collectives: m.Comm.Count, State: m.Comm.State})
		}
		r.Communicators = append(r.Communicators, c)
		r.Coverage.Communicators++
		switch c.Join.How {
		case "inferred":
			r.Coverage.Inferred++
		}
	}
	unjoined := 0
	for _, p := range j.Procs {
		for _, c := range p.Comms {
			if strings.HasPrefix(c.ID, unjoinedPrefix) && !strings.Contains(c.ID, "/") && (c.Count > 0 || len(c.P2P) > 0) {
				unjoined++
			}
		}
	}
	r.Coverage.Unjoined += unjoined
	if unjoined > 0 {
		r.Coverage.Limits = append(r.Coverage.Limits, fmt.Sprintf("%s%d communicator(s) with collectives could not be matched across ranks (no commId, no Init line, or no rank in it that fits): they were not compared", tag, unjoined))
	}
	for _, p := range j.Procs {
		rr := RankReport{Job: jobIdx, Rank: p.Rank, Host: p.Host, PID: p.PID, CudaDev: p.CudaDev, BusID: p.BusID,
			NCCL: p.NCCL, Network: p.Network, Lines: p.Lines}
		for _, e := range p.Events {
			rr.Events = append(rr.Events, e.Kind)
		}
		r.Ranks = append(r.Ranks, rr)
		if n := jb.lost[p]; n > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s%s: %d collective line(s) were cut by interleaved output and could not be read; its counts may be short by that many", tag, p.Name(), n))
		}
	}
	r.Coverage.Processes += len(j.Procs)
	for _, f := range res.Findings {
		fr := FindingReport{Job: jobIdx, Kind: f.Kind, Severity: f.Severity, Comm: f.Comm, Seq: f.Seq,
			Culprits: f.Culprits, Victims: f.Victims, Ops: f.Ops, LagSeconds: f.LagSeconds, Summary: f.Summary,
			Evidence: f.Evidence, Cause: f.Cause, Episode: f.Episode}
		if jn, ok := jb.joins[f.Comm]; ok && f.Comm != "" {
			fr.Evidence = append(fr.Evidence, fmt.Sprintf("communicator %s was joined across ranks without a commId (%s confidence): %s", f.Comm, jn.Confidence, jn.Why))
		}
		r.Findings = append(r.Findings, fr)
	}
}

func joinOf(id string, joins map[string]Join) Join {
	if j, ok := joins[id]; ok {
		return j
	}
	if strings.HasPrefix(id, snapshot.FRCommPrefix) {
		return Join{How: "process group", Confidence: "exact", Why: "a PyTorch process group's name and ranks, from Flight Recorder dumps"}
	}
	if strings.HasSuffix(id, "/gap") {
		return Join{How: "unjoined", Why: "lines are missing before its later collectives (a gap in the log), so its positions are not the other ranks'"}
	}
	if slash := strings.IndexByte(id, '/'); slash > 0 {
		if pj, ok := joins[id[:slash]]; ok {
			return Join{How: "split", Confidence: pj.Confidence, Why: "a split of a communicator joined by inference"}
		}
		return Join{How: "split", Confidence: "exact", Why: "parent's identity, splitCount and color"}
	}
	return Join{How: "commId", Confidence: "exact"}
}

// finish sorts the report and sets the verdict and exit code.
func (r *Report) finish(jobs int) {
	sort.SliceStable(r.Ranks, func(a, b int) bool {
		x, y := r.Ranks[a], r.Ranks[b]
		if x.Job != y.Job {
			return x.Job < y.Job
		}
		if x.Rank != y.Rank {
			return x.Rank < y.Rank
		}
		if x.Host != y.Host {
			return x.Host < y.Host
		}
		return x.PID < y.PID
	})
	if r.Communicators == nil {
		r.Communicators = []CommReport{}
	}
	if r.Findings == nil {
		r.Findings = []FindingReport{}
	}
	if r.Notes == nil {
		r.Notes = []string{}
	}
	if r.Ranks == nil {
		r.Ranks = []RankReport{}
	}
	c := &r.Coverage
	compared := false
	for _, cm := range r.Communicators {
		with := 0
		for _, m := range cm.Ranks {
			if m.Collectives > 0 {
				with++
			}
		}
		compared = compared || (len(cm.Ranks) >= 2 && with > 0)
	}
	switch {
	case c.NCCLLines == 0 && c.RASReports == 0 && c.FRDumps > 0:
		c.Limits = append(c.Limits, "no NCCL line was found: PyTorch's Flight Recorder dumps show its works, not what NCCL did with them; "+SubsysHint)
	case c.NCCLLines == 0 && c.RASReports == 0:
		c.Limits = append(c.Limits, "no NCCL line was found: nothing shows what NCCL did; "+SubsysHint)
	case c.Collectives == 0 && c.FREntries == 0:
		c.Limits = append(c.Limits, "no collective (COLL) line was found, so ranks cannot be compared for hangs or mismatches; "+SubsysHint)
	case !compared:
		c.Limits = append(c.Limits, "no communicator has two or more ranks' logs with collectives: there is nothing to compare a rank with (are all ranks' logs here?)")
	}
	if c.Lines > 0 && c.NCCLLines+c.TorchLines < c.Lines/10 && c.NCCLLines > 0 {
		c.Limits = append(c.Limits, fmt.Sprintf("only %d of %d lines are NCCL or PyTorch lines", c.NCCLLines+c.TorchLines, c.Lines))
	}
	judgeable := (c.Collectives > 0 || c.FREntries > 0) && compared && c.ReadErrors == 0 && len(c.Unseen) == 0
	switch {
	case len(r.Findings) > 0:
		r.Verdict, r.ExitCode = VerdictFindings, ExitFindings
	case judgeable:
		r.Verdict, r.ExitCode = VerdictClean, ExitClean
	default:
		r.Verdict, r.ExitCode = VerdictCannotJudge, ExitCannotJudge
	}
	_ = jobs
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

// WriteText writes the readable report, folded for large jobs.
func (r *Report) WriteText(w io.Writer) error { return r.Write(w, false) }

// fold is how many items a list shows before "and N more" (without --verbose).
const fold = 8

// Write writes the readable report: coverage, findings (most severe first), then
// communicators and ranks, summarised by state; verbose lists every rank.
func (r *Report) Write(w io.Writer, verbose bool) error {
	var b strings.Builder
	r.writeCoverage(&b, verbose)
	fmt.Fprintf(&b, "\nFindings (%d)\n", len(r.Findings))
	if len(r.Findings) == 0 {
		if r.Verdict == VerdictClean {
			b.WriteString("  none: no mismatch, hang, crash, straggler or link problem found\n")
		} else {
			b.WriteString("  none, but the logs do not allow a judgement (see Coverage): this is not an all-clear\n")
		}
	}
	for i, f := range r.Findings {
		job := ""
		if f.Job > 0 {
			job = fmt.Sprintf("job %d ", f.Job)
		}
		fmt.Fprintf(&b, "  %d. [%s] %s%s: %s\n", i+1, strings.ToUpper(string(f.Severity)), job, f.Kind, f.Summary)
		if e := f.Episode; e != nil && !e.Onset.IsZero() {
			end := "still going when the logs end"
			if !e.End.IsZero() {
				end = "ended " + e.End.UTC().Format("15:04:05.000Z")
			}
			fmt.Fprintf(&b, "       episode: began %s, %s; cost %.0f%% of the job's time", e.Onset.UTC().Format("15:04:05.000Z"), end, 100*e.LostShare)
			if f.Cause != "" {
				fmt.Fprintf(&b, "; cause: %s", f.Cause)
			}
			b.WriteString("\n")
		} else if f.Cause != "" {
			fmt.Fprintf(&b, "       cause: %s\n", f.Cause)
		}
		ev := f.Evidence
		if !verbose && len(ev) > fold {
			ev = ev[:fold]
		}
		for _, e := range ev {
			fmt.Fprintf(&b, "       - %s\n", e)
		}
		if len(ev) < len(f.Evidence) {
			fmt.Fprintf(&b, "       - ... %d more (--verbose)\n", len(f.Evidence)-len(ev))
		}
	}
	if len(r.Jobs) > 0 {
		fmt.Fprintf(&b, "\nJobs (%d): the files hold several training runs, reported separately\n", len(r.Jobs))
		for _, j := range r.Jobs {
			fmt.Fprintf(&b, "  job %d: %d ranks, %d findings, files %s\n", j.Job, j.Ranks, j.Findings, foldList(j.Files, verbose))
		}
	}
	r.writeComms(&b, verbose)
	r.writeRanks(&b, verbose)
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) writeCoverage(b *strings.Builder, verbose bool) {
	c := &r.Coverage
	fmt.Fprintf(b, "Coverage\n")
	fmt.Fprintf(b, "  read %d of %d files: %d processes, %d lines (%d NCCL, %d PyTorch, %d other), %d collective lines",
		c.FilesRead, c.Files, c.Processes, c.Lines, c.NCCLLines, c.TorchLines, c.OtherLines, c.Collectives)
	if c.RASReports > 0 {
		fmt.Fprintf(b, ", %d RAS report(s)", c.RASReports)
	}
	b.WriteString("\n")
	vers := "unknown"
	if len(c.Versions) > 0 {
		vers = strings.Join(c.Versions, ", ")
	}
	subs := "none"
	if len(c.Subsystems) > 0 {
		subs = strings.Join(c.Subsystems, ",")
	}
	fmt.Fprintf(b, "  NCCL %s; lines seen from %s; timestamps: %s\n", vers, subs, c.Timestamps)
	if c.Communicators > 0 {
		fmt.Fprintf(b, "  %d communicator(s) across ranks", c.Communicators)
		if c.Inferred > 0 {
			fmt.Fprintf(b, ", %d joined without commId (see Communicators)", c.Inferred)
		}
		b.WriteString("\n")
	}
	if len(c.Skipped) > 0 {
		byReason := map[string][]string{}
		var reasons []string
		for _, s := range c.Skipped {
			if _, ok := byReason[s.Reason]; !ok {
				reasons = append(reasons, s.Reason)
			}
			byReason[s.Reason] = append(byReason[s.Reason], s.Path)
		}
		fmt.Fprintf(b, "  skipped %d file(s):\n", len(c.Skipped))
		for _, why := range reasons {
			fmt.Fprintf(b, "    %s: %s\n", why, foldList(byReason[why], verbose))
		}
	}
	for _, l := range c.Limits {
		fmt.Fprintf(b, "  ! %s\n", l)
	}
	switch r.Verdict {
	case VerdictCannotJudge:
		b.WriteString("  => too little could be read to judge this job (exit 3)\n")
	}
}

func (r *Report) writeComms(b *strings.Builder, verbose bool) {
	fmt.Fprintf(b, "\nCommunicators (%d)\n", len(r.Communicators))
	shown := r.Communicators
	if !verbose && len(shown) > 2*fold {
		shown = shown[:2*fold]
	}
	for _, c := range shown {
		job := ""
		if c.Job > 0 {
			job = fmt.Sprintf("job %d ", c.Job)
		}
		join := ""
		switch c.Join.How {
		case "commId":
		case "unjoined":
			join = " [not compared: " + c.Join.Why + "]"
		default:
			join = fmt.Sprintf(" [%s, %s confidence]", c.Join.How, c.Join.Confidence)
		}
		fmt.Fprintf(b, "  %s%s  %d ranks%s: %s\n", job, c.ID, c.NRanks, join, progress(c, verbose))
		if c.Join.How == "inferred" && c.Join.Why != "" {
			fmt.Fprintf(b, "      joined: %s\n", c.Join.Why)
		}
	}
	if len(shown) < len(r.Communicators) {
		fmt.Fprintf(b, "  ... %d more communicators (--verbose)\n", len(r.Communicators)-len(shown))
	}
}

// progress summarises a communicator's ranks by collective count: "3 ranks at 339; behind:
// rank 1 at 252" for large jobs, every rank for small ones.
func progress(c CommReport, verbose bool) string {
	if verbose || len(c.Ranks) <= fold {
		var parts []string
		for _, m := range c.Ranks {
			parts = append(parts, fmt.Sprintf("rank %d: %d", m.Rank, m.Collectives))
		}
		if len(c.Ranks) < c.NRanks {
			parts = append(parts, fmt.Sprintf("%d rank(s) without a log", c.NRanks-len(c.Ranks)))
		}
		return "collectives " + strings.Join(parts, ", ")
	}
	at := map[int64][]int{}
	var counts []int64
	for _, m := range c.Ranks {
		if _, ok := at[m.Collectives]; !ok {
			counts = append(counts, m.Collectives)
		}
		at[m.Collectives] = append(at[m.Collectives], m.Rank)
	}
	sort.Slice(counts, func(a, b int) bool { return len(at[counts[a]]) > len(at[counts[b]]) })
	top := counts[0]
	s := fmt.Sprintf("%d ranks at %d collectives", len(at[top]), top)
	var others []string
	for _, n := range counts[1:] {
		rel := "behind"
		if n > top {
			rel = "ahead"
		}
		others = append(others, fmt.Sprintf("%s at %d (%s)", rankList(at[n]), n, rel))
	}
	if len(others) > 0 {
		shown := others
		if len(shown) > fold {
			shown = shown[:fold]
		}
		s += "; " + strings.Join(shown, "; ")
		if len(shown) < len(others) {
			s += fmt.Sprintf("; ... %d more groups (--verbose)", len(others)-len(shown))
		}
	}
	if len(c.Ranks) < c.NRanks {
		s += fmt.Sprintf("; %d rank(s) without a log", c.NRanks-len(c.Ranks))
	}
	return s
}

func rankList(ranks []int) string {
	sort.Ints(ranks)
	var parts []string
	for i, r := range ranks {
		if i == fold {
			parts = append(parts, fmt.Sprintf("%d more", len(ranks)-fold))
			break
		}
		parts = append(parts, strconv.Itoa(r))
	}
	if len(ranks) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ",")
}

func (r *Report) writeRanks(b *strings.Builder, verbose bool) {
	fmt.Fprintf(b, "\nRanks (%d)\n", len(r.Ranks))
	if !verbose && len(r.Ranks) > 4*fold {
		// Summarise: hosts, versions and networks, then the ranks that have events.
		hosts, nets, vers := map[string]int{}, map[string]int{}, map[string]int{}
		for _, k := range r.Ranks {
			hosts[k.Host]++
			nets[orDash(k.Network)]++
			vers[orDash(k.NCCL)]++
		}
		fmt.Fprintf(b, "  %d ranks on %d hosts; NCCL %s; network %s\n", len(r.Ranks), len(hosts), countList(vers), countList(nets))
		n := 0
		for _, k := range r.Ranks {
			if len(k.Events) == 0 {
				continue
			}
			if n == fold {
				b.WriteString("  ... more ranks with events (--verbose)\n")
				break
			}
			n++
			writeRank(b, k)
		}
		return
	}
	for _, k := range r.Ranks {
		writeRank(b, k)
	}
}

func writeRank(b *strings.Builder, k RankReport) {
	dev := ""
	if k.CudaDev >= 0 {
		dev = fmt.Sprintf(" GPU %d", k.CudaDev)
		if k.BusID != "" {
			dev += " (bus " + k.BusID + ")"
		}
	}
	job := ""
	if k.Job > 0 {
		job = fmt.Sprintf("job %d ", k.Job)
	}
	ev := ""
	if len(k.Events) > 0 {
		seen := map[snapshot.EventKind]int{}
		var order []snapshot.EventKind
		for _, e := range k.Events {
			if seen[e] == 0 {
				order = append(order, e)
			}
			seen[e]++
		}
		var parts []string
		for _, e := range order {
			parts = append(parts, fmt.Sprintf("%s x%d", e, seen[e]))
		}
		ev = "  events " + strings.Join(parts, ", ")
	}
	fmt.Fprintf(b, "  %srank %-4d %s pid %d%s  NCCL %s  net %s  %d lines%s\n", job, k.Rank, orDash(k.Host), k.PID, dev,
		orDash(k.NCCL), orDash(k.Network), k.Lines, ev)
}

func countList(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return m[keys[a]] > m[keys[b]] })
	var parts []string
	for _, k := range keys {
		if len(m) == 1 {
			return k
		}
		parts = append(parts, fmt.Sprintf("%s (%d)", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func foldList(items []string, verbose bool) string {
	if verbose || len(items) <= fold {
		return strings.Join(items, " ")
	}
	return strings.Join(items[:fold], " ") + fmt.Sprintf(" ... %d more (--verbose)", len(items)-fold)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
