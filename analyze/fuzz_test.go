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

// FuzzConsole feeds arbitrary consoles through the whole analysis from standard input:
// the reader of quoted WARNs ("Last error:" and the next line), the launcher and PyTorch
// lines, the rules and the report. It must never fail on content, and every finding must
// say something.
func FuzzConsole(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/field/cases/*/*")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil || len(b) > 64<<10 {
			continue
		}
		f.Add(b)
	}
	f.Add([]byte("[rank1]: Last error:\n[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000\n"))
	f.Add([]byte("Last error:\n"))
	// A terminal copy: lines padded to its width, newlines lost.
	f.Add([]byte("h:1:2 [0] NCCL INFO proxy.cc:1 -> 6" + strings.Repeat(" ", 80) + "h:1:2 [0] NCCL INFO proxy.cc:2 -> 6 [Progress Thread]" + strings.Repeat(" ", 40) + "h:1:2 [0] x.c:3 NCCL WARN NET/I\n"))
	f.Fuzz(func(t *testing.T, console []byte) {
		rep, err := Analyze(context.Background(), []string{Stdin}, Options{Location: time.UTC, Rules: detect.DefaultConfig(),
			Stdin: bytes.NewReader(console)})
		if err != nil {
			return // nothing to read is an input error, said as such
		}
		if rep.ExitCode != ExitClean && rep.ExitCode != ExitFindings && rep.ExitCode != ExitCannotJudge {
			t.Fatalf("exit code %d", rep.ExitCode)
		}
		for _, fd := range rep.Findings {
			if fd.Summary == "" || fd.Kind == "" {
				t.Fatalf("finding without a kind or summary: %+v", fd)
			}
		}
		var out bytes.Buffer
		if err := rep.WriteText(&out); err != nil {
			t.Fatal(err)
		}
	})
}
