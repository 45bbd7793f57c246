package analyze

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// labelledRingConsole is a Slurm console of six tasks run with srun --label, one task per
// GPU (so each label is a rank), as NVIDIA/nccl#577 posted one: at init, tasks 1 and 3 find
// that NCCL's ring does not close, their init fails, and PyTorch raises NCCL's internal
// error from barrier() on them; the tasks' tracebacks come interleaved under their labels,
// between NCCL's lines. Without initLines, as in the post, tasks 4 and 5 printed no NCCL
// line; with them, every task printed its Init START (NCCL 2.11's layout). Written from the
// formats, not copied: hosts, pids and paths are made up.
func labelledRingConsole(initLines bool) string {
	type task struct {
		host     string
		pid, dev int
	}
	tasks := []task{{"hpc-a01", 5101, 0}, {"hpc-a01", 5102, 1}, {"hpc-a02", 6201, 0}, {"hpc-a02", 6202, 1}}
	if initLines {
		tasks = append(tasks, task{"hpc-a03", 7301, 0}, task{"hpc-a03", 7302, 1})
	}
	var b strings.Builder
	line := func(t int, format string, a ...any) { fmt.Fprintf(&b, "%d: "+format+"\n", append([]any{t}, a...)...) }
	nccl := func(t int, tid int, text string) {
		k := tasks[t]
		line(t, "%s:%d:%d [%d] %s", k.host, k.pid, tid, k.dev, text)
	}
	fmt.Fprintf(&b, "srun: job 77123 queued and waiting for resources\n")
	for t, k := range tasks {
		nccl(t, k.pid, "NCCL INFO Bootstrap : Using ib0:10.40.0."+fmt.Sprint(t+1)+"<0>")
		if t == 0 {
			line(t, "NCCL version 2.11.4+cuda11.4")
		}
		nccl(t, k.pid, "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.40.0."+fmt.Sprint(t+1)+"<0>")
		nccl(t, k.pid, "NCCL INFO Using network IB")
		if initLines {
			nccl(t, k.pid+600, fmt.Sprintf("NCCL INFO comm 0x55f1%04x rank %d nranks 6 cudaDev %d busId %x000 - Init START", t*16, t, k.dev, 0x1b+k.dev*16))
		}
	}
	for _, t := range []int{1, 3} {
		k := tasks[t]
		nccl(t, k.pid+600, fmt.Sprintf("graph/rings.cc:38 NCCL WARN Error : ring 0 does not loop back to start (%d != %d)", t-1, t))
		for _, at := range []string{"graph/connect.cc:311", "init.cc:763", "init.cc:941"} {
			nccl(t, k.pid+600, "NCCL INFO "+at+" -> 3")
		}
	}
	// The tracebacks, interleaved as srun merges the tasks' stderr.
	for _, t := range []int{1, 4, 3, 5} {
		line(t, "Traceback (most recent call last):")
	}
	for _, t := range []int{4, 1, 5, 3} {
		line(t, `  File "/workspace/train/pretrain.py", line 412, in setup_optimizer`)
		line(t, "    work = group.barrier(opts=opts)")
	}
	for _, t := range []int{1, 3, 4, 5} {
		line(t, "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:975, internal error, NCCL version 21.1.4")
		line(t, "ncclInternalError: Internal check failed. This is either a bug in NCCL or due to memory corruption")
	}
	fmt.Fprintf(&b, "srun: error: hpc-a01: task 1: Exited with exit code 1\n")
	return b.String()
}

// TestSlurmLabelsMixNCCLAndPython: srun's label is the rank where each is one process's,
// whether or not Init lines say so too; a Python line under a label is that rank's, even a
// rank whose NCCL lines are missing; another task's traceback is never read as a line of
// the process printed just before it, nor quoted in a finding; the ranks that found the
// ring broken are one finding. What that finding is called is detect's knowledge table's
// (a ring that does not close is a topology the ranks disagree on: config, its cause, not
// a crash of the ranks that found it; nor, beside Init START lines, an init hang blamed on
// the network): the test holds what the reader decides.
func TestSlurmLabelsMixNCCLAndPython(t *testing.T) {
	for _, initLines := range []bool{false, true} {
		t.Run(fmt.Sprintf("init lines %v", initLines), func(t *testing.T) {
			rep := run(t, writeFile(t, t.TempDir(), "slurm-77123.out", labelledRingConsole(initLines)))
			var text strings.Builder
			rep.WriteText(&text)
			want := map[string]int{"hpc-a01/5101": 0, "hpc-a01/5102": 1, "hpc-a02/6201": 2, "hpc-a02/6202": 3,
				"hpc-a03/7301": 4, "hpc-a03/7302": 5}
			events := map[int][]snapshot.EventKind{}
			for _, r := range rep.Ranks {
				events[r.Rank] = r.Events
				if r.PID == 0 {
					continue
				}
				key := fmt.Sprintf("%s/%d", r.Host, r.PID)
				if rank, ok := want[key]; !ok || r.Rank != rank {
					t.Errorf("%s is rank %d, want %d (its label)\n%s", key, r.Rank, rank, text.String())
				}
				// Its own NCCL lines, the version and the blank-free Python lines of its own
				// label at most: never the other tasks' tracebacks.
				if r.Lines > 12 {
					t.Errorf("%s holds %d lines: other tasks' lines were given to it", key, r.Lines)
				}
			}
			for _, rank := range []int{1, 3, 4, 5} {
				if !slices.Contains(events[rank], snapshot.EventTorchNCCLError) {
					t.Errorf("rank %d: events %v, want its PyTorch NCCL error (under its label)\n%s", rank, events[rank], text.String())
				}
			}
			if len(rep.Findings) != 1 {
				t.Fatalf("%d findings, want 1 (the ring that does not close)\n%s", len(rep.Findings), text.String())
			}
			f := rep.Findings[0]
			if f.Kind != incident.KindConfig {
				t.Errorf("kind %s, want config (a topology the ranks disagree on, not a crash of the ranks that found it)\n%s", f.Kind, text.String())
			}
			for _, s := range append([]string{f.Summary}, f.Evidence...) {
				for _, w := range []string{"Traceback", `File "`, "group.barrier", "rank -1"} {
					if strings.Contains(s, w) {
						t.Errorf("finding says %q: %s", w, s)
					}
				}
			}
			if initLines {
				return
			}
			if len(f.Culprits) == 0 || f.Culprits[0].Rank != 1 || f.Culprits[0].Host != "hpc-a01" {
				t.Errorf("culprits %+v, want rank 1 on hpc-a01 first (the first to find the ring broken)", f.Culprits)
			}
			if !strings.Contains(f.Summary, "does not loop back") {
				t.Errorf("summary %q does not say what NCCL found", f.Summary)
			}
		})
	}
}
