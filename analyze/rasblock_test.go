package analyze

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
)

// TestRASInConsole: a text RAS report between a console's lines is read as a report, and
// the lines around it as log lines.
func TestRASInConsole(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(captures, "multicomm", "ras.healthy.text.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Our capture starts with the client's comment line: the report is what follows it.
	rasReport := string(b[bytes.IndexByte(b, '\n')+1:])
	timeout := "[rank5]:[E603 17:48:01.005271823 ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=64, NumelOut=64, Timeout(ms)=600000) ran for 600068 milliseconds before timing out.\n"
	cases := []struct {
		name, text string
		reports    int
		torch      int64
		exit       int
		say        string
	}{
		{"report then timeout", rasReport + timeout, 1, 1, ExitFindings, "SeqNum 812"},
		{"warning, report, timeout", "W703 00:59:30.440443364 ProcessGroupNCCL.cpp:981] Warning: a deprecated variable\n" + rasReport + timeout, 1, 1, ExitFindings, "SeqNum 812"},
		{"two reports", rasReport + rasReport, 2, 0, ExitCannotJudge, "2 RAS report(s)"},
		{"version line alone", "NCCL version 2.26.5+cuda12.8 compiled with CUDA 12.8\n" + timeout, 0, 1, ExitFindings, "SeqNum 812"},
		{"report alone", rasReport, 1, 0, ExitCannotJudge, "1 RAS report(s)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Analyze(context.Background(), []string{Stdin}, Options{Location: time.UTC, Rules: detect.DefaultConfig(), Stdin: strings.NewReader(c.text)})
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := rep.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if rep.Coverage.RASReports != c.reports || rep.Coverage.TorchLines != c.torch || rep.ExitCode != c.exit || !strings.Contains(b.String(), c.say) {
				t.Errorf("%d reports (want %d), %d PyTorch lines (want %d), exit %d (want %d), want %q:\n%s",
					rep.Coverage.RASReports, c.reports, rep.Coverage.TorchLines, c.torch, rep.ExitCode, c.exit, c.say, b.String())
			}
		})
	}
}
