//go:build linux

package follow

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLinesInOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(*Options)
	}{
		{"inotify", func(*Options) {}},
		{"poll-only", func(o *Options) { o.DisableWatch = true; o.SafetyPoll = 5 * time.Millisecond }},
		{"no-batching", func(o *Options) { o.BatchInterval = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "nccl.node7.4242.log")
			writeLines(t, path, numbered("before", 1, 50)...) // present at start
			rec := &recorder{}
			opts := testOptions(t, dir)
			tc.opts(&opts)
			start(t, opts, rec)
			want := numbered("before", 1, 50)
			for i := 0; i < 10; i++ {
				batch := numbered(fmt.Sprintf("w%d", i), 1, 100)
				writeLines(t, path, batch...)
				want = append(want, batch...)
			}
			// Several lines in one write, and lines split across writes.
			appendRaw(t, path, "multi 1\nmulti 2\nsplit ")
			appendRaw(t, path, "in two\n")
			want = append(want, "multi 1", "multi 2", "split in two")
			waitFor(t, "all lines", func() bool { return rec.lineCount() >= len(want) })

			streams := rec.streams()
			if len(streams) != 1 {
				t.Fatalf("want 1 file, got %d", len(streams))
			}
			s := streams[0]
			if s[0].ev != Opened || s[0].off != 0 {
				t.Fatalf("first call %+v, want Opened at 0", s[0])
			}
			f := s[0].file
			if f.Host() != "node7" || f.PID() != 4242 {
				t.Errorf("host/pid = %q/%d", f.Host(), f.PID())
			}
			equalLines(t, linesOf(s), want)
			// Offset during Line is the end of that line.
			var end int64
			for _, c := range s {
				if c.ev != 0 {
					continue
				}
				end += int64(len(c.line)) + 1
				if c.off != end || c.flags != 0 {
					t.Fatalf("line %q: offset %d flags %v, want %d 0", c.line, c.off, c.flags, end)
				}
			}
		})
	}
}

func TestPartialLineCompletedLater(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	rec := &recorder{}
	r := start(t, testOptions(t, dir), rec)
	writeLines(t, path, "one")
	appendRaw(t, path, "two, first half")
	waitFor(t, "partial read", func() bool { return r.fw.Stats().Bytes >= uint64(len("one\ntwo, first half")) })
	if got := linesOf(rec.snapshot()); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("before the newline: %q", got)
	}
	appendRaw(t, path, ", second half\nthree\n")
	waitFor(t, "lines", func() bool { return rec.lineCount() == 3 })
	equalLines(t, linesOf(rec.snapshot()), []string{"one", "two, first half, second half", "three"})
	for _, c := range rec.snapshot() {
		if c.flags != 0 {
			t.Errorf("%q flags %v", c.line, c.flags)
		}
	}
}

func TestRenameRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nccl.h.1.log")
	rec := &recorder{}
	start(t, testOptions(t, dir), rec)

	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, l := range numbered("old", 1, 5) {
		fmt.Fprintln(w, l)
	}
	waitFor(t, "first lines", func() bool { return rec.lineCount() == 5 })
	// Written to the old inode right before the rename: must not be lost.
	for _, l := range numbered("old", 6, 10) {
		fmt.Fprintln(w, l)
	}
	fmt.Fprint(w, "old tail without newline")
	if err := os.Rename(path, path+".1"); err != nil { // out of the glob
		t.Fatal(err)
	}
	writeLines(t, path, numbered("new", 1, 5)...)
	waitFor(t, "new file", func() bool { return len(rec.streamsAt(path)) == 2 && rec.lineCount() == 16 })

	s := rec.streamsAt(path)
	old, nu := s[0], s[1]
	equalLines(t, linesOf(old), append(numbered("old", 1, 10), "old tail without newline"))
	if last := old[len(old)-2]; last.flags != LinePartial {
		t.Errorf("tail flags %v, want partial", last.flags)
	}
	final := old[len(old)-1].ev
	if final != Rotated && final != Deleted {
		t.Errorf("old file ended with %v", final)
	}
	t.Logf("old file ended with %v", final)
	if ev := eventsOf(nu); ev[0] != Opened {
		t.Errorf("new file events %v", ev)
	}
	equalLines(t, linesOf(nu), numbered("new", 1, 5))
	// Every call for the old file precedes every call for the new one.
	calls := rec.snapshot()
	lastOld := slices.IndexFunc(calls, func(c call) bool { return c.file == old[len(old)-1].file && c.ev.Final() })
	firstNew := slices.IndexFunc(calls, func(c call) bool { return c.file == nu[0].file })
	if lastOld > firstNew {
		t.Errorf("old file finished after the new one began")
	}
}

func TestRenameWithinGlobKeepsFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	rec := &recorder{}
	start(t, testOptions(t, dir), rec)
	writeLines(t, path, "1", "2")
	waitFor(t, "lines", func() bool { return rec.lineCount() == 2 })
	moved := filepath.Join(dir, "b.log")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	writeLines(t, moved, "3")
	waitFor(t, "line 3", func() bool { return rec.lineCount() == 3 })
	s := rec.streams()
	if len(s) != 1 {
		t.Fatalf("want one File, got %d", len(s))
	}
	equalLines(t, linesOf(s[0]), []string{"1", "2", "3"})
	if !slices.Contains(eventsOf(s[0]), Renamed) {
		t.Errorf("events %v, want Renamed", eventsOf(s[0]))
	}
}

func TestCopyTruncate(t *testing.T) {
	t.Run("append-writer", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "a.log")
		rec := &recorder{}
		r := start(t, testOptions(t, dir), rec)
		writeLines(t, path, numbered("before truncation, a longish line", 1, 20)...)
		waitFor(t, "first lines", func() bool { return rec.lineCount() == 20 })
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		writeLines(t, path, "after 1", "after 2")
		waitFor(t, "lines after truncation", func() bool { return rec.lineCount() == 22 })
		s := rec.streams()
		if len(s) != 1 {
			t.Fatalf("want one File, got %d", len(s))
		}
		equalLines(t, linesOf(s[0])[20:], []string{"after 1", "after 2"})
		if !slices.Contains(eventsOf(s[0]), Truncated) {
			t.Errorf("events %v, want Truncated", eventsOf(s[0]))
		}
		if r.fw.Stats().Truncations != 1 {
			t.Errorf("stats %+v", r.fw.Stats())
		}
	})
	t.Run("nccl-writer-leaves-hole", func(t *testing.T) {
		// NCCL opens with fopen "w" (no O_APPEND): after copytruncate it goes
		// on writing at its old offset, and the file starts with NULs.
		dir := t.TempDir()
		path := filepath.Join(dir, "a.log")
		rec := &recorder{}
		start(t, testOptions(t, dir), rec)
		w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for _, l := range numbered(strings.Repeat("x", 100), 1, 100) {
			fmt.Fprintln(w, l)
		}
		waitFor(t, "first lines", func() bool { return rec.lineCount() == 100 })
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "truncation", func() bool { return rec.hasEvent(path, Truncated) })
		fmt.Fprintln(w, "after the hole")
		waitFor(t, "line after hole", func() bool { return rec.lineCount() == 101 })
		calls := rec.snapshot()
		last := calls[len(calls)-1]
		if last.line != "after the hole" {
			t.Fatalf("last line %q", last.line)
		}
		t.Logf("flags %v (NULs stripped unless SEEK_DATA skipped the whole hole)", last.flags)
	})
}

func TestDeleteAndRecreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	rec := &recorder{}
	r := start(t, testOptions(t, dir), rec)
	writeLines(t, path, "first 1", "first 2")
	appendRaw(t, path, "no newline")
	waitFor(t, "lines", func() bool { return rec.lineCount() == 2 })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deleted", func() bool { return rec.hasEvent(path, Deleted) })
	writeLines(t, path, "second 1")
	waitFor(t, "new file", func() bool { return rec.lineCount() == 4 })

	s := rec.streamsAt(path)
	if len(s) != 2 {
		t.Fatalf("want 2 Files, got %d", len(s))
	}
	equalLines(t, linesOf(s[0]), []string{"first 1", "first 2", "no newline"})
	if ev := eventsOf(s[0]); !slices.Equal(ev, []EventKind{Opened, Deleted}) {
		t.Errorf("first file events %v", ev)
	}
	equalLines(t, linesOf(s[1]), []string{"second 1"})
	if st := r.fw.Stats(); st.Deletions != 1 || st.PartialLines != 1 || st.Files != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestManyFilesAppearAndIdle(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	rec := &recorder{}
	opts := testOptions(t, dir)
	opts.IdleAfter = 100 * time.Millisecond
	r := start(t, opts, rec)

	const files, perFile = 200, 20
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < files; i += 4 {
				path := filepath.Join(dir, fmt.Sprintf("nccl.host%d.%d.log", i%8, 1000+i))
				writeLines(t, path, numbered("first", 1, perFile/2)...)
			}
			for i := g; i < files; i += 4 {
				path := filepath.Join(dir, fmt.Sprintf("nccl.host%d.%d.log", i%8, 1000+i))
				writeLines(t, path, numbered("second", 1, perFile/2)...)
			}
		}()
	}
	wg.Wait()
	waitFor(t, "all lines", func() bool { return rec.lineCount() == files*perFile })
	waitFor(t, "all idle", func() bool {
		idle := 0
		for _, s := range rec.streams() {
			if ev := eventsOf(s); ev[len(ev)-1] == Idle {
				idle++
			}
		}
		return idle == files
	})
	streams := rec.streams()
	if len(streams) != files {
		t.Fatalf("files: %d", len(streams))
	}
	want := append(numbered("first", 1, perFile/2), numbered("second", 1, perFile/2)...)
	for _, s := range streams {
		equalLines(t, linesOf(s), want)
		if s[0].file.PID() < 1000 {
			t.Fatalf("pid %d", s[0].file.PID())
		}
	}
	// An idle file wakes up.
	path := streams[0][0].path
	writeLines(t, path, "again")
	waitFor(t, "active", func() bool { return rec.hasEvent(path, Active) })
	if st := r.fw.Stats(); st.Files != files {
		t.Errorf("stats %+v", st)
	}
	r.stop(t)
	stopped := 0
	for _, c := range rec.snapshot() {
		if c.ev == Stopped {
			stopped++
		}
	}
	if stopped != files {
		t.Errorf("Stopped events: %d", stopped)
	}
	checkNoLeak(t, base)
}

func TestMaxFiles(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 5; i++ {
		writeLines(t, filepath.Join(dir, fmt.Sprintf("f%d.log", i)), "x")
	}
	rec := &recorder{}
	opts := testOptions(t, dir)
	opts.MaxFiles = 3
	r := start(t, opts, rec)
	waitFor(t, "lines", func() bool { return rec.lineCount() == 3 })
	time.Sleep(100 * time.Millisecond) // several rescans: still counted once
	if st := r.fw.Stats(); st.Files != 3 || st.DroppedFiles != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A freed slot is taken by a skipped file.
	if err := os.Remove(rec.streams()[0][0].path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fourth file", func() bool { return rec.lineCount() == 4 })
}

func TestHugeLineCapped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	rec := &carryWatcher{}
	opts := testOptions(t, dir)
	opts.MaxLine = 1000
	r := start(t, opts, rec)

	writeLines(t, path, "short")
	// A long line written in pieces, each below the cap.
	for i := 0; i < 30; i++ {
		appendRaw(t, path, strings.Repeat(string(rune('a'+i%26)), 500))
	}
	appendRaw(t, path, "\n")
	// A line far longer than the read buffer, in one write.
	writeLines(t, path, strings.Repeat("y", 3<<20), "exactly", strings.Repeat("z", 1000))
	writeLines(t, path, "after")
	waitFor(t, "lines", func() bool { return rec.lineCount() == 6 })

	calls := rec.snapshot()
	var lines []call
	for _, c := range calls {
		if c.ev == 0 {
			lines = append(lines, c)
		}
	}
	want := []struct {
		line  string
		flags LineFlags
	}{
		{"short", 0},
		{strings.Repeat("a", 500) + strings.Repeat("b", 500), LineCapped},
		{strings.Repeat("y", 1000), LineCapped},
		{"exactly", 0},
		{strings.Repeat("z", 1000), 0},
		{"after", 0},
	}
	for i, w := range want {
		if lines[i].line != w.line || lines[i].flags != w.flags {
			t.Errorf("line %d: %.20q... (%d bytes) flags %v, want %.20q (%d) %v", i, lines[i].line, len(lines[i].line), lines[i].flags, w.line, len(w.line), w.flags)
		}
	}
	if st := r.fw.Stats(); st.CappedLines != 2 {
		t.Errorf("stats %+v", st)
	}
	r.stop(t)
	if rec.maxCarry > 1000 {
		t.Errorf("carry buffer grew to %d", rec.maxCarry)
	}
}

// carryWatcher records the largest carry buffer seen during Line calls.
type carryWatcher struct {
	recorder
	maxCarry int
}

func (c *carryWatcher) Line(f *File, line []byte, at time.Time, flags LineFlags) {
	c.maxCarry = max(c.maxCarry, cap(f.carry))
	c.recorder.Line(f, line, at, flags)
}

func TestNULBytes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	rec := &recorder{}
	start(t, testOptions(t, dir), rec)
	appendRaw(t, path, "ab\x00\x00cd\n\x00\x00\x00\nef\n\x00\x00gh")
	appendRaw(t, path, "\x00ij\n")
	waitFor(t, "lines", func() bool { return rec.lineCount() == 3 })
	var got []string
	for _, c := range rec.snapshot() {
		if c.ev == 0 {
			got = append(got, fmt.Sprintf("%s/%d", c.line, c.flags))
		}
	}
	// NULs inside a line are dropped from it; NULs where a line began are a gap before the
	// next line's text (a line of nothing but NULs is one too).
	equalLines(t, got, []string{
		fmt.Sprintf("abcd/%d", LineNUL),
		fmt.Sprintf("ef/%d", LineGap),
		fmt.Sprintf("ghij/%d", LineNUL|LineGap),
	})
}

func TestResumeFromState(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	os.Mkdir(logs, 0o755)
	path := filepath.Join(logs, "nccl.h.7.log")
	state := filepath.Join(dir, "state", "offsets.json")
	opts := testOptions(t, logs)
	opts.StatePath = state

	rec1 := &recorder{}
	r1 := start(t, opts, rec1)
	writeLines(t, path, numbered("run1", 1, 100)...)
	appendRaw(t, path, "held across the restart, ")
	waitFor(t, "run 1 lines", func() bool { return rec1.lineCount() == 100 })
	waitFor(t, "partial read", func() bool {
		return r1.fw.Stats().Bytes == uint64(fileSize(t, path))
	})
	r1.stop(t)
	if ev := eventsOf(rec1.snapshot()); !slices.Equal(ev, []EventKind{Opened, Stopped}) {
		t.Errorf("run 1 events %v", ev)
	}

	var st stateFile
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	wantOff := fileSize(t, path) - int64(len("held across the restart, "))
	if len(st.Files) != 1 || st.Files[0].Path != path || st.Files[0].Offset != wantOff || st.Files[0].Ino == 0 {
		t.Fatalf("state %s, want offset %d", b, wantOff)
	}

	// While stopped.
	appendRaw(t, path, "completed while stopped\n")
	writeLines(t, path, numbered("between", 1, 10)...)

	rec2 := &recorder{}
	start(t, opts, rec2)
	writeLines(t, path, numbered("run2", 1, 10)...)
	want := append(append([]string{"held across the restart, completed while stopped"}, numbered("between", 1, 10)...), numbered("run2", 1, 10)...)
	waitFor(t, "run 2 lines", func() bool { return rec2.lineCount() == len(want) })
	s := rec2.snapshot()
	if s[0].ev != Resumed || s[0].off != wantOff {
		t.Errorf("first call %+v, want Resumed at %d", s[0], wantOff)
	}
	equalLines(t, linesOf(s), want)
}

// followThenStop follows dir/a.log with a state file until it has read lines, then stops:
// what a restarted follower resumes from.
func followThenStop(t *testing.T, lines []string) (dir, path string, opts Options) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "a.log")
	opts = testOptions(t, dir)
	opts.StatePath = filepath.Join(dir, "state.json")
	rec := &recorder{}
	r := start(t, opts, rec)
	writeLines(t, path, lines...)
	waitFor(t, "lines", func() bool { return rec.lineCount() == len(lines) })
	r.stop(t)
	return dir, path, opts
}

func TestInodeChangedWhileStopped(t *testing.T) {
	dir, path, opts := followThenStop(t, numbered("old", 1, 10))

	// Replace the file with a longer one: a new inode (the old one still
	// exists when the rename happens, so its number cannot be reused).
	tmp := filepath.Join(dir, "a.tmp")
	writeLines(t, tmp, numbered("replacement", 1, 20)...)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	rec2 := &recorder{}
	start(t, opts, rec2)
	waitFor(t, "lines", func() bool { return rec2.lineCount() == 20 })
	s := rec2.snapshot()
	if s[0].ev != Opened || s[0].off != 0 {
		t.Errorf("first call %+v, want Opened at 0", s[0])
	}
	equalLines(t, linesOf(s), numbered("replacement", 1, 20))
}

func TestSameInodeDifferentContentStartsAtZero(t *testing.T) {
	// A file truncated and rewritten while the follower was stopped keeps
	// its inode; the head hash tells it apart.
	_, path, opts := followThenStop(t, numbered("old", 1, 3))
	if err := os.WriteFile(path, []byte(strings.Join(numbered("new content", 1, 5), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec2 := &recorder{}
	start(t, opts, rec2)
	waitFor(t, "lines", func() bool { return rec2.lineCount() == 5 })
	if ev := eventsOf(rec2.snapshot()); ev[0] != Opened {
		t.Errorf("events %v", ev)
	}
}

func TestFromEnd(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	writeLines(t, path, numbered("old", 1, 10)...)
	appendRaw(t, path, "partial at start-up ")
	rec := &recorder{}
	opts := testOptions(t, dir)
	opts.FromEnd = true
	start(t, opts, rec)
	waitFor(t, "opened", func() bool { return rec.hasEvent(path, Opened) })
	appendRaw(t, path, "completed\n")
	later := filepath.Join(dir, "later.log")
	writeLines(t, later, "from the start")
	waitFor(t, "lines", func() bool { return rec.lineCount() == 2 })
	equalLines(t, linesOf(rec.streamsAt(path)[0]), []string{"partial at start-up completed"})
	equalLines(t, linesOf(rec.streamsAt(later)[0]), []string{"from the start"})
}

func TestStopLeavesNoGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	for i := 0; i < 10; i++ {
		writeLines(t, filepath.Join(dir, fmt.Sprintf("f%d.log", i)), "x")
	}
	rec := &recorder{}
	for _, disable := range []bool{false, true} {
		opts := testOptions(t, dir)
		opts.DisableWatch = disable
		fw, err := New(opts, rec)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- fw.Run(ctx) }()
		waitFor(t, "files", func() bool { return fw.Stats().Files == 10 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := fw.Run(context.Background()); err == nil {
			t.Fatal("second Run succeeded")
		}
		checkNoLeak(t, base)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for name, opts := range map[string]Options{
		"bad pattern":  {Patterns: []string{"/tmp/[x"}},
		"huge MaxLine": {MaxLine: 1 << 30},
	} {
		if _, err := New(opts, &recorder{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := New(Options{}, nil); err == nil {
		t.Error("nil handler: no error")
	}
}

func TestCorruptStateFileReadsFromStart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	writeLines(t, path, "1", "2")
	opts := testOptions(t, dir)
	opts.StatePath = filepath.Join(dir, "state.json")
	os.WriteFile(opts.StatePath, []byte("{not json"), 0o644)
	rec := &recorder{}
	r := start(t, opts, rec)
	waitFor(t, "lines", func() bool { return rec.lineCount() == 2 })
	r.stop(t)
	b, _ := os.ReadFile(opts.StatePath)
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil || len(st.Files) != 1 {
		t.Fatalf("state not rewritten: %s %v", b, err)
	}
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestLargeHoleIsSkipped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	rec := &recorder{}
	r := start(t, testOptions(t, dir), rec)
	writeLines(t, path, "before")
	waitFor(t, "first line", func() bool { return rec.lineCount() == 1 })
	// What a copytruncate leaves under a writer at offset 64 MiB without
	// O_APPEND: a file that is one hole up to the writer's next line.
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("after a 64 MiB hole\n"), 64<<20); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "line after the hole", func() bool { return rec.lineCount() == 2 })
	calls := rec.snapshot()
	if got := linesOf(calls); got[1] != "after a 64 MiB hole" {
		t.Fatalf("lines %q", got)
	}
	t.Logf("bytes read: %d (the hole is 64 MiB)", r.fw.Stats().Bytes)
}

func TestResumeInsideCappedLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.log")
	opts := testOptions(t, dir)
	opts.MaxLine = 10
	opts.StatePath = filepath.Join(dir, "state.log") // matches the pattern: must be ignored
	rec1 := &recorder{}
	r1 := start(t, opts, rec1)
	appendRaw(t, path, strings.Repeat("a", 25))
	waitFor(t, "capped line", func() bool { return rec1.lineCount() == 1 })
	r1.stop(t)
	if got := rec1.snapshot()[1]; got.line != strings.Repeat("a", 10) || got.flags != LineCapped {
		t.Fatalf("capped line %+v", got)
	}
	appendRaw(t, path, "rest of the long line\nnext\n")
	rec2 := &recorder{}
	start(t, opts, rec2)
	waitFor(t, "next", func() bool { return rec2.lineCount() == 1 })
	time.Sleep(50 * time.Millisecond) // a few rescans: the state file is not followed
	equalLines(t, linesOf(rec2.snapshot()), []string{"next"})
	if n := len(rec2.streams()); n != 1 {
		t.Errorf("followed %d files, want 1 (state file excluded)", n)
	}
}

// checkpointHandler keeps a line count per file and checkpoints it.
type checkpointHandler struct {
	mu       sync.Mutex
	lines    map[string]int
	restored map[string]int
}

func (h *checkpointHandler) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lines[path]
}

func (h *checkpointHandler) Line(f *File, line []byte, readAt time.Time, flags LineFlags) {
	h.mu.Lock()
	h.lines[f.Path()]++
	h.mu.Unlock()
}

func (h *checkpointHandler) Event(f *File, ev EventKind) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev == Resumed {
		var n int
		if err := json.Unmarshal(f.Payload(), &n); err == nil {
			h.restored[f.Path()] = n
			h.lines[f.Path()] = n
		}
	}
}

func (h *checkpointHandler) Checkpoint(f *File) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, _ := json.Marshal(h.lines[f.Path()])
	return b
}

// TestCheckpointPayload: the handler's checkpoint comes back with the offset it matches.
func TestCheckpointPayload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nccl.host.42.log")
	state := filepath.Join(dir, "state.json")
	var content strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&content, "line %d\n", i)
	}
	if err := os.WriteFile(path, []byte(content.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(h *checkpointHandler, until func() bool) {
		fw, err := New(Options{Patterns: []string{filepath.Join(dir, "*.log")}, StatePath: state, StateEvery: 10 * time.Millisecond}, h)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- fw.Run(ctx) }()
		deadline := time.Now().Add(5 * time.Second)
		for !until() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	first := &checkpointHandler{lines: map[string]int{}, restored: map[string]int{}}
	run(first, func() bool { return first.count(path) == 100 })
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 150; i++ {
		fmt.Fprintf(f, "line %d\n", i)
	}
	f.Close()
	second := &checkpointHandler{lines: map[string]int{}, restored: map[string]int{}}
	run(second, func() bool { return second.count(path) == 150 })
	if second.restored[path] != 100 || second.lines[path] != 150 {
		t.Fatalf("restored %d, total %d: want 100 restored and 150 in all", second.restored[path], second.lines[path])
	}
}
