package analyze

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// postedSet is a set of logs people posted in public threads, with what each thread concluded
// and what the report must say, written before the set was first read. The logs themselves
// are other people's and stay out of the tree: NCCLWATCH_POSTED names the folder that holds
// them as <case>.log.
type postedSet struct {
	Set   string       `json:"set"`
	Cases []postedCase `json:"cases"`
}

type postedCase struct {
	Case     string       `json:"case"`
	URL      string       `json:"url"`
	Launcher string       `json:"launcher"`
	NCCL     string       `json:"nccl"`
	Class    string       `json:"class"`
	Truth    string       `json:"truth"`
	Expect   postedExpect `json:"expect"`
}

// postedExpect: exit codes accepted (0 and 3 both right for an excerpt without the failure),
// the kinds a first finding may have, its culprit, and words it must and must not say.
type postedExpect struct {
	Exit  []int    `json:"exit"`
	Kind  []string `json:"kind"`
	Rank  *int     `json:"rank"`
	Host  string   `json:"host"`
	Say   []string `json:"say"`
	Avoid []string `json:"avoid"`
}

// postedVerdict scores one report against its expectation.
func postedVerdict(rep *Report, want postedExpect) (verdict, got string) {
	got = fmt.Sprintf("exit %d", rep.ExitCode)
	if len(rep.Findings) > 0 {
		f := rep.Findings[0]
		c := "no culprit"
		if len(f.Culprits) > 0 {
			c = fmt.Sprintf("rank %d %s", f.Culprits[0].Rank, f.Culprits[0].Host)
		}
		got = fmt.Sprintf("%s (%s), exit %d", f.Kind, strings.TrimSpace(c), rep.ExitCode)
	}
	wantFinding := len(want.Kind) > 0
	switch {
	case !wantFinding && len(rep.Findings) > 0:
		return "false alarm", got
	case !wantFinding:
		if slices.Contains(want.Exit, rep.ExitCode) {
			return "right", got
		}
		return "wrong", got
	case rep.ExitCode == ExitCannotJudge:
		return "cannot judge", got
	case len(rep.Findings) == 0 || !slices.Contains(want.Exit, rep.ExitCode):
		return "wrong", got
	}
	f := rep.Findings[0]
	if !slices.Contains(want.Kind, string(f.Kind)) {
		return "wrong", got
	}
	ok := want.Rank == nil && want.Host == "" || anyCulprit(f.Culprits, fieldExpect{Rank: want.Rank, Host: want.Host})
	for _, s := range want.Say {
		ok = ok && strings.Contains(f.Summary, s)
	}
	for _, s := range want.Avoid {
		ok = ok && !strings.Contains(f.Summary, s)
	}
	if !ok {
		return "partly", got
	}
	return "right", got
}

// TestPostedSets scores every set under testdata/posted against the private logs in
// $NCCLWATCH_POSTED. It reports; it fails only on a false alarm on a healthy log.
func TestPostedSets(t *testing.T) {
	dir := os.Getenv("NCCLWATCH_POSTED")
	if dir == "" {
		t.Skip("NCCLWATCH_POSTED names no folder of posted logs (they are not in the tree)")
	}
	sets, _ := filepath.Glob("testdata/posted/*.json")
	for _, path := range sets {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var set postedSet
		if err := json.Unmarshal(b, &set); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var table bytes.Buffer
		count := map[string]int{}
		fmt.Fprintf(&table, "| case | expected | got | verdict |\n|---|---|---|---|\n")
		for _, c := range set.Cases {
			log := filepath.Join(dir, c.Case+".log")
			if _, err := os.Stat(log); err != nil {
				count["missing"]++
				continue
			}
			rep := run(t, log)
			v, got := postedVerdict(rep, c.Expect)
			count[v]++
			want := "no finding"
			if len(c.Expect.Kind) > 0 {
				want = strings.Join(c.Expect.Kind, "|")
			}
			fmt.Fprintf(&table, "| %s | %s | %s | %s |\n", c.Case, want, got, v)
			if v == "false alarm" {
				var text bytes.Buffer
				rep.WriteText(&text)
				t.Errorf("%s: a finding on a log that has none:\n%s", c.Case, text.String())
			}
			if testing.Verbose() && v != "right" {
				var text bytes.Buffer
				rep.WriteText(&text)
				t.Logf("%s (%s):\n%s", c.Case, v, text.String())
			}
		}
		t.Logf("%s (%s):\n%s\nright %d, partly %d, wrong %d, false alarm %d, cannot judge %d, missing %d of %d",
			filepath.Base(path), set.Set, table.String(), count["right"], count["partly"], count["wrong"],
			count["false alarm"], count["cannot judge"], count["missing"], len(set.Cases))
	}
}
