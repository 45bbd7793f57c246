package follow

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// opCounter is a Handler like the sidecar's: it counts per-op lines ("op N") and marks the
// first as the end of the header; it records the lines that came after a gap.
type opCounter struct {
	mu      sync.Mutex
	ops     int
	other   int
	lastOp  int
	errs    []string
	afterGp []string
}

func (c *opCounter) Line(f *File, line []byte, _ time.Time, flags LineFlags) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if flags&LineGap != 0 {
		c.afterGp = append(c.afterGp, string(line))
	}
	if n, ok := strings.CutPrefix(string(line), "op "); ok {
		f.EndHeader()
		c.ops++
		var k int
		if _, err := fmt.Sscanf(n, "%d", &k); err != nil || (c.lastOp != 0 && k != c.lastOp+1) {
			c.errs = append(c.errs, fmt.Sprintf("op line %q after op %d", line, c.lastOp))
		}
		c.lastOp = k
		return
	}
	c.other++
}

func (c *opCounter) Event(*File, EventKind) {}

func (c *opCounter) count() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops, c.other
}

// punchDir is a folder on a filesystem that can punch holes: the test's temporary folder,
// else one in /dev/shm (tmpfs can).
func punchDir(t *testing.T) string {
	t.Helper()
	for _, dir := range []string{t.TempDir(), "/dev/shm"} {
		f, err := os.CreateTemp(dir, "punch-*")
		if err != nil {
			continue
		}
		name := f.Name()
		_, werr := f.Write(make([]byte, 1<<20))
		var st syscall.Stat_t
		if werr == nil && syscall.Fstat(int(f.Fd()), &st) == nil {
			file := &File{path: name, id: fileID{dev: uint64(st.Dev), ino: st.Ino}}
			if _, _, err := punchHole(file, 4096, 1<<20); err == nil {
				f.Close()
				os.Remove(name)
				if dir == "/dev/shm" {
					d, err := os.MkdirTemp(dir, "follow-test-*")
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { os.RemoveAll(d) })
					return d
				}
				return dir
			}
		}
		f.Close()
		os.Remove(name)
	}
	t.Skip("no filesystem here can punch holes")
	return ""
}

// diskBytes is what the file occupies on disk.
func diskBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// writeLog writes a header and ops lines 1..n like NCCL: one descriptor without O_APPEND
// that keeps its offset, each line one write, lines of about 180 bytes.
func writeLog(t *testing.T, path string, header []string, from, to int, w **os.File) {
	t.Helper()
	if *w == nil {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		*w = f
		for _, h := range header {
			if _, err := f.WriteString(h + "\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	pad := strings.Repeat("x", 160)
	var buf bytes.Buffer
	for i := from; i <= to; i++ {
		fmt.Fprintf(&buf, "op %d %s\n", i, pad)
		if buf.Len() > 64<<10 || i == to {
			if _, err := (*w).Write(buf.Bytes()); err != nil {
				t.Fatal(err)
			}
			buf.Reset()
		}
	}
}

// TestLogBound: a log written on and on stays within its header, its last Keep bytes and
// one round of writes on disk, while every line is still read in order; the header reads
// back intact, and the file keeps its size (the writer's offset) with a hole in the middle.
func TestLogBound(t *testing.T) {
	dir := punchDir(t)
	path := filepath.Join(dir, "nccl.host.1.log")
	header := []string{"NCCL version 2.28.9", "Init START", "Channel 00/32 : 0 1", "Init COMPLETE"}
	const keep = 4 << 20
	c := &opCounter{}
	opts := testOptions(t, dir)
	opts.Keep, opts.StateEvery = keep, 50*time.Millisecond
	opts.StatePath = filepath.Join(t.TempDir(), "state.json")
	r := start(t, opts, c)
	var w *os.File
	const rounds, perRound = 20, 12000 // ~2 MiB a round, 44 MiB in all
	maxDisk := int64(0)
	for i := 0; i < rounds; i++ {
		writeLog(t, path, header, i*perRound+1, (i+1)*perRound, &w)
		waitFor(t, "lines read", func() bool { ops, _ := c.count(); return ops == (i+1)*perRound })
		time.Sleep(60 * time.Millisecond) // a save and a trim round
		maxDisk = max(maxDisk, diskBytes(t, path))
	}
	// The last rounds: everything read is saved, then freed.
	time.Sleep(200 * time.Millisecond)
	ops, other := c.count()
	if ops != rounds*perRound || other != len(header) || len(c.errs) > 0 {
		t.Fatalf("%d op lines and %d others read, want %d and %d; out of order: %v", ops, other, rounds*perRound, len(header), c.errs)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	round := int64(perRound * 180)
	bound := int64(4096) + keep + 2*round + 2*4096 // header block, Keep, a round unsaved and one unfreed, edges
	disk := diskBytes(t, path)
	t.Logf("file %d MiB, on disk %.1f MiB at the end, %.1f MiB at most; bound %.1f MiB; freed %d MiB",
		st.Size()>>20, float64(disk)/(1<<20), float64(maxDisk)/(1<<20), float64(bound)/(1<<20), r.fw.Stats().FreedBytes>>20)
	if maxDisk > bound {
		t.Errorf("%d bytes on disk, over the bound %d (header, Keep %d, rounds of %d)", maxDisk, bound, keep, round)
	}
	if st.Size() < int64(rounds*perRound*170) {
		t.Errorf("size %d: the writer's offset was lost", st.Size())
	}
	head := make([]byte, 64)
	rf, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	if _, err := rf.ReadAt(head, 0); err != nil || !bytes.HasPrefix(head, []byte("NCCL version 2.28.9\nInit START\n")) {
		t.Errorf("header %q, %v", head, err)
	}
	if fs := r.fw.Stats().FreedBytes; fs < uint64(st.Size())-2*keep {
		t.Errorf("freed %d bytes of %d", fs, st.Size())
	}

	// A follower starting over (no state) reads the header, skips the hole, and gets whole
	// lines after it, the first marked as following a gap.
	r.stop(t)
	again := &opCounter{}
	opts2 := testOptions(t, dir)
	r2 := start(t, opts2, again)
	waitFor(t, "the tail read again", func() bool { ops, _ := again.count(); return ops > 0 && again.lastOpValue() == rounds*perRound })
	ops2, other2 := again.count()
	if other2 != len(header) || len(again.errs) != 0 || len(again.afterGp) != 1 || !strings.HasPrefix(again.afterGp[0], "op ") {
		t.Errorf("read again: %d header lines (want %d), out of order %v, after a gap %q", other2, len(header), again.errs, again.afterGp)
	}
	if read := r2.fw.Stats().Bytes; read > uint64(st.Size())/2 {
		t.Errorf("read %d bytes of a %d-byte file with a hole: the hole was read", read, st.Size())
	}
	t.Logf("read again: %d op lines after the hole", ops2)
}

func (c *opCounter) lastOpValue() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastOp
}
