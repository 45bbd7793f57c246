package analyze

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
)

// TestGapReader: runs of NULs where lines begin are dropped, wherever reads cut them, and
// the line after each is remembered; NULs inside a line are left to the parser.
func TestGapReader(t *testing.T) {
	in := "head 1\nhead 2\n" + strings.Repeat("\x00", 10000) + "op 1\nop\x002\n\x00\x00op 3\nop 4\n"
	want := "head 1\nhead 2\nop 1\nop\x002\nop 3\nop 4\n"
	for _, chunk := range []int{1, 3, 7, 4096, 1 << 20} {
		g := newGapReader(&chunked{r: strings.NewReader(in), n: chunk}, nil)
		var out bytes.Buffer
		if _, err := io.Copy(&out, g); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("chunks of %d: %q, want %q", chunk, out.String(), want)
		}
		if g.count != 2 || g.skipped != 10002 {
			t.Errorf("chunks of %d: %d gaps of %d bytes, want 2 of 10002", chunk, g.count, g.skipped)
		}
		op1, op3 := int64(strings.Index(want, "op 1")), int64(strings.Index(want, "op 3"))
		if !g.gapBefore(op1) || !g.gapBefore(op3) || g.gapBefore(int64(strings.Index(want, "op 4"))) {
			t.Errorf("chunks of %d: gaps at %v, want before %d and %d", chunk, g.gaps, op1, op3)
		}
	}
}

type chunked struct {
	r io.Reader
	n int
}

func (c *chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// trimmed copies a capture log into dir with the bytes from its first per-op line to the
// start of its (k+1)-th per-op line turned into a hole, as the sidecar's log bound leaves it.
func trimmed(t *testing.T, src, dir string, k int) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var ops []int
	for off := 0; off < len(b); {
		end := bytes.IndexByte(b[off:], '\n')
		if end < 0 {
			break
		}
		if bytes.Contains(b[off:off+end], []byte(": opCount ")) {
			ops = append(ops, off)
		}
		off += end + 1
	}
	if len(ops) <= k {
		t.Fatalf("%s has %d per-op lines, want more than %d", src, len(ops), k)
	}
	out := filepath.Join(dir, filepath.Base(src))
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Header, then the tail at its own offset: what lies between is never written, a hole.
	if _, err := f.WriteAt(b[:ops[0]], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b[ops[k]:], int64(ops[k])); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBoundedLogs: logs whose middle a sidecar freed (a hole between the header and the
// tail, cut at a different collective on each rank) are read: the holes are skipped, not
// parsed, and said in the coverage; the ranks' positions after them differ by 30 for
// reasons that are not the job's, so no hang or mismatch is reported, and the verdict is
// not an all-clear.
func TestBoundedLogs(t *testing.T) {
	dir := t.TempDir()
	logs, err := filepath.Glob(filepath.Join(captures, "healthy", "nccl.*.log"))
	if err != nil || len(logs) != 2 {
		t.Fatalf("capture logs %v, %v", logs, err)
	}
	trimmed(t, logs[0], dir, 100)
	trimmed(t, logs[1], dir, 130)
	rep, err := Analyze(context.Background(), []string{dir}, Options{Location: time.UTC, Rules: detect.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.Write(&b, true); err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 || rep.ExitCode == ExitFindings || rep.ExitCode == ExitClean {
		t.Errorf("exit %d with findings on logs that only lost their middle:\n%s", rep.ExitCode, b.String())
	}
	if rep.Coverage.Gaps != 2 || rep.Coverage.GapFiles != 2 || !strings.Contains(strings.Join(rep.Coverage.Limits, "\n"), "gap") {
		t.Errorf("coverage %+v: want 2 gaps in 2 files, named in the limits", rep.Coverage)
	}
	for _, fs := range rep.Files {
		if fs.Unknown > 0 || fs.Procs != 1 || fs.Coll == 0 {
			t.Errorf("%s: %d unknown lines, %d processes, %d collectives: the hole was parsed", fs.Path, fs.Unknown, fs.Procs, fs.Coll)
		}
	}
}

// FuzzGapReader: whatever the bytes and however reads cut them, the gap reader passes on
// exactly the input without the runs of NULs that begin lines, and counts one gap per run.
func FuzzGapReader(f *testing.F) {
	f.Add([]byte("a\n\x00\x00b\n"), uint8(1))
	f.Add([]byte("\x00\x00\x00"), uint8(2))
	f.Add([]byte("x\x00y\n\n\x00\n\x00z"), uint8(3))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		var want []byte
		runs, start := 0, true
		for i := 0; i < len(in); i++ {
			if start && in[i] == 0 {
				if i == 0 || in[i-1] != 0 {
					runs++
				}
				continue
			}
			want = append(want, in[i])
			start = in[i] == '\n'
		}
		g := newGapReader(&chunked{r: bytes.NewReader(in), n: int(chunk%64) + 1}, nil)
		got, err := io.ReadAll(g)
		if err != nil || !bytes.Equal(got, want) || g.count != runs {
			t.Fatalf("%q: got %q (%d gaps), want %q (%d), %v", in, got, g.count, want, runs, err)
		}
	})
}
