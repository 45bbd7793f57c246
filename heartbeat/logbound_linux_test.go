package heartbeat_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat"
)

// TestLogBound is `make bench-logbound` in a few seconds: a rank writes NCCL per-op lines as
// NCCL does (one descriptor without O_APPEND), about 25 MiB at ~8 MB/s, while a
// sidecar bounds the log to 4 MiB beyond its header, saving and bounding every 200 ms. On
// disk the file never holds more than its header, 4 MiB and two rounds of writes; the
// header (NCCL's version, the communicator's Init) is still there; and every collective was
// counted: the bound frees only what was read and saved.
func TestLogBound(t *testing.T) {
	logs, state := t.TempDir(), t.TempDir()
	if !canPunch(t, logs) {
		t.Skip("the temporary folder's filesystem cannot punch holes")
	}
	const keep = 4 << 20
	s := runLocalSidecar(t, logs, func(o *heartbeat.Options) {
		o.LogKeep, o.StateDir, o.StateEvery = keep, state, 200*time.Millisecond
	})
	w := newRankWriter(t, logs, 4321, 0)
	path := w.f.Name()
	headerLen, err := w.f.Seek(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	const total, burst, every = 30 << 20, 1 << 20, 100 * time.Millisecond // ~10 MB/s
	written, maxDisk := 0, int64(0)
	for written < total {
		before := w.n
		w.allReduce(burst / 180)
		written += (w.n - before) * 180
		time.Sleep(every)
		maxDisk = max(maxDisk, onDisk(t, path))
	}
	deadline := time.Now().Add(10 * time.Second)
	for collectives(s, 4321) != int64(w.n) {
		if time.Now().After(deadline) {
			t.Fatalf("%d collectives counted of %d written", collectives(s, 4321), w.n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	round := int64(200*time.Millisecond/every) * burst
	bound := headerLen + keep + 2*round + 8192
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d collectives (%d MiB) written and counted; on disk at most %.1f MiB, bound %.1f MiB (header %d B, keep %d MiB)",
		w.n, st.Size()>>20, float64(maxDisk)/(1<<20), float64(bound)/(1<<20), headerLen, keep>>20)
	if maxDisk > bound {
		t.Errorf("%d bytes on disk, over the bound %d", maxDisk, bound)
	}
	head := make([]byte, headerLen)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(head, 0); err != nil || !strings.Contains(string(head), "NCCL version 2.28.9") || !strings.Contains(string(head), "Init COMPLETE") {
		t.Errorf("the header is gone: %q, %v", head, err)
	}
}

// collectives is the count the sidecar holds for the rank of pid.
func collectives(s *heartbeat.Sidecar, pid int) int64 {
	var n int64
	for _, p := range s.Snapshot().Processes {
		if p.PID == pid {
			for _, c := range p.Comms {
				n += c.Count
			}
		}
	}
	return n
}

func onDisk(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// canPunch reports whether dir's filesystem frees a hole punched in a file.
func canPunch(t *testing.T, dir string) bool {
	t.Helper()
	path := filepath.Join(dir, "punch-probe")
	defer os.Remove(path)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	err = syscall.Fallocate(int(f.Fd()), 0x02|0x01, 0, 1<<20) // FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE
	if err != nil {
		t.Logf("punch hole in %s: %v", dir, err)
	}
	return err == nil && onDisk(t, path) == 0
}
