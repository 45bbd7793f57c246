package jobsim

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/analyze"
	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
)

// generate runs a job in fast mode with every written line checked against logparse.
func generate(t *testing.T, cfg Config) (*Sim, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := New(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	s.verify = true
	if err := s.Generate(); err != nil {
		t.Fatal(err)
	}
	for _, e := range s.verifyErrs {
		t.Errorf("line check: %s", e)
	}
	return s, dir
}

func analyzeDir(t *testing.T, dir string, s *Sim) *analyze.Report {
	t.Helper()
	rep, err := analyze.Analyze(context.Background(), []string{dir},
		analyze.Options{Location: s.cfg.Location, Rules: detect.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	var unknown int64
	for _, f := range rep.Files {
		unknown += f.Unknown
	}
	if unknown != 0 {
		t.Errorf("analyze counted %d lines it does not know", unknown)
	}
	return rep
}

func describe(rep *analyze.Report) string {
	var b strings.Builder
	for _, f := range rep.Findings {
		fmt.Fprintf(&b, "\n  %s %s comm=%s seq=%d culprits=%v lag=%.3f", f.Kind, f.Summary, f.Comm, f.Seq, f.Culprits, f.LagSeconds)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "\n    - %s", e)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "\n  note: %s", n)
	}
	return b.String()
}

// versions are the release variants the analysis tests run on: the real captures' 2.28.9
// with µs timestamps, and releases that differ in Init, split, WARN or prefix formats
// (TestEveryLineParses covers every minor release).
var versions = []struct {
	version    string
	timestamps bool
}{
	{"2.28.9", true},
	{"2.18", false},
	{"2.21", false},
	{"2.23", false},
	{"2.29", true},
	{"2.30.7", true},
}

// TestEveryLineParses writes jobs with every feature (pipeline Send/Recv, WARNs, a crash's
// service-thread lines, a wrong op, a straggler) in each release's formats; generate checks
// each line parses to the kind it was written as, with its host, pid and timestamp.
func TestEveryLineParses(t *testing.T) {
	for _, v := range []string{"2.18.1", "2.19", "2.20", "2.21", "2.22", "2.23", "2.24", "2.25", "2.26", "2.27", "2.28.3", "2.28.9", "2.29", "2.30.3", "2.30.7"} {
		for _, ts := range []bool{false, true} {
			d, _ := parseDialect(v)
			if ts && !d.timestamps() {
				continue
			}
			t.Run(fmt.Sprintf("%s/ts=%t", v, ts), func(t *testing.T) {
				t.Parallel()
				cfg := Config{Nodes: 4, RanksPerNode: 4, Steps: 6, PipelineStages: 2, Version: v, Timestamps: ts,
					StepTime: 100 * time.Millisecond, LogsOnly: true, ClockSkew: 2 * time.Millisecond, Faults: []Fault{
						{Kind: FaultIBPort, Rank: 5, Step: 1, Down: true, Warn: true, Op: -1},
						{Kind: FaultIBPort, Rank: 2, Step: 2, Warn: true, Op: -1},
						{Kind: FaultWrongSize, Rank: 3, Step: 2, Op: -1},
						{Kind: FaultStraggler, Rank: 6, Step: 3, Delay: 20 * time.Millisecond},
						{Kind: FaultCrash, Rank: 9, Step: 5, Op: 2},
					}}
				s, dir := generate(t, cfg)
				if st := s.Stats(); st.Lines == 0 || st.Files != 16 {
					t.Errorf("stats %+v", st)
				}
				analyzeDir(t, dir, s)
			})
		}
	}
}

// TestHealthy: a clean job has no finding, and the analysis sees the job as simulated.
func TestHealthy(t *testing.T) {
	for _, v := range versions {
		t.Run(v.version, func(t *testing.T) {
			t.Parallel()
			// The default shape (4 nodes x 8 GPUs) with pipeline stages and IB trees on the
			// captures' release; a smaller job on the others.
			cfg := Config{Nodes: 4, RanksPerNode: 3, Steps: 20, Timestamps: v.timestamps, Version: v.version, Jitter: 50 * time.Millisecond, LogsOnly: true}
			if v.version == "2.28.9" {
				cfg = Config{Steps: 30, Timestamps: true, PipelineStages: 2, Jitter: 50 * time.Millisecond}
			}
			s, dir := generate(t, cfg)
			rep := analyzeDir(t, dir, s)
			if len(rep.Findings) != 0 {
				t.Fatalf("healthy job has findings:%s", describe(rep))
			}
			if len(rep.Ranks) != len(s.ranks) {
				t.Fatalf("%d ranks analysed, want %d", len(rep.Ranks), len(s.ranks))
			}
			for i, r := range rep.Ranks {
				want := s.Ranks()[i]
				if r.Rank != want.Rank || r.Host != want.Host || r.PID != want.PID || r.BusID != want.BusID ||
					r.CudaDev != want.CudaDev || r.Network != "IB" || !strings.HasPrefix(s.d.String(), r.NCCL) {
					t.Errorf("rank %d analysed as %+v, simulated %+v", i, r, want)
				}
			}
			// The analysis groups communicators exactly as the simulator built them.
			var want []string
			for _, g := range s.groups {
				want = append(want, g.id)
			}
			var got []string
			for _, c := range rep.Communicators {
				got = append(got, c.ID)
				if c.NRanks != len(c.Ranks) {
					t.Errorf("communicator %s: %d of %d ranks joined", c.ID, len(c.Ranks), c.NRanks)
				}
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("communicators analysed %v, simulated %v", got, want)
			}
			if s.Alive(s.Ranks()[0].PID) {
				t.Error("a cleanly ended job's processes are alive")
			}
		})
	}
}

type faultCase struct {
	fault Fault
	check func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, timed bool)
}

func only(t *testing.T, rep *analyze.Report, kind incident.Kind) analyze.FindingReport {
	t.Helper()
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != kind {
		t.Fatalf("want one %s finding, got:%s", kind, describe(rep))
	}
	return rep.Findings[0]
}

func culprit(t *testing.T, f analyze.FindingReport, in Injection, rep *analyze.Report) {
	t.Helper()
	if len(f.Culprits) != 1 || f.Culprits[0].Rank != in.Rank || f.Culprits[0].Host != in.Host || f.Culprits[0].PID != in.PID {
		t.Errorf("culprits %+v, want rank %d (%s pid %d):%s", f.Culprits, in.Rank, in.Host, in.PID, describe(rep))
	}
}

// mismatchCheck: the mismatch is at the injected position, names the rank, and shows the
// culprit's op against the others'.
func mismatchCheck(culpritOp func(right incident.Op) incident.Op) func(*testing.T, *Sim, *analyze.Report, Injection, bool) {
	return func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, _ bool) {
		f := only(t, rep, incident.KindMismatch)
		culprit(t, f, in, rep)
		if f.Comm != in.Comm || f.Seq != in.Seq {
			t.Errorf("mismatch at %s #%d, injected at %s #%d", f.Comm, f.Seq, in.Comm, in.Seq)
		}
		r := s.ranks[in.Rank]
		k := s.faults[0].op
		c := r.comms[r.plan[k].comm]
		right := incident.Op{Op: r.plan[k].name, Count: r.plan[k].count, Datatype: dtypeName(r.plan[k].dtype), RedOp: "sum"}
		for rank, op := range f.Ops {
			want := right
			if rank == strconv.Itoa(c.rank) {
				want = culpritOp(right)
			}
			if op != want {
				t.Errorf("comm rank %s issued %+v, want %+v", rank, op, want)
			}
		}
		if len(f.Ops) != len(c.g.members) {
			t.Errorf("ops of %d ranks, want %d", len(f.Ops), len(c.g.members))
		}
	}
}

var faultCases = map[string]faultCase{
	"skip": {Fault{Kind: FaultSkip, Rank: 5, Step: 12, Op: -1}, func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, _ bool) {
		f := only(t, rep, incident.KindMismatch)
		culprit(t, f, in, rep)
		if f.Comm != in.Comm || f.Seq != in.Seq {
			t.Errorf("mismatch at %s #%d, skipped at %s #%d", f.Comm, f.Seq, in.Comm, in.Seq)
		}
		if !slices.ContainsFunc(f.Evidence, func(e string) bool { return strings.Contains(e, "skipped AllGather") }) {
			t.Errorf("the skipped op is not named:%s", describe(rep))
		}
	}},
	"wrong-op": {Fault{Kind: FaultWrongOp, Rank: 7, Step: 11, Op: -1}, mismatchCheck(func(o incident.Op) incident.Op {
		return incident.Op{Op: "Broadcast", Count: o.Count, Datatype: o.Datatype}
	})},
	"wrong-size": {Fault{Kind: FaultWrongSize, Rank: 7, Step: 11, Op: -1}, mismatchCheck(func(o incident.Op) incident.Op {
		o.Count /= 2
		return o
	})},
	"wrong-dtype": {Fault{Kind: FaultWrongDtype, Rank: 7, Step: 11, Op: -1}, mismatchCheck(func(o incident.Op) incident.Op {
		o.Datatype = "float32"
		return o
	})},
	"silent": {Fault{Kind: FaultSilent, Rank: 3, Step: 15, Op: -1}, func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, _ bool) {
		f := only(t, rep, incident.KindHang)
		culprit(t, f, in, rep)
		if want := in.Positions[f.Comm]; f.Seq != want {
			t.Errorf("hang at %s #%d, want #%d", f.Comm, f.Seq, want)
		}
	}},
	"silent mid-step": {Fault{Kind: FaultSilent, Rank: 10, Step: 15, Op: 5}, func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, _ bool) {
		f := only(t, rep, incident.KindHang)
		culprit(t, f, in, rep)
		if want := in.Positions[f.Comm]; f.Seq != want {
			t.Errorf("hang at %s #%d, want #%d", f.Comm, f.Seq, want)
		}
	}},
	"straggler": {Fault{Kind: FaultStraggler, Rank: 7, Step: 10, Delay: 150 * time.Millisecond}, func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, timed bool) {
		if !timed {
			if len(rep.Findings) != 0 || !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "timestamps") }) {
				t.Errorf("without timestamps: want no finding and a note:%s", describe(rep))
			}
			return
		}
		f := only(t, rep, incident.KindStraggler)
		culprit(t, f, in, rep)
		if lag := f.LagSeconds; math.Abs(lag-0.150) > 0.015 {
			t.Errorf("lag %.3fs, injected 0.150s", lag)
		}
		// The onset is the first wait the time accounting booked: within a step of the
		// injection (the first late step can read as the others running ahead).
		if want, ok := in.Positions[f.Comm]; !ok || f.Seq < want || f.Seq > want+perStep(s, f.Comm) {
			t.Errorf("onset at %s #%d, injected at #%d", f.Comm, f.Seq, want)
		}
	}},
	// 200 ms late at every 1 s step costs the job 17% of its time: a slowdown (80 ms, 7%,
	// is below the 10% share and no longer one).
	"straggler from the start": {Fault{Kind: FaultStraggler, Rank: 11, Step: 0, Delay: 200 * time.Millisecond}, func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, timed bool) {
		if !timed {
			return
		}
		f := only(t, rep, incident.KindStraggler)
		culprit(t, f, in, rep)
		if lag := f.LagSeconds; math.Abs(lag-0.200) > 0.025 {
			t.Errorf("lag %.3fs, injected 0.200s", lag)
		}
	}},
	"pause": {Fault{Kind: FaultPause, Rank: 0, Step: 12, Duration: 20 * time.Second}, func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, _ bool) {
		if len(rep.Findings) != 0 {
			t.Errorf("a pause is no fault:%s", describe(rep))
		}
		if !in.Benign {
			t.Error("pause injection not marked benign")
		}
	}},
	"ib-port down with WARNs": {Fault{Kind: FaultIBPort, Rank: 8, Step: 5, Down: true, Warn: true}, func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, _ bool) {
		if len(rep.Findings) == 0 {
			t.Fatalf("no link finding")
		}
		named := false
		for _, f := range rep.Findings {
			if f.Kind != incident.KindLink || len(f.Culprits) == 0 || f.Culprits[0].Host != "node2" {
				t.Errorf("want link findings on node2:%s", describe(rep))
			}
			named = named || strings.HasPrefix(f.Culprits[0].Port, "mlx5_2")
		}
		// Before 2.20 neither IB WARN names the HCA; from 2.20 the async event does.
		if !named && s.d.ge(20, 0) {
			t.Errorf("no finding names mlx5_2:%s", describe(rep))
		}
	}},
	// What only a live detector can see: nothing in the logs tells them from a healthy job
	// that was stopped (stuck) or ran on (xid).
	"stuck (offline: no finding)": {Fault{Kind: FaultStuck, Rank: 0, Step: 15}, func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, _ bool) {
		if len(rep.Findings) != 0 {
			t.Errorf("offline stuck-in-flight:%s", describe(rep))
		}
	}},
	"xid (offline: no finding)": {Fault{Kind: FaultXID, Rank: 3, Step: 5}, func(t *testing.T, s *Sim, rep *analyze.Report, in Injection, _ bool) {
		if len(rep.Findings) != 0 {
			t.Errorf("offline XID:%s", describe(rep))
		}
	}},
}

// perStep is how many positions of communicator comm a rank issues per step.
func perStep(s *Sim, comm string) int64 {
	for _, r := range s.ranks {
		for k, c := range r.comms {
			if c != nil && c.g.id == comm {
				return r.perStep[k]
			}
		}
	}
	return 1
}

// TestFaultFindings: each fault, in each release's formats, gives the expected offline
// finding, at the injected position, naming the injected rank.
func TestFaultFindings(t *testing.T) {
	for _, v := range versions {
		for name, fc := range faultCases {
			t.Run(v.version+"/"+name, func(t *testing.T) {
				t.Parallel()
				cfg := Config{Nodes: 4, RanksPerNode: 3, Steps: 20, Timestamps: v.timestamps, Version: v.version,
					Jitter: 30 * time.Millisecond, LogsOnly: true, Faults: []Fault{fc.fault}}
				if fc.fault.Kind == FaultStraggler {
					// A slowdown is judged over 20 steps after the warm-up (detect's
					// slowdown_steps): a straggler from step 10 needs a longer job.
					cfg.Steps = 45
				}
				s, dir := generate(t, cfg)
				ins := s.Injections()
				if len(ins) != 1 {
					t.Fatalf("injections %+v", ins)
				}
				rep := analyzeDir(t, dir, s)
				fc.check(t, s, rep, ins[0], v.timestamps)
			})
		}
	}
}

// TestCrashOffline: a crashed rank's node-local peers log "Connection closed by localRank
// N"; the analysis should name the rank as crashed (the real 2-rank capture does), not
// only as hung.
func TestCrashOffline(t *testing.T) {
	s, dir := generate(t, Config{Nodes: 4, RanksPerNode: 4, Steps: 20, Timestamps: true, LogsOnly: true,
		Faults: []Fault{{Kind: FaultCrash, Rank: 6, Step: 15, Op: -1}}})
	in := s.Injections()[0]
	if s.Alive(in.PID) || !s.Alive(s.Ranks()[0].PID) {
		t.Errorf("crashed pid alive %t, a waiting rank alive %t", s.Alive(in.PID), s.Alive(s.Ranks()[0].PID))
	}
	rep := analyzeDir(t, dir, s)
	f := only(t, rep, incident.KindCrash)
	culprit(t, f, in, rep)
}

// TestDeterministic: the same Config writes the same bytes.
func TestDeterministic(t *testing.T) {
	cfg := Config{Nodes: 2, RanksPerNode: 4, Steps: 10, Timestamps: true, Jitter: 100 * time.Millisecond, LogsOnly: true,
		Seed: 42, Faults: []Fault{{Kind: FaultStraggler, Rank: 3, Step: 2, Delay: 50 * time.Millisecond}}}
	_, a := generate(t, cfg)
	cfg.Workers = 1
	_, b := generate(t, cfg)
	files := 0
	err := filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		x, _ := os.ReadFile(p)
		y, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between runs", rel)
		}
		files++
		return nil
	})
	if err != nil || files != 8 {
		t.Errorf("walked %d files: %v", files, err)
	}
}
