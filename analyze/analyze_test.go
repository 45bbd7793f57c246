package analyze

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
)

var update = flag.Bool("update", false, "rewrite golden files")

const captures = "../testdata/captures/nccl-2.28.9-2xH200"

func analyzeCase(t *testing.T, name string) *Report {
	t.Helper()
	rep, err := Analyze(context.Background(), []string{filepath.Join(captures, name)},
		Options{Location: time.UTC, Rules: detect.DefaultConfig()})
	if err != nil {
		t.Fatalf("analyze %s: %v", name, err)
	}
	return rep
}

// TestGolden compares the whole JSON report of every capture with testdata/golden.
func TestGolden(t *testing.T) {
	cases, err := os.ReadDir(captures)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if !c.IsDir() {
			continue
		}
		t.Run(c.Name(), func(t *testing.T) {
			var b bytes.Buffer
			if err := analyzeCase(t, c.Name()).WriteJSON(&b); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", c.Name()+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./analyze -update)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("report differs from %s (go test ./analyze -run TestGolden -update to accept):\n%s", golden, b.String())
			}
		})
	}
}

func kinds(r *Report) map[incident.Kind][]FindingReport {
	m := map[incident.Kind][]FindingReport{}
	for _, f := range r.Findings {
		m[f.Kind] = append(m[f.Kind], f)
	}
	return m
}

// TestAcceptance states the acceptance checks on the real captures explicitly.
// TestOneGPUCaptures: the INFO logs of four ranks sharing one H100 (README there), each
// with one root cause, named by the rank that injected the fault.
func TestOneGPUCaptures(t *testing.T) {
	for _, c := range []struct {
		name string
		kind incident.Kind
		rank int
	}{
		{"crash", incident.KindHang, 1}, // offline, rank 1 just stopped: nothing in the logs says it died
		{"silent", incident.KindHang, 2},
		{"frozen", incident.KindHang, 3},
		{"order_inversion", incident.KindOrderInversion, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Analyze(context.Background(), []string{filepath.Join("../testdata/captures/nccl-2.28.9-1xH100-4ranks", c.name)},
				Options{Location: time.UTC, Rules: detect.DefaultConfig()})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Findings) != 1 {
				t.Fatalf("want one finding, got %d: %+v", len(rep.Findings), rep.Findings)
			}
			f := rep.Findings[0]
			if f.Kind != c.kind || len(f.Culprits) != 1 || f.Culprits[0].Rank != c.rank {
				t.Fatalf("want %s naming rank %d, got %s %+v: %s", c.kind, c.rank, f.Kind, f.Culprits, f.Summary)
			}
		})
	}
}

func TestAcceptance(t *testing.T) {
	for _, name := range []string{"healthy", "socket", "timestamps", "multicomm", "default_subsys"} {
		t.Run(name+" has no mismatch, hang or crash", func(t *testing.T) {
			k := kinds(analyzeCase(t, name))
			for _, bad := range []incident.Kind{incident.KindMismatch, incident.KindHang, incident.KindCrash, incident.KindP2PMismatch} {
				if len(k[bad]) > 0 {
					t.Errorf("%s finding on a healthy job: %+v", bad, k[bad])
				}
			}
		})
	}
	t.Run("silent: hang, culprit rank 1 pid 1114", func(t *testing.T) {
		h := kinds(analyzeCase(t, "silent"))[incident.KindHang]
		if len(h) != 1 || len(h[0].Culprits) != 1 || h[0].Culprits[0].Rank != 1 || h[0].Culprits[0].PID != 1114 {
			t.Fatalf("hang findings %+v", h)
		}
	})
	t.Run("crash: rank 1 dead", func(t *testing.T) {
		r := analyzeCase(t, "crash")
		c := kinds(r)[incident.KindCrash]
		if len(c) != 1 || c[0].Culprits[0].Rank != 1 || c[0].Culprits[0].PID != 1211 {
			t.Fatalf("crash findings %+v", c)
		}
		if len(r.Findings) != 1 {
			t.Errorf("want one finding per root cause, got %d", len(r.Findings))
		}
	})
	t.Run("mismatch_op: position 93, AllReduce on rank 0 vs Broadcast on rank 1", func(t *testing.T) {
		r := analyzeCase(t, "mismatch_op")
		m := kinds(r)[incident.KindMismatch]
		if len(m) != 1 {
			t.Fatalf("mismatch findings %+v", m)
		}
		f := m[0]
		if f.Seq != 93 || f.Ops["0"].Op != "AllReduce" || f.Ops["1"].Op != "Broadcast" || f.Ops["1"].Count != 2000000 {
			t.Errorf("mismatch %+v", f)
		}
		if len(r.Communicators) != 1 || f.Comm != r.Communicators[0].ID {
			t.Errorf("mismatch on %s, want the world communicator", f.Comm)
		}
		if len(f.Culprits) != 1 || f.Culprits[0].Rank != 1 {
			t.Errorf("culprits %+v, want rank 1 (it broke its own step pattern)", f.Culprits)
		}
	})
	t.Run("multicomm: three communicators matched across both ranks", func(t *testing.T) {
		r := analyzeCase(t, "multicomm")
		if len(r.Communicators) != 3 {
			t.Fatalf("%d communicators", len(r.Communicators))
		}
		for _, c := range r.Communicators {
			if c.NRanks != 2 || len(c.Ranks) != 2 || c.Ranks[0].Collectives != c.Ranks[1].Collectives {
				t.Errorf("communicator %+v", c)
			}
		}
	})
	t.Run("multicomm_silent: one hang finding naming rank 1", func(t *testing.T) {
		r := analyzeCase(t, "multicomm_silent")
		h := kinds(r)[incident.KindHang]
		if len(r.Findings) != 1 || len(h) != 1 || h[0].Culprits[0].Rank != 1 {
			t.Fatalf("findings %+v", r.Findings)
		}
	})
	t.Run("straggler: no lag claim without timestamps, and a hint", func(t *testing.T) {
		r := analyzeCase(t, "straggler")
		if len(kinds(r)[incident.KindStraggler]) != 0 {
			t.Errorf("straggler claimed without timestamps")
		}
		if len(r.Notes) == 0 || !strings.Contains(r.Notes[0], "NCCL_DEBUG_TIMESTAMP_LEVELS") {
			t.Errorf("notes %q lack the timestamp hint", r.Notes)
		}
	})
}

func TestTextReport(t *testing.T) {
	// A readable report of a real case, printed for humans running -v.
	var b bytes.Buffer
	if err := analyzeCase(t, "silent").WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "rank 1 (vm pid 1114) stopped issuing collectives") {
		t.Errorf("text report:\n%s", b.String())
	}
}
