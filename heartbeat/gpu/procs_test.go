package gpu

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/internal/syncbuf"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestComputeProcesses: the processes NVML lists on a GPU reach its sample, the largest by
// memory first, bounded, named from /proc where visible; a list NVML cannot give is
// marked missing, never published as empty.
func TestComputeProcesses(t *testing.T) {
	procRoot := t.TempDir()
	for pid, comm := range map[int]string{4242: "python3", 4343: "pt_main_thread", 77: "bad\xffname"} {
		dir := filepath.Join(procRoot, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const mib = 1 << 20
	var many []ComputeProcess
	var manyWant []snapshot.GPUProc
	for i := range 20 {
		many = append(many, ComputeProcess{PID: 1000 + i, UsedMemory: uint64(i+1) * mib})
	}
	for i := 19; i >= 4; i-- {
		manyWant = append(manyWant, snapshot.GPUProc{PID: 1000 + i, MemMiB: i + 1})
	}
	for _, tc := range []struct {
		name    string
		procs   []ComputeProcess
		err     error
		want    []snapshot.GPUProc
		missing bool
		logged  bool
	}{
		{name: "nobody"},
		{name: "the rank and a stranger, largest first",
			procs: []ComputeProcess{{PID: 4242, UsedMemory: 70_000 * mib}, {PID: 4343, UsedMemory: 71_000 * mib}},
			want:  []snapshot.GPUProc{{PID: 4343, MemMiB: 71_000, Name: "pt_main_thread"}, {PID: 4242, MemMiB: 70_000, Name: "python3"}}},
		{name: "not visible here, memory unknown or below a MiB",
			procs: []ComputeProcess{{PID: 9, UsedMemory: MemoryUnknown}, {PID: 8, UsedMemory: 1}, {PID: 77, UsedMemory: 3 * mib}},
			want:  []snapshot.GPUProc{{PID: 77, MemMiB: 3, Name: "bad?name"}, {PID: 8, MemMiB: 1}, {PID: 9}}},
		{name: "bounded to the largest", procs: many, want: manyWant},
		{name: "not supported", err: ErrNotSupported, missing: true},
		{name: "no permission", err: errors.New("nvml error 4 (Insufficient Permissions)"), missing: true, logged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake(2)
			f.SetProcesses(1, tc.procs...)
			if tc.err != nil {
				f.Fail(1, tc.err, "procs")
			}
			logs := &syncbuf.Buffer{}
			s, err := NewWithLibrary(f, Options{ProcRoot: procRoot, Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for range 2 {
				gpus, err := s.Sample(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				g := gpus[1]
				if !reflect.DeepEqual(g.Procs, tc.want) {
					t.Errorf("procs %+v\nwant  %+v", g.Procs, tc.want)
				}
				if missing := slices.Contains(g.Missing, "procs"); missing != tc.missing || g.Has("procs") == tc.missing {
					t.Errorf("procs missing %v (Missing %v), want %v", missing, g.Missing, tc.missing)
				}
				if gpus[0].Procs != nil || !gpus[0].Has("procs") {
					t.Errorf("GPU 0 has nobody, known: %+v", gpus[0])
				}
			}
			if n := strings.Count(logs.String(), "reading=procs"); n != map[bool]int{false: 0, true: 1}[tc.logged] {
				t.Errorf("failure logged %d times:\n%s", n, logs)
			}
			if got := slices.Contains(s.Unsupported(1), "procs"); got != errors.Is(tc.err, ErrNotSupported) {
				t.Errorf("Unsupported(1) = %v", s.Unsupported(1))
			}
		})
	}
}
