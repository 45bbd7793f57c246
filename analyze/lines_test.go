package analyze

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
)

// readOutcome is what a file's reading leaves for the analysis, comparable across modes.
type readOutcome struct {
	Stat    FileStat
	Skip    string
	Version string
	Torch   []torchEvent
	RAS     int
	Procs   map[procKey]procOutcome
}

type procOutcome struct {
	Snap     any
	Kinds    any
	Version  string
	Lines    int64
	LostColl int64
}

func outcomeOf(r *fileResult) readOutcome {
	o := readOutcome{Stat: r.stat, Skip: r.skip, Version: r.version, Torch: r.torch, RAS: len(r.ras), Procs: map[procKey]procOutcome{}}
	for k, p := range r.procs {
		o.Procs[k] = procOutcome{Snap: p.snap, Kinds: p.kinds, Version: p.version, Lines: p.lines, LostColl: p.lostColl}
	}
	return o
}

// TestReadModesAgree reads every field case, every capture and some awkward files in each
// way a file can be read (one goroutine or two, blocks down to a few bytes, so that lines
// span blocks): what the analysis gets must not depend on it.
func TestReadModesAgree(t *testing.T) {
	var files []string
	for _, root := range []string{"testdata/field/cases", "../testdata/captures"} {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && filepath.Base(p) != "expect.json" {
				files = append(files, p)
			}
			return nil
		})
	}
	dir := t.TempDir()
	line := "[2026-01-05 10:00:00.001990] node0:4097:4097 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7f00 recvbuff 0x7f00 count 8 datatype 7 op 0 root 0 comm 0x55d0 [nranks=2] stream (nil)\n"
	awkward := map[string]string{
		"no-final-newline.log": strings.Repeat(line, 50) + strings.TrimSuffix(line, "\n"),
		"crlf.log":             strings.ReplaceAll(strings.Repeat(line, 40), "\n", "\r\n"),
		"too-long.log":         strings.Repeat(line, 3) + strings.Repeat("x", maxLine+4097) + "\n" + strings.Repeat(line, 3),
		"too-long-at-end.log":  strings.Repeat(line, 3) + strings.Repeat("y", maxLine+10),
		"exactly-max.log":      strings.Repeat(line, 2) + strings.Repeat("z", maxLine-1) + "\n" + line,
		"gaps.log":             strings.Repeat(line, 5) + strings.Repeat("\x00", 9000) + strings.Repeat(line, 5) + strings.Repeat("\x00", 300),
		"empty.log":            "",
		"blank-lines.log":      "\n\n\n" + line + "\n\n",
	}
	for name, text := range awkward {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	if len(files) < 100 {
		t.Fatalf("only %d files found", len(files))
	}
	opts := &Options{Location: time.UTC, RingSize: 4096, Rules: detect.DefaultConfig()}
	modes := []readMode{{pipeline: true}, {block: 7}, {pipeline: true, block: 64}, {block: 1000}, {pipeline: true, block: 4096}}
	ctx := context.Background()
	for _, f := range files {
		want := outcomeOf(readFile(ctx, f, opts, readMode{}))
		for _, m := range modes {
			if m.block > 0 && m.block < 1000 && want.Stat.Lines > 2000 {
				continue // blocks of a few bytes: the small files suffice
			}
			got := outcomeOf(readFile(ctx, f, opts, m))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s read with %+v differs from one goroutine's default:\n got  %+v\n want %+v", f, m, got.Stat, want.Stat)
			}
		}
	}
}

// TestReadLongLine checks the cut of a line longer than maxLine: its first maxLine bytes
// are read, and the line after it is read whole.
func TestReadLongLine(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "long.log")
	text := "Starting\n" + strings.Repeat("x", maxLine+100) + "\nnode1:7:7 [0] NCCL INFO Using network IB\n"
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []readMode{{}, {pipeline: true}, {block: 4096}} {
		r := readFile(context.Background(), p, &Options{Location: time.UTC, RingSize: 64}, m)
		if r.stat.TooLong != 1 || r.stat.Lines != 3 || r.stat.NCCL != 1 {
			t.Errorf("%+v: too long %d, lines %d, nccl %d; want 1, 3, 1", m, r.stat.TooLong, r.stat.Lines, r.stat.NCCL)
		}
	}
}

// FuzzReadModes reads arbitrary files on one goroutine and on two, in blocks of a few
// bytes: the outcome must be the same.
func FuzzReadModes(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/field/cases/*/*")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil || len(b) > 16<<10 || filepath.Base(s) == "expect.json" {
			continue
		}
		f.Add(b, uint16(61))
	}
	f.Add([]byte("a\x00\x00\nb\n\x00\x00\x00c"), uint16(2))
	f.Add([]byte("\n\n\r\n"), uint16(1))
	dir := f.TempDir()
	opts := &Options{Location: time.UTC, RingSize: 64, Rules: detect.DefaultConfig()}
	f.Fuzz(func(t *testing.T, text []byte, block uint16) {
		p := filepath.Join(dir, "f.log")
		if err := os.WriteFile(p, text, 0o644); err != nil {
			t.Fatal(err)
		}
		want := outcomeOf(readFile(context.Background(), p, opts, readMode{}))
		got := outcomeOf(readFile(context.Background(), p, opts, readMode{pipeline: true, block: 1 + int(block%4096)}))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("pipelined read in blocks of %d differs:\n got  %+v\n want %+v", 1+int(block%4096), got.Stat, want.Stat)
		}
	})
}

// TestReadCancelled: a cancelled analysis stops reading a file in every mode, says why,
// and leaves no goroutine of the pipelined read behind.
func TestReadCancelled(t *testing.T) {
	line := "node0:4097:4097 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7f00 recvbuff 0x7f00 count 8 datatype 7 op 0 root 0 comm 0x55d0 [nranks=2] stream (nil)\n"
	p := filepath.Join(t.TempDir(), "big.log")
	if err := os.WriteFile(p, []byte(strings.Repeat(line, 3<<16)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := runtime.NumGoroutine()
	opts := &Options{Location: time.UTC, RingSize: 64}
	for _, m := range []readMode{{}, {pipeline: true}, {pipeline: true, block: 4096}} {
		r := readFile(ctx, p, opts, m)
		if !errors.Is(r.err, context.Canceled) || r.stat.Lines >= 3<<16 {
			t.Errorf("%+v: error %v after %d lines, want it cancelled before the end", m, r.err, r.stat.Lines)
		}
	}
	for end := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines left, %d before", n, before)
	}
}
