package analyze

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
)

// The fixtures below are written from NCCL's formats (2.4-2.29), not copied from any log:
// small jobs whose fault is known, printed the way launchers and collectors print them.

// rankLog is one process of a fixture job.
type rankLog struct {
	host      string
	pid, rank int
	comm      string // pointer as printed
	ops       int    // collectives it issued before stopping
}

// oldInit is the 2.10 Init line (no commId, no nvmlDev).
func oldInit(r rankLog, n int) string {
	return fmt.Sprintf("%s:%d:%d [%d] NCCL INFO comm %s rank %d nranks %d cudaDev %d busId %x000 - Init COMPLETE",
		r.host, r.pid, r.pid+100, r.rank, r.comm, r.rank, n, r.rank, 0x1a+r.rank)
}

// op is the k-th collective of the fixture's training loop: a repeating pattern of sizes.
func op(r rankLog, k, n int) string {
	names := []string{"AllGather", "AllGather", "AllReduce", "Broadcast"}
	counts := []int{1028, 4100, 262144, 16}
	i := k % len(names)
	return fmt.Sprintf("%s:%d:%d [%d] NCCL INFO %s: opCount %x sendbuff 0x7f%06x recvbuff 0x7f%06x count %d datatype 0 op 0 root 0 comm %s [nranks=%d] stream 0x5%x",
		r.host, r.pid, r.pid, r.rank, names[i], k, k*64, k*64+32, counts[i], r.comm, n, r.rank)
}

// console interleaves the ranks' lines as a launcher that merges stdout does, each line
// behind the launcher's prefix for that rank.
func console(ranks []rankLog, prefix func(r rankLog) string, init func(rankLog, int) string, version string) string {
	n := len(ranks)
	var b strings.Builder
	b.WriteString("Starting training with 4 workers\n")
	for _, r := range ranks {
		fmt.Fprintf(&b, "%s%s:%d:%d [%d] NCCL INFO Bootstrap : Using eth0:10.0.0.%d<0>\n", prefix(r), r.host, r.pid, r.pid, r.rank, r.rank+1)
		if r.rank == 0 && version != "" {
			fmt.Fprintf(&b, "%sNCCL version %s\n", prefix(r), version)
		}
	}
	for _, r := range ranks {
		fmt.Fprintf(&b, "%s%s\n", prefix(r), init(r, n))
	}
	most := 0
	for _, r := range ranks {
		most = max(most, r.ops)
	}
	for k := 0; k < most; k++ {
		for _, r := range ranks {
			if k < r.ops {
				fmt.Fprintf(&b, "%s%s\n", prefix(r), op(r, k, n))
			}
		}
		if k%50 == 0 {
			fmt.Fprintf(&b, "Epoch 0 step %d loss 1.23\n", k)
		}
	}
	return b.String()
}

func fourRanks(stopRank, stopAt, total int) []rankLog {
	var out []rankLog
	for r := 0; r < 4; r++ {
		ops := total
		if r == stopRank {
			ops = stopAt
		}
		out = append(out, rankLog{host: "gpu-node1", pid: 31000 + r, rank: r, comm: fmt.Sprintf("0x7f%02x28002f70", r), ops: ops})
	}
	return out
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, paths ...string) *Report {
	t.Helper()
	rep, err := Analyze(context.Background(), paths, Options{Location: time.UTC, Rules: detect.DefaultConfig()})
	if err != nil {
		t.Fatalf("analyze %v: %v", paths, err)
	}
	return rep
}

// hangOn checks the report names rank as the one that stopped, and the op the others wait in.
func hangOn(t *testing.T, rep *Report, rank int, waitsIn string) {
	t.Helper()
	if rep.ExitCode != ExitFindings {
		t.Errorf("exit %d, want %d", rep.ExitCode, ExitFindings)
	}
	h := kinds(rep)[incident.KindHang]
	if len(h) != 1 || len(h[0].Culprits) != 1 || h[0].Culprits[0].Rank != rank {
		var b bytes.Buffer
		rep.WriteText(&b)
		t.Fatalf("want one hang naming rank %d, got:\n%s", rank, b.String())
	}
	if !strings.Contains(h[0].Summary, waitsIn) {
		t.Errorf("summary %q lacks %q", h[0].Summary, waitsIn)
	}
}

// TestLauncherConsoles: one console of four interleaved processes, pre-2.18 Init lines, one
// rank stops; every launcher's prefix must give the same diagnosis.
func TestLauncherConsoles(t *testing.T) {
	ranks := fourRanks(2, 41, 60)
	const waits = "waits in op 42 AllGather(count 4100 int8)"
	cases := []struct {
		name   string
		prefix func(r rankLog) string
	}{
		{"plain torchrun console", func(rankLog) string { return "" }},
		{"open mpi --tag-output", func(r rankLog) string { return fmt.Sprintf("[1,%d]<stdout>:", r.rank) }},
		{"open mpi --timestamp-output", func(r rankLog) string {
			return fmt.Sprintf("Fri Aug 11 12:31:%02d 2023[1,%d]<stdout>:", r.rank, r.rank)
		}},
		{"srun --label", func(r rankLog) string { return fmt.Sprintf("%d: ", r.rank) }},
		{"pdsh", func(r rankLog) string { return r.host + ": " }},
		{"kubectl --timestamps", func(r rankLog) string { return fmt.Sprintf("2023-08-11T12:31:45.%09dZ ", r.rank) }},
		{"torchrun --tee", func(r rankLog) string { return fmt.Sprintf("[default%d]:", r.rank) }},
		{"rank tags", func(r rankLog) string { return fmt.Sprintf("[%d] ", r.rank) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := writeFile(t, dir, "console.log", console(ranks, c.prefix, oldInit, "2.10.3+cuda11.3"))
			rep := run(t, p)
			hangOn(t, rep, 2, waits)
			if rep.Coverage.Processes != 4 || rep.Coverage.Inferred != 1 || len(rep.Communicators) != 1 {
				t.Errorf("coverage %+v communicators %d", rep.Coverage, len(rep.Communicators))
			}
			if j := rep.Communicators[0].Join; j.How != "inferred" || j.Confidence != "high" {
				t.Errorf("join %+v", j)
			}
			if len(rep.Coverage.Versions) != 1 || rep.Coverage.Versions[0] != "2.10.3" {
				t.Errorf("versions %v", rep.Coverage.Versions)
			}
		})
	}
}

// TestOldFormats: the 2.4 Init line (nvmlDev, no busId), empty hostnames, a poster's prefix.
func TestOldFormats(t *testing.T) {
	init24 := func(r rankLog, n int) string {
		return fmt.Sprintf("%s:%d:%d [%d] NCCL INFO comm %s rank %d nranks %d cudaDev %d nvmlDev %d - Init COMPLETE", r.host, r.pid, r.pid, r.rank, r.comm, r.rank, n, r.rank, r.rank)
	}
	t.Run("2.4 init", func(t *testing.T) {
		p := writeFile(t, t.TempDir(), "out.txt", console(fourRanks(1, 10, 30), func(rankLog) string { return "" }, init24, "2.4.8+cuda10.1"))
		hangOn(t, run(t, p), 1, "waits in op 11")
	})
	t.Run("empty hostname", func(t *testing.T) {
		ranks := fourRanks(3, 17, 30)
		for i := range ranks {
			ranks[i].host = ""
		}
		p := writeFile(t, t.TempDir(), "job.out", console(ranks, func(rankLog) string { return "" }, oldInit, ""))
		hangOn(t, run(t, p), 3, "waits in op 18")
	})
}

// TestMergedLines: two writers' text glued on one line, and a line cut in two; the glued
// second line is read, the cut line is put back together, nothing is given to the wrong rank.
func TestMergedLines(t *testing.T) {
	ranks := fourRanks(-1, 0, 20)
	text := console(ranks, func(rankLog) string { return "" }, oldInit, "")
	lines := strings.Split(text, "\n")
	// Glue the head of one rank-0 op line to the next line (rank 1's), and put the rest
	// of the rank-0 line on a line of its own further down.
	var out []string
	glued := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !glued && strings.HasPrefix(l, "gpu-node1:31000:31000 [0] NCCL INFO AllReduce") && i+2 < len(lines) {
			cut := strings.Index(l, " recvbuff")
			out = append(out, l[:cut]+lines[i+1], lines[i+2], l[cut:])
			i += 2
			glued = true
			continue
		}
		out = append(out, l)
	}
	if !glued {
		t.Fatal("fixture: no line to glue")
	}
	p := writeFile(t, t.TempDir(), "console.log", strings.Join(out, "\n"))
	rep := run(t, p)
	if rep.ExitCode != ExitClean || len(rep.Findings) != 0 {
		var b bytes.Buffer
		rep.WriteText(&b)
		t.Fatalf("a healthy job with a glued line: exit %d\n%s", rep.ExitCode, b.String())
	}
	if rep.Coverage.Rejoined != 1 || rep.Coverage.Fragments != 0 {
		t.Errorf("rejoined %d fragments %d", rep.Coverage.Rejoined, rep.Coverage.Fragments)
	}
	for _, m := range rep.Communicators[0].Ranks {
		if m.Collectives != 20 {
			t.Errorf("rank %d has %d collectives, want 20", m.Rank, m.Collectives)
		}
	}
}

// TestMixedJobs: an old run and a new one in one folder are reported apart.
func TestMixedJobs(t *testing.T) {
	dir := t.TempDir()
	line := func(host string, pid, rank int, comm, commID string, ops int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "%s:%d:%d [%d] NCCL INFO ncclCommInitRank comm %s rank %d nranks 2 cudaDev %d nvmlDev %d busId %d0 commId %s - Init START\n", host, pid, pid, rank, comm, rank, rank, rank, rank+6, commID)
		fmt.Fprintf(&b, "%s:%d:%d [%d] NCCL INFO ncclCommInitRank comm %s rank %d nranks 2 cudaDev %d nvmlDev %d busId %d0 commId %s - Init COMPLETE\n", host, pid, pid, rank, comm, rank, rank, rank, rank+6, commID)
		for k := 0; k < ops; k++ {
			fmt.Fprintf(&b, "%s:%d:%d [%d] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count %d datatype 7 op 0 root 0 comm %s [nranks=2] stream (nil)\n", host, pid, pid, rank, 1000+k%3, comm)
		}
		return b.String()
	}
	writeFile(t, dir, "nccl.vm.100.log", line("vm", 100, 0, "0x10", "0xaaa", 50))
	writeFile(t, dir, "nccl.vm.101.log", line("vm", 101, 1, "0x11", "0xaaa", 50))
	writeFile(t, dir, "nccl.vm.200.log", line("vm", 200, 0, "0x20", "0xbbb", 30))
	writeFile(t, dir, "nccl.vm.201.log", line("vm", 201, 1, "0x21", "0xbbb", 12))
	rep := run(t, dir)
	if len(rep.Jobs) != 2 {
		t.Fatalf("%d jobs, want 2", len(rep.Jobs))
	}
	h := kinds(rep)[incident.KindHang]
	if len(h) != 1 || h[0].Culprits[0].PID != 201 || len(rep.Findings) != 1 {
		t.Fatalf("findings %+v", rep.Findings)
	}
	for _, c := range rep.Communicators {
		if len(c.Ranks) != 2 {
			t.Errorf("communicator %s mixes runs: %+v", c.ID, c.Ranks)
		}
	}
}

// TestBadInput: each bad input gets a clear sentence and its documented exit code, never a
// crash.
func TestBadInput(t *testing.T) {
	silent := filepath.Join(captures, "silent")
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string) []string
		exit  int
		say   string // in the text report, or the error for exit 2
	}{
		{"missing path", func(t *testing.T, dir string) []string { return []string{filepath.Join(dir, "nope")} }, ExitInput, "no such file"},
		{"empty dir", func(t *testing.T, dir string) []string { return []string{dir} }, ExitInput, "no log files under"},
		{"dir of csv only", func(t *testing.T, dir string) []string {
			writeFile(t, dir, "nvml.csv", "a,b\n1,2\n")
			return []string{dir}
		}, ExitInput, "1 files skipped"},
		{"binary file", func(t *testing.T, dir string) []string {
			return []string{writeFile(t, dir, "core.log", "\x7fELF\x02\x01\x01\x00\x00\x00")}
		}, ExitCannotJudge, "an executable (ELF), not a log"},
		{"random bytes", func(t *testing.T, dir string) []string {
			b := make([]byte, 100000)
			rand.New(rand.NewSource(1)).Read(b)
			return []string{writeFile(t, dir, "random.log", string(b))}
		}, ExitCannotJudge, "not a text log"},
		{"empty file", func(t *testing.T, dir string) []string { return []string{writeFile(t, dir, "empty.log", "")} }, ExitCannotJudge, "empty"},
		{"text without NCCL", func(t *testing.T, dir string) []string {
			return []string{writeFile(t, dir, "train.log", "epoch 1 loss 0.3\nepoch 2 loss 0.2\n")}
		}, ExitCannotJudge, "no NCCL or PyTorch lines in it"},
		{"logs without COLL", func(t *testing.T, dir string) []string {
			return []string{filepath.Join(captures, "default_subsys")}
		}, ExitCannotJudge, "NCCL_DEBUG_SUBSYS=INIT,COLL"},
		{"one rank only", func(t *testing.T, dir string) []string {
			return []string{filepath.Join(silent, "nccl.vm.1113.log")}
		}, ExitCannotJudge, "nothing to compare"},
		{"gzip of a real hang", func(t *testing.T, dir string) []string {
			for _, f := range []string{"nccl.vm.1113.log", "nccl.vm.1114.log"} {
				b, err := os.ReadFile(filepath.Join(silent, f))
				if err != nil {
					t.Fatal(err)
				}
				var z bytes.Buffer
				w := gzip.NewWriter(&z)
				w.Write(b)
				w.Close()
				writeFile(t, dir, f+".gz", z.String())
			}
			return []string{dir}
		}, ExitFindings, "rank 1 (vm pid 1114) stopped issuing collectives"},
		{"zstd of a real hang", func(t *testing.T, dir string) []string {
			for _, f := range []string{"nccl.vm.1113.log", "nccl.vm.1114.log"} {
				b, err := os.ReadFile(filepath.Join(silent, f))
				if err != nil {
					t.Fatal(err)
				}
				enc, _ := zstd.NewWriter(nil)
				writeFile(t, dir, f+".zst", string(enc.EncodeAll(b, nil)))
			}
			return []string{dir}
		}, ExitFindings, "rank 1 (vm pid 1114) stopped issuing collectives"},
		{"truncated gzip", func(t *testing.T, dir string) []string {
			b, _ := os.ReadFile(filepath.Join(silent, "nccl.vm.1113.log"))
			var z bytes.Buffer
			w := gzip.NewWriter(&z)
			w.Write(b)
			w.Close()
			writeFile(t, dir, "a.log.gz", z.String()[:z.Len()/2])
			c, _ := os.ReadFile(filepath.Join(silent, "nccl.vm.1114.log"))
			writeFile(t, dir, "b.log", string(c))
			return []string{dir}
		}, ExitCannotJudge, "could not be read to its end"},
		{"5 MB line", func(t *testing.T, dir string) []string {
			b, _ := os.ReadFile(filepath.Join(silent, "nccl.vm.1113.log"))
			writeFile(t, dir, "nccl.vm.1113.log", strings.Repeat("x", 5<<20)+"\n"+string(b))
			c, _ := os.ReadFile(filepath.Join(silent, "nccl.vm.1114.log"))
			writeFile(t, dir, "nccl.vm.1114.log", string(c))
			return []string{dir}
		}, ExitFindings, "longer than 1 MiB were cut"},
		{"300 files", func(t *testing.T, dir string) []string {
			for i := 0; i < 300; i++ {
				writeFile(t, dir, fmt.Sprintf("nccl.node%d.%d.log", i/8, 1000+i),
					fmt.Sprintf("node%d:%d:%d [%d] NCCL INFO ncclCommInitRank comm 0x%x rank %d nranks 300 cudaDev %d nvmlDev %d busId %d000 commId 0xfeed - Init COMPLETE\n"+
						"node%d:%d:%d [%d] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x%x [nranks=300] stream (nil)\n",
						i/8, 1000+i, 1000+i, i%8, 0x100+i, i, i%8, i%8, i%8+1, i/8, 1000+i, 1000+i, i%8, 0x100+i))
			}
			return []string{dir}
		}, ExitClean, "300 ranks at 1 collectives"},
		{"mixed jobs", func(t *testing.T, dir string) []string {
			for _, c := range []string{"healthy", "silent"} {
				for _, f := range []string{"nccl.vm.635.log", "nccl.vm.636.log", "nccl.vm.1113.log", "nccl.vm.1114.log"} {
					if b, err := os.ReadFile(filepath.Join(captures, c, f)); err == nil {
						writeFile(t, dir, filepath.Join(c, f), string(b))
					}
				}
			}
			return []string{dir}
		}, ExitFindings, "the files hold several training runs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			paths := c.setup(t, t.TempDir())
			rep, err := Analyze(context.Background(), paths, Options{Location: time.UTC, Rules: detect.DefaultConfig()})
			if c.exit == ExitInput {
				if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), c.say) {
					t.Fatalf("err %v, want an input error saying %q", err, c.say)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := rep.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if rep.ExitCode != c.exit || !strings.Contains(b.String(), c.say) {
				t.Fatalf("exit %d (want %d), report lacks %q:\n%s", rep.ExitCode, c.exit, c.say, b.String())
			}
			if c.exit == ExitCannotJudge && strings.Contains(b.String(), "no mismatch, hang, crash") {
				t.Errorf("an all-clear on logs that cannot be judged")
			}
		})
	}
}

// TestStdin reads a console from standard input.
func TestStdin(t *testing.T) {
	text := console(fourRanks(0, 5, 20), func(rankLog) string { return "" }, oldInit, "")
	rep, err := Analyze(context.Background(), []string{Stdin}, Options{Location: time.UTC, Rules: detect.DefaultConfig(), Stdin: strings.NewReader(text)})
	if err != nil {
		t.Fatal(err)
	}
	hangOn(t, rep, 0, "waits in op 6")
}

// TestRASInput: saved ncclras reports are read as RAS, not as logs.
func TestRASInput(t *testing.T) {
	rep := run(t, filepath.Join(captures, "multicomm_silent"))
	if rep.Coverage.RASReports != 6 {
		t.Errorf("%d RAS reports read, want 6", rep.Coverage.RASReports)
	}
}

// TestNCCLDiagnostics: what NCCL and PyTorch say themselves becomes a finding with its cause.
func TestNCCLDiagnostics(t *testing.T) {
	initStart := func(pid, rank int) string {
		return fmt.Sprintf("n1:%d:%d [%d] NCCL INFO comm 0x%x rank %d nranks 4 cudaDev %d nvmlDev %d busId %d000 commId 0xc0ffee - Init START\n", pid, pid, rank, pid, rank, rank, rank, rank+1)
	}
	cases := []struct {
		name, text string
		kind       incident.Kind
		say        string
	}{
		{"2.4 mismatch check", "n1:7:7 [1] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 1 nvmlDev 1 - Init COMPLETE\n" +
			"\nn1:7:9 [1] enqueue.cc:300 NCCL WARN Mismatched collective detected, please check your collective calls at and around rank 1. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs\n",
			incident.KindMismatch, "NCCL's own check"},
		{"net/ib size mismatch", "\nn1:7:9 [1] transport/net_ib.cc:700 NCCL WARN NET/IB : req 1/1 tag 7 peer 10.0.0.2<43210> collective mismatch error, local size 4096 remote size 2048\n",
			incident.KindLink, "configuration"},
		{"cuda failure", "\nn1:7:7 [0] misc/utils.cc:50 NCCL WARN Cuda failure 'out of memory'\n", incident.KindGPU, "out of memory"},
		{"init hang", initStart(10, 0) + initStart(11, 1) + initStart(12, 2), incident.KindHang, "ranks 3 never logged joining it"},
		{"torch timeout alone", "[rank2]:[E1121 22:51:18.197257951 ProcessGroupNCCL.cpp:689] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600003 milliseconds before timing out.\n",
			incident.KindHang, "were only waiting"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := run(t, writeFile(t, t.TempDir(), "job.log", c.text))
			var b bytes.Buffer
			rep.WriteText(&b)
			f := kinds(rep)[c.kind]
			if rep.ExitCode != ExitFindings || len(f) != 1 || !strings.Contains(f[0].Summary, c.say) {
				t.Fatalf("want one %s finding saying %q:\n%s", c.kind, c.say, b.String())
			}
		})
	}
}
