package analyze

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/incident"
)

// fieldExpect is what a case under testdata/field/cases must produce: the exit code, and for a
// finding its kind, the culprit it names, words its summary must hold and words it must not
// (a wrong stage, a misread rank), and, where set, how many findings (one per root cause).
type fieldExpect struct {
	Exit      int      `json:"exit"`
	Kind      string   `json:"kind"`
	Rank      *int     `json:"rank"`
	Host      string   `json:"host"`
	Port      string   `json:"port"`
	NoCulprit bool     `json:"no_culprit"`
	Say       []string `json:"say"`
	Avoid     []string `json:"avoid"`
	// AvoidAnywhere are words neither the summary nor the evidence may hold (another
	// process's traceback glued into a message).
	AvoidAnywhere []string `json:"avoid_anywhere"`
	Findings      *int     `json:"findings"`
	// Limits are words the coverage's sentences on what limits the judgement must hold
	// (a rank no source agrees on, labels that are not ranks).
	Limits []string `json:"limits"`
	// Ranks, where set, is how many processes the report lists: none made up beside the
	// ones the logs show.
	Ranks *int `json:"ranks"`
	// Jobs, for a folder of several jobs, are what each job's first finding must be, in
	// the report's order of jobs.
	Jobs []fieldExpect `json:"jobs"`
}

func (e fieldExpect) String() string {
	if e.Kind == "" {
		return fmt.Sprintf("no finding, exit %d", e.Exit)
	}
	return fmt.Sprintf("%s %s, exit %d", e.Kind, culpritWords(e.Rank, e.Host, e.Port, e.NoCulprit), e.Exit)
}

func culpritWords(rank *int, host, port string, none bool) string {
	if none {
		return "no culprit"
	}
	var w []string
	if rank != nil {
		w = append(w, fmt.Sprintf("rank %d", *rank))
	}
	if host != "" {
		w = append(w, host)
	}
	if port != "" {
		w = append(w, port)
	}
	if len(w) == 0 {
		return "(any culprit)"
	}
	return strings.Join(w, " ")
}

// TestFieldCases is the evaluation table: small jobs whose fault is known (written for this
// test from NCCL's formats, see each expect.json), read as a user would hand them over. The
// first finding must be the cause, naming its culprit; healthy jobs must raise nothing.
func TestFieldCases(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/field/cases/*")
	sort.Strings(dirs)
	if len(dirs) < 25 {
		t.Fatalf("%d field cases, want at least 25", len(dirs))
	}
	var table bytes.Buffer
	fmt.Fprintf(&table, "| case | expected | got |\n|---|---|---|\n")
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, "expect.json"))
			if err != nil {
				t.Fatal(err)
			}
			var want fieldExpect
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			rep := run(t, dir)
			got := "no finding"
			var text bytes.Buffer
			rep.WriteText(&text)
			var problems []string
			if rep.ExitCode != want.Exit {
				problems = append(problems, fmt.Sprintf("exit %d, want %d", rep.ExitCode, want.Exit))
			}
			if want.Findings != nil && len(rep.Findings) != *want.Findings {
				problems = append(problems, fmt.Sprintf("%d findings, want %d (one per root cause)", len(rep.Findings), *want.Findings))
			}
			for _, w := range want.Limits {
				if !strings.Contains(strings.Join(rep.Coverage.Limits, " | "), w) {
					problems = append(problems, fmt.Sprintf("coverage limits lack %q: %q", w, rep.Coverage.Limits))
				}
			}
			if want.Ranks != nil && len(rep.Ranks) != *want.Ranks {
				problems = append(problems, fmt.Sprintf("%d ranks listed, want %d", len(rep.Ranks), *want.Ranks))
			}
			for i, jw := range want.Jobs {
				found := false
				for _, f := range rep.Findings {
					if f.Job == i+1 {
						found = true
						for _, p := range checkFinding(f, jw) {
							problems = append(problems, fmt.Sprintf("job %d: %s", i+1, p))
						}
						break
					}
				}
				if !found && jw.Kind != "" {
					problems = append(problems, fmt.Sprintf("job %d: no finding", i+1))
				}
			}
			if len(want.Jobs) > 0 && len(rep.Jobs) != len(want.Jobs) {
				problems = append(problems, fmt.Sprintf("%d jobs, want %d", len(rep.Jobs), len(want.Jobs)))
			}
			if len(want.Jobs) > 0 {
				// Each job's finding was checked above.
			} else if len(rep.Findings) > 0 {
				f := rep.Findings[0]
				var rank *int
				host, port := "", ""
				if len(f.Culprits) > 0 {
					c := f.Culprits[0]
					if c.Rank >= 0 {
						rank = &c.Rank
					}
					host, port = c.Host, c.Port
				}
				got = fmt.Sprintf("%s %s", f.Kind, culpritWords(rank, host, port, len(f.Culprits) == 0))
				problems = append(problems, checkFinding(f, want)...)
			} else if want.Kind != "" {
				problems = append(problems, "no finding")
			}
			got += fmt.Sprintf(", exit %d", rep.ExitCode)
			mark := ""
			if len(problems) > 0 {
				mark = " ✗"
				t.Errorf("%s\n%s", strings.Join(problems, "; "), text.String())
			}
			fmt.Fprintf(&table, "| %s | %s | %s%s |\n", name, want, got, mark)
		})
	}
	t.Logf("evaluation table:\n%s", table.String())
}

func checkFinding(f FindingReport, want fieldExpect) []string {
	var p []string
	if want.Kind == "" {
		return []string{fmt.Sprintf("a finding on a healthy job: %s", f.Summary)}
	}
	if string(f.Kind) != want.Kind {
		p = append(p, fmt.Sprintf("kind %s, want %s", f.Kind, want.Kind))
	}
	if want.NoCulprit && len(f.Culprits) > 0 {
		p = append(p, fmt.Sprintf("culprits %+v, want none", f.Culprits))
	}
	if want.Rank != nil || want.Host != "" || want.Port != "" {
		if !anyCulprit(f.Culprits, want) {
			p = append(p, fmt.Sprintf("culprits %+v, want %s", f.Culprits, culpritWords(want.Rank, want.Host, want.Port, false)))
		}
	}
	for _, s := range want.Say {
		if !strings.Contains(f.Summary, s) {
			p = append(p, fmt.Sprintf("summary lacks %q: %s", s, f.Summary))
		}
	}
	for _, s := range want.Avoid {
		if strings.Contains(f.Summary, s) {
			p = append(p, fmt.Sprintf("summary says %q: %s", s, f.Summary))
		}
	}
	for _, s := range want.AvoidAnywhere {
		for _, e := range append([]string{f.Summary}, f.Evidence...) {
			if strings.Contains(e, s) {
				p = append(p, fmt.Sprintf("finding says %q: %s", s, e))
			}
		}
	}
	return p
}

// anyCulprit: the first culprit must match; a finding about two ranks (a shared GPU) names
// the expected rank among them.
func anyCulprit(cs []incident.Culprit, want fieldExpect) bool {
	for i, c := range cs {
		if i > 0 && want.Rank == nil {
			break
		}
		if (want.Rank == nil || c.Rank == *want.Rank) && (want.Host == "" || c.Host == want.Host) && (want.Port == "" || c.Port == want.Port) {
			return true
		}
	}
	return false
}
