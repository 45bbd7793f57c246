package follow

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// call is one Handler call, recorded.
type call struct {
	file  *File
	path  string
	line  string
	flags LineFlags
	ev    EventKind // 0 for a line
	off   int64
}

// recorder is a Handler that records every call.
type recorder struct {
	mu    sync.Mutex
	calls []call
	files []*File // in order of first appearance
}

func (r *recorder) add(c call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := false
	for _, f := range r.files {
		if f == c.file {
			seen = true
			break
		}
	}
	if !seen {
		r.files = append(r.files, c.file)
	}
	r.calls = append(r.calls, c)
}

func (r *recorder) Line(f *File, line []byte, _ time.Time, flags LineFlags) {
	r.add(call{file: f, path: f.Path(), line: string(line), flags: flags, off: f.Offset()})
}

func (r *recorder) Event(f *File, ev EventKind) {
	r.add(call{file: f, path: f.Path(), ev: ev, off: f.Offset()})
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// streams returns, per File in order of appearance, the calls for it.
func (r *recorder) streams() [][]call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]call, len(r.files))
	for _, c := range r.calls {
		for i, f := range r.files {
			if f == c.file {
				out[i] = append(out[i], c)
			}
		}
	}
	return out
}

func (r *recorder) streamsAt(path string) [][]call {
	var out [][]call
	for _, s := range r.streams() {
		if len(s) > 0 && s[0].path == path {
			out = append(out, s)
		}
	}
	return out
}

func linesOf(cs []call) []string {
	var out []string
	for _, c := range cs {
		if c.ev == 0 {
			out = append(out, c.line)
		}
	}
	return out
}

func eventsOf(cs []call) []EventKind {
	var out []EventKind
	for _, c := range cs {
		if c.ev != 0 {
			out = append(out, c.ev)
		}
	}
	return out
}

func (r *recorder) lineCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.ev == 0 {
			n++
		}
	}
	return n
}

func (r *recorder) hasEvent(path string, ev EventKind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.ev == ev && (path == "" || c.path == path) {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds; a generous limit keeps it from being a
// timing assertion.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// testOptions are fast defaults for tests.
func testOptions(t testing.TB, dir string) Options {
	return Options{
		Patterns: []string{filepath.Join(dir, "*.log")},
		Rescan:   20 * time.Millisecond,
		Logger:   testLogger(t),
	}
}

// running is a Follower started in the background.
type running struct {
	fw     *Follower
	cancel context.CancelFunc
	done   chan error
}

func start(t testing.TB, opts Options, h Handler) *running {
	t.Helper()
	fw, err := New(opts, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{fw: fw, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- fw.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// writeLines appends each line (a newline is added) with one write each.
func writeLines(t testing.TB, path string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, l := range lines {
		if _, err := io.WriteString(f, l+"\n"); err != nil {
			t.Fatal(err)
		}
	}
}

func appendRaw(t testing.TB, path string, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.WriteString(f, s); err != nil {
		t.Fatal(err)
	}
}

func numbered(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s %d", prefix, i))
	}
	return out
}

// checkNoLeak waits for the goroutine count to fall back to base.
func checkNoLeak(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("goroutines: %d after stop, %d before\n%s", runtime.NumGoroutine(), base, buf[:n])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func equalLines(t testing.TB, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n got %d %q\nwant %d %q", len(got), clip(got), len(want), clip(want))
	}
}

func clip(s []string) []string {
	if len(s) > 12 {
		return append(append([]string(nil), s[:6]...), append([]string{"..."}, s[len(s)-6:]...)...)
	}
	return s
}
