package frdump

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/snapshot"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// golden is what a case's dumps become: per file, what was read and the process.
type golden struct {
	File     string           `json:"file"`
	Rank     int              `json:"rank"`
	OwnRank  int              `json:"own_rank"`
	Form     Form             `json:"form"`
	Version  string           `json:"version"`
	Partial  bool             `json:"partial,omitempty"`
	Skipped  int              `json:"skipped,omitempty"`
	Problems []string         `json:"problems,omitempty"`
	Process  snapshot.Process `json:"process"`
}

func readCase(t *testing.T, dir string) []golden {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "nccl_trace_rank_*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var out []golden
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Read(b, Limits{})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		_, rank, ok := RankOfName(filepath.Base(f))
		if !ok {
			t.Fatalf("%s: no rank in the name", f)
		}
		out = append(out, golden{File: filepath.Base(f), Rank: rank, OwnRank: d.OwnRank(), Form: d.Form, Version: d.Version,
			Partial: d.Partial, Skipped: d.Skipped, Problems: d.Problems, Process: d.Process(rank, filepath.Base(f))})
	}
	return out
}

func TestGoldenDumps(t *testing.T) {
	dirs, err := filepath.Glob("testdata/*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, dir := range dirs {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() || filepath.Base(dir) == "golden" || filepath.Base(dir) == "fuzz" {
			continue
		}
		n++
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(readCase(t, dir), "", " ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the golden file; run go test -update and review the diff", name)
			}
		})
	}
	if n < 8 {
		t.Fatalf("only %d cases under testdata: run python3 testdata/gen.py", n)
	}
}

// comm finds a process's group by name.
func comm(t *testing.T, p snapshot.Process, name string) snapshot.Comm {
	t.Helper()
	for _, c := range p.Comms {
		if c.FR != nil && c.FR.Name == name {
			return c
		}
	}
	t.Fatalf("no group %s in %+v", name, p.Comms)
	return snapshot.Comm{}
}

func TestSkippedSubgroupEvidence(t *testing.T) {
	cs := readCase(t, "testdata/skipped_subgroup")
	r0, r1 := cs[0].Process, cs[1].Process
	sub0, sub1 := comm(t, r0, "1"), comm(t, r1, "1")
	if sub0.ID != sub1.ID || sub0.ID == comm(t, cs[2].Process, "2").ID {
		t.Fatalf("group ids: %s %s %s", sub0.ID, sub1.ID, comm(t, cs[2].Process, "2").ID)
	}
	if sub0.Count != 5 || sub1.Count != 4 || sub0.Done.Done != 4 || sub0.Done.Started != 5 {
		t.Errorf("sub-group: rank 0 count %d done %+v, rank 1 count %d", sub0.Count, sub0.Done, sub1.Count)
	}
	fl := sub0.Done.InFlight
	if fl == nil || fl.Seq != 5 || fl.Op.Op != "AllReduce" || fl.Dtype != "bfloat16" || fl.Count != 262144 || fl.GPUStart == 0 {
		t.Errorf("rank 0's op in flight: %+v", fl)
	}
	if sub0.FR.Pending != 1 || len(sub0.FR.Ops) != 2 || sub0.FR.Ops[0].State != snapshot.OpStarted ||
		sub0.FR.Ops[0].Where != "train_step (train.py:42)" || sub0.FR.Ops[1].State != snapshot.OpCompleted || sub0.FR.Ops[1].Seq != 4 {
		t.Errorf("rank 0's pending ops: %+v", sub0.FR.Ops)
	}
	w1 := comm(t, r1, "0")
	if w1.Count != 5 || w1.Done.Done != 4 || w1.FR.Pending != 1 || w1.Rank != 1 || w1.NRanks != 4 {
		t.Errorf("rank 1 on the world group: %+v done %+v", w1, w1.Done)
	}
	if r0.Rank != 0 || r0.Source != snapshot.SourceFR || r0.WorldSize != 4 || r0.NCCL != "2.21.5" {
		t.Errorf("process: %+v", r0)
	}
	for _, c := range cs[:2] {
		if c.OwnRank != -1 {
			t.Errorf("%s: own rank %d, but groups {0,1,2,3} and {0,1} do not tell 0 from 1", c.File, c.OwnRank)
		}
	}
}

func TestP2PEvidence(t *testing.T) {
	cs := readCase(t, "testdata/p2p_pipeline")
	for _, c := range cs {
		if c.OwnRank != c.Rank {
			t.Errorf("%s: own rank %d: its sends and receives name it", c.File, c.OwnRank)
		}
	}
	w := comm(t, cs[2].Process, "0")
	fl := w.Done.InFlight
	if fl == nil || !fl.P2P || fl.Op.Op != "Send" || fl.Root != 3 || fl.Seq != 6 {
		t.Errorf("rank 2's send in flight: %+v", fl)
	}
	if len(w.P2P) != 2 || w.P2P[0].Peer != 1 || w.P2P[0].Recvs != 3 || w.P2P[1].Peer != 3 || w.P2P[1].Sends != 3 {
		t.Errorf("rank 2's p2p rows: %+v", w.P2P)
	}
	if w.Done.P2PIssued != 6 || w.Done.P2PDone != 5 {
		t.Errorf("rank 2's p2p progress: %+v", w.Done)
	}
}

func TestAllGatherCountIsPerRank(t *testing.T) {
	cs := readCase(t, "testdata/signal_killed")
	w := comm(t, cs[0].Process, "0")
	if w.Last.Op != "AllGather" || w.Last.Count != 1024 {
		t.Errorf("all_gather: %+v", w.Last)
	}
}

func TestJSONAndPickleAgree(t *testing.T) {
	pk := readCase(t, "testdata/healthy")
	js := readCase(t, "testdata/healthy_json")
	p4 := readCase(t, "testdata/healthy_protocol4")
	for i := range js {
		if js[i].Form != FormJSON || p4[i].Form != FormPickle {
			t.Fatalf("forms %s %s", js[i].Form, p4[i].Form)
		}
		js[i].Process.File, pk[i].Process.File, p4[i].Process.File = "", "", ""
		// The JSON form has no stack traces.
		for _, p := range []*snapshot.Process{&pk[i].Process, &p4[i].Process} {
			for _, c := range p.Comms {
				for k := range c.FR.Ops {
					c.FR.Ops[k].Where = ""
				}
			}
		}
		if !reflect.DeepEqual(js[i].Process, pk[i].Process) || !reflect.DeepEqual(p4[i].Process, pk[i].Process) {
			a, _ := json.Marshal(js[i].Process)
			b, _ := json.Marshal(pk[i].Process)
			t.Errorf("rank %d: JSON and pickle differ:\n%s\n%s", i, a, b)
		}
	}
}

func TestBadDumps(t *testing.T) {
	cs := readCase(t, "testdata/bad_input")
	byFile := map[string]golden{}
	for _, c := range cs {
		byFile[c.File] = c
	}
	cut := byFile["nccl_trace_rank_1"]
	if !cut.Partial || len(cut.Problems) == 0 || !strings.Contains(cut.Problems[0], "truncated") {
		t.Errorf("truncated dump: %+v", cut)
	}
	if len(cut.Process.Comms) == 0 {
		t.Errorf("truncated dump: nothing read")
	}
	newer := byFile["nccl_trace_rank_3"]
	if newer.Version != "3.1" || len(newer.Problems) == 0 || !strings.Contains(newer.Problems[0], `"3.1"`) {
		t.Errorf("newer version: %+v", newer)
	}
	if c := comm(t, newer.Process, "2"); c.Count != 5 {
		t.Errorf("newer version: its entries were not read: %+v", c)
	}
}

func TestReadRejectsOtherFiles(t *testing.T) {
	for _, tc := range []struct{ name, in, says string }{
		{"text", "hello\n", "neither a pickle"},
		{"pickled list", "\x80\x02]q\x00.", "holds a list"},
		{"pickled other dict", "\x80\x02}X\x01\x00\x00\x00aK\x01s.", "without version"},
		{"pickled object", "\x80\x02cos\nsystem\n.", "GLOBAL"},
		{"json other", `{"version": 1, "foo": 2}`, "neither a pickle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read([]byte(tc.in), Limits{})
			if !errors.Is(err, ErrNotDump) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want %q", err, tc.says)
			}
		})
	}
}

func TestRankOfName(t *testing.T) {
	for _, tc := range []struct {
		in, prefix string
		rank       int
		ok         bool
	}{
		{"nccl_trace_rank_12", "nccl_trace_rank_", 12, true},
		{"fr_dump_3.json", "fr_dump_", 3, true},
		{"trace.7", "trace.", 7, true},
		{"dump_0.pkl.gz", "dump_", 0, true},
		{"dump", "", -1, false},
		{"rank_12345678901", "", -1, false},
	} {
		prefix, rank, ok := RankOfName(tc.in)
		if prefix != tc.prefix || rank != tc.rank || ok != tc.ok {
			t.Errorf("%s: got %q %d %v", tc.in, prefix, rank, ok)
		}
	}
}

func TestOpNames(t *testing.T) {
	for _, tc := range []struct {
		name, op string
		peer     int
	}{
		{"nccl:all_reduce", "AllReduce", -1},
		{"nccl:_allgather_base", "AllGather", -1},
		{"nccl:reduce_scatter_tensor_coalesced", "ReduceScatter", -1},
		{"nccl:send 1->2", "Send", 2},
		{"nccl:recv 3<-0", "Recv", 0},
		{"xccl:broadcast", "Broadcast", -1},
		{"nccl:all_to_all", "AlltoAll", -1},
		{"nccl:new_window", "new_window", -1},
		{"weird name, with;separators", "weird", -1},
	} {
		op, peer, _ := opOf(tc.name)
		if op != tc.op || peer != tc.peer {
			t.Errorf("%s: got %s %d", tc.name, op, peer)
		}
	}
	for in, want := range map[string]string{"Float": "float32", "BFloat16": "bfloat16", "Bool": "uint8", "Short": "short", "": "unknown"} {
		if got, _ := dtypeOf(in); got != want {
			t.Errorf("%s: %s", in, got)
		}
	}
	e := Entry{InSizes: [][]int64{{4, 4}}, InDtypes: []string{"ComplexFloat"}}
	if n, dt := ncclCount(&e, ops["all_reduce"], 4); n != 32 || dt != "float32" {
		t.Errorf("complex all_reduce: %d %s", n, dt)
	}
	e = Entry{InSizes: [][]int64{{4096}}, OutSizes: [][]int64{{1024}}, InDtypes: []string{"Half"}, OutDtypes: []string{"Half"}}
	if n, _ := ncclCount(&e, ops["_reduce_scatter_base"], 4); n != 1024 {
		t.Errorf("reduce_scatter: %d", n)
	}
	if n, _ := ncclCount(&e, ops["all_to_all_single"], 4); n != 1024 {
		t.Errorf("all_to_all: %d", n)
	}
}

func TestDecodeJSON(t *testing.T) {
	v, err := DecodeJSON([]byte(`{"a": [1, 2.5, "x", null, true], "b": {"c": -3}}`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := &Dict{Keys: []any{"a", "b"}, Vals: []any{
		&List{Items: []any{int64(1), 2.5, "x", nil, true}},
		&Dict{Keys: []any{"c"}, Vals: []any{int64(-3)}}}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("got %#v", v)
	}
	v, err = DecodeJSON([]byte(`{"version": "2.10", "entries": [{"a": 1}, {"a": 2, "b"`), Limits{})
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("want truncation, got %v", err)
	}
	if l, _ := v.(*Dict).Get("entries"); len(l.(*List).Items) != 2 {
		t.Errorf("salvaged %#v", v)
	}
	for _, bad := range []string{`{"a": }`, `{"a": 1} {"b": 2}`, ``, `[` + strings.Repeat("[", 300)} {
		if _, err := DecodeJSON([]byte(bad), Limits{}); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

// The dumps torch 2.11 wrote in the project's own 2-rank capture of a mismatched collective
// (rank 1 called broadcast where rank 0 called all_reduce, at the group's 93rd work).
func TestRealTorchDumps(t *testing.T) {
	dir := "../../testdata/captures/nccl-2.28.9-2xH200/mismatch_op"
	var ops [2]snapshot.Op
	for r := 0; r < 2; r++ {
		b, err := os.ReadFile(filepath.Join(dir, "fr_trace_rank_"+string(rune('0'+r))))
		if err != nil {
			t.Skip(err)
		}
		d, err := Read(b, Limits{})
		if err != nil || len(d.Problems) > 0 || d.Version != "2.10" || len(d.Entries) != 97 {
			t.Fatalf("rank %d: %v %+v", r, err, d.Problems)
		}
		p := d.Process(r, "x")
		c := comm(t, p, "0")
		// Rank 1's broadcast completed (its root sends and is done), rank 0's all_reduce did
		// not: pg_status says 93 completed there too (the watchdog counts the work it timed
		// out), the entries say it never did, and the entries are believed.
		done := []int64{92, 93}[r]
		if c.Count != 97 || c.Done.Done != done || c.FR.Pending != int(97-done) || c.FR.Ops[0].Seq != done+1 || c.FR.Ops[0].Where != "step (job.py:69)" {
			t.Errorf("rank %d: count %d done %+v pending %+v", r, c.Count, c.Done, c.FR.Ops)
		}
		for _, o := range c.Recent {
			if o.Seq == 93 {
				ops[r] = o
			}
		}
	}
	if ops[0].Op != "AllReduce" || ops[1].Op != "Broadcast" || ops[0].Count != 2000000 || ops[1].Count != 2000000 {
		t.Errorf("position 93: %+v / %+v", ops[0], ops[1])
	}
}

// The first dump formats (torch 2.2-2.3) had no process_group nor p2p fields, and called the
// sequence number seq_id: their entries are read by their pg_id.
func TestOldDumpFormat(t *testing.T) {
	in := `{"version": "2.0", "entries": [` +
		`{"record_id": 0, "pg_id": 0, "seq_id": 1, "profiling_name": "nccl:all_reduce", "time_created_ns": 5000, "input_sizes": [[8]], "output_sizes": [[8]], "state": "completed"},` +
		`{"record_id": 1, "pg_id": 0, "seq_id": 2, "profiling_name": "nccl:broadcast", "time_created_ns": 6000, "input_sizes": [[8]], "output_sizes": [[8]], "state": "scheduled"},` +
		`{"record_id": 2, "pg_id": 0, "seq_id": 3, "profiling_name": "nccl:send 0->1", "state": "scheduled"}]}`
	d, err := Read([]byte(in), Limits{})
	if err != nil || len(d.Entries) != 3 || d.Skipped != 0 {
		t.Fatalf("%v %+v", err, d)
	}
	p := d.Process(0, "x")
	if len(p.Comms) != 1 || p.Comms[0].ID != "fr:0" || p.Comms[0].Count != 2 || p.Comms[0].Done.Done != 1 ||
		p.Comms[0].Recent[1].Op != "Broadcast" || p.Comms[0].Done.P2PIssued != 0 || !d.Entries[2].P2P {
		t.Errorf("old format: %+v", p.Comms)
	}
}
