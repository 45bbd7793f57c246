package analyze

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/snapshot"
)

// The dumps come from logparse/frdump/testdata/gen.py: made-up 4-rank jobs in the shape
// torch writes them.
const frCases = "../logparse/frdump/testdata"

func analyzeDir(t *testing.T, paths ...string) *Report {
	t.Helper()
	rep, err := Analyze(context.Background(), paths, Options{Location: time.UTC, Rules: detect.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func copyCase(t *testing.T, name, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(frCases, name, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("case %s: %v", name, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, filepath.Base(f), string(b))
	}
}

func hasNote(rep *Report, words ...string) bool {
	for _, n := range append(append([]string(nil), rep.Notes...), rep.Coverage.Limits...) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(n, w)
		}
		if all {
			return true
		}
	}
	return false
}

func TestFlightRecorderDumpsAlone(t *testing.T) {
	for _, name := range []string{"healthy", "healthy_json", "healthy_protocol4", "skipped_subgroup", "order_inversion", "left_group", "p2p_pipeline"} {
		t.Run(name, func(t *testing.T) {
			rep := analyzeDir(t, filepath.Join(frCases, name))
			c := rep.Coverage
			if c.FRDumps < 2 || c.FRDumps != c.FilesRead || c.FREntries == 0 || len(c.Skipped) > 0 || c.ReadErrors > 0 {
				t.Fatalf("coverage %+v", c)
			}
			if len(rep.Communicators) == 0 {
				t.Fatal("no process group across ranks")
			}
			for _, cm := range rep.Communicators {
				if !strings.HasPrefix(cm.ID, snapshot.FRCommPrefix) || cm.Join.How != "process group" || len(cm.Ranks) < 2 {
					t.Errorf("communicator %+v", cm)
				}
			}
			for _, r := range rep.Ranks {
				if r.Rank < 0 || r.NCCL != "2.21.5" {
					t.Errorf("rank %+v", r)
				}
			}
			if strings.HasPrefix(name, "healthy") && rep.Verdict != VerdictClean {
				t.Errorf("healthy dumps: verdict %s, limits %v, findings %+v", rep.Verdict, c.Limits, rep.Findings)
			}
			if !strings.HasPrefix(name, "healthy") && rep.Verdict == VerdictClean {
				t.Errorf("a hang's dumps judged clean")
			}
		})
	}
}

func TestFlightRecorderBadDumps(t *testing.T) {
	rep := analyzeDir(t, filepath.Join(frCases, "bad_input"))
	c := rep.Coverage
	if c.FRDumps != 5 || c.ReadErrors != 1 {
		t.Fatalf("coverage %+v", c)
	}
	for _, want := range [][]string{
		{"nccl_trace_rank_1 could not be read to its end", "truncated", "what came before was read"},
		{"nccl_trace_rank_1 could not be read to its end"},
		{"nccl_trace_rank_3", `"3.1"`, "what was recognisable was read"},
		{"disagree on their format version"},
		{"nccl_trace_rank_4 disagrees with the other dumps on process group 0", "ranks 0-7 there, 0-3 in 4"},
	} {
		if !hasNote(rep, want...) {
			t.Errorf("no note with %q in %q", want, append(rep.Notes, c.Limits...))
		}
	}
	// Nothing of the other files is lost: every rank's groups are compared.
	ranks := map[int]bool{}
	for _, r := range rep.Ranks {
		ranks[r.Rank] = true
	}
	for r := 0; r <= 4; r++ {
		if !ranks[r] {
			t.Errorf("rank %d missing from %+v", r, rep.Ranks)
		}
	}
	if len(rep.Jobs) != 2 {
		t.Errorf("the other job's dump is not judged apart: %+v", rep.Jobs)
	}
	if rep.Verdict == VerdictClean {
		t.Error("an all-clear beside a truncated dump")
	}
}

func TestFlightRecorderMissingRank(t *testing.T) {
	rep := analyzeDir(t, filepath.Join(frCases, "signal_killed"))
	if !hasNote(rep, "no Flight Recorder dump of rank(s) 2") {
		t.Errorf("notes %q", rep.Notes)
	}
	// The ranks left waiting agree with each other: without rank 2 nothing is clean.
	if rep.Verdict == VerdictClean || len(rep.Coverage.Unseen) != 1 || rep.Coverage.Unseen[0] != 2 ||
		!hasNote(rep, "rank(s) 2 belong to the process groups", "no file here shows them") {
		t.Errorf("verdict %s, unseen %v, limits %q", rep.Verdict, rep.Coverage.Unseen, rep.Coverage.Limits)
	}
}

func TestFlightRecorderFileNames(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(frCases, "healthy")
	for r, name := range []string{"fr.0", "fr.1.pkl", "fr_2", "fr.3.gz"} {
		b, err := os.ReadFile(filepath.Join(src, "nccl_trace_rank_"+string(rune('0'+r))))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".gz") {
			var z bytes.Buffer
			w := gzip.NewWriter(&z)
			w.Write(b)
			w.Close()
			b = z.Bytes()
		}
		writeFile(t, dir, name, string(b))
	}
	writeFile(t, dir, "model.pkl", "\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00]\x94K\x01a.")
	rep := analyzeDir(t, dir)
	if rep.Coverage.FRDumps != 4 || len(rep.Ranks) != 4 {
		t.Fatalf("coverage %+v ranks %+v", rep.Coverage, rep.Ranks)
	}
	found := false
	for _, s := range rep.Coverage.Skipped {
		found = found || (strings.HasSuffix(s.Path, "model.pkl") && strings.Contains(s.Reason, "not a PyTorch Flight Recorder dump"))
	}
	if !found {
		t.Errorf("model.pkl: %+v", rep.Coverage.Skipped)
	}
}

// A dump beside the same rank's NCCL log joins its process.
func TestFlightRecorderJoinsLogProcess(t *testing.T) {
	dir := t.TempDir()
	copyCase(t, "healthy", dir)
	for r := 0; r < 4; r++ {
		writeFile(t, dir, fmt.Sprintf("nccl.gpu-a.%d.log", 100+r), fmt.Sprintf(
			"gpu-a:%d:%d [%d] NCCL INFO ncclCommInitRank comm 0xa0%d rank %d nranks 4 cudaDev %d nvmlDev %d busId %d000 commId 0xfeed - Init COMPLETE\n"+
				"gpu-a:%d:%d [%d] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0xa0%d [nranks=4] stream (nil)\n",
			100+r, 100+r, r, r, r, r, r, r+1, 100+r, 100+r, r, r))
	}
	// By default the logs, which show every collective, are judged alone.
	rep := analyzeDir(t, dir)
	if len(rep.Communicators) != 1 || rep.Coverage.FRDumps != 4 || !hasNote(rep, "the logs were judged") {
		t.Errorf("dumps beside complete logs: communicators %+v, notes %q", rep.Communicators, rep.Notes)
	}
	rep, err := Analyze(context.Background(), []string{dir}, Options{Location: time.UTC, Rules: detect.DefaultConfig(), FRBesideLogs: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ranks) != 4 {
		t.Fatalf("ranks %+v", rep.Ranks)
	}
	for _, r := range rep.Ranks {
		if r.Host != "gpu-a" {
			t.Errorf("rank %d's dump did not join its log's process: %+v", r.Rank, r)
		}
	}
	fr, nccl := 0, 0
	for _, c := range rep.Communicators {
		if strings.HasPrefix(c.ID, snapshot.FRCommPrefix) {
			fr++
		} else {
			nccl++
		}
	}
	if fr != 1 || nccl != 1 {
		t.Errorf("communicators %+v", rep.Communicators)
	}
}

func rankEvents(rep *Report, rank int) []snapshot.EventKind {
	for _, r := range rep.Ranks {
		if r.Rank == rank {
			return r.Events
		}
	}
	return nil
}

func hasKind(kinds []snapshot.EventKind, k snapshot.EventKind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

// Why a rank died goes to that rank: torchrun's failure record names it by rank and pid,
// a traceback by its launcher prefix.
func TestRankExitEvidence(t *testing.T) {
	rep := analyzeDir(t, filepath.Join(frCases, "signal_killed_logs"))
	ev := rankEvents(rep, 2)
	if !hasKind(ev, snapshot.EventRankExit) || !hasKind(ev, snapshot.EventLauncherExit) {
		t.Errorf("rank 2 (killed): events %v; ranks %+v", ev, rep.Ranks)
	}
	for _, r := range rep.Ranks {
		if r.Rank < 0 {
			t.Errorf("evidence on a process of no rank: %+v", r)
		}
	}
	dir := t.TempDir()
	writeFile(t, dir, "console.log", strings.Join([]string{
		"[rank1]: Traceback (most recent call last):",
		`[rank1]:   File "/work/train.py", line 42, in <module>`,
		"[rank1]:     loss = model(batch)",
		"[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 1.06 GiB is free.",
		"[rank0]: RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes=TensorOptions()), but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=5, OpType=BROADCAST, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes=TensorOptions()).",
		"",
	}, "\n"))
	rep = analyzeDir(t, dir)
	if ev := rankEvents(rep, 1); !hasKind(ev, snapshot.EventRankExit) {
		t.Errorf("rank 1 (OOM): events %v", ev)
	}
	if ev := rankEvents(rep, 0); !hasKind(ev, snapshot.EventTorchDesync) {
		t.Errorf("rank 0 (desync): events %v", ev)
	}
}
