package ras

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ncclwatch/watchdog/snapshot"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/golden")

const capturesDir = "../../testdata/captures/nccl-2.28.9-2xH200"

// captures lists every RAS reply captured on real hardware.
func captures(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(capturesDir, "*", "ras.*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no RAS captures under %s: %v", capturesDir, err)
	}
	return files
}

// loadCapture returns a captured reply without the "# hello=..." line the capture script
// put before it: the bytes the server sent after STATUS.
func loadCapture(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for bytes.HasPrefix(b, []byte("#")) {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil
		}
		b = b[i+1:]
	}
	return b
}

func parseCapture(t testing.TB, path string) *snapshot.RAS {
	t.Helper()
	b := loadCapture(t, path)
	var rep *snapshot.RAS
	var err error
	if strings.HasSuffix(path, ".json.txt") {
		rep, err = ParseJSONKeep(b, nil)
	} else {
		rep, err = ParseText(b)
	}
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rep
}

func TestGoldenCaptures(t *testing.T) {
	for _, path := range captures(t) {
		name := filepath.Base(filepath.Dir(path)) + "." + strings.TrimSuffix(filepath.Base(path), ".txt")
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(parseCapture(t, path), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "golden", name+".golden.json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("parsed %s differs from %s (go test -update rewrites it)\ngot:\n%s", path, golden, got)
			}
		})
	}
}

// The silent-rank hang: rank 1 stopped at step 12; RAS shows it behind on every comm.
func TestHangCaptureCounts(t *testing.T) {
	js := parseCapture(t, filepath.Join(capturesDir, "multicomm_silent", "ras.hang6s.json.txt"))
	tx := parseCapture(t, filepath.Join(capturesDir, "multicomm_silent", "ras.hang6s.text.txt"))

	if js.Version != "2.28.9" || tx.Version != "2.28.9" || js.Format != "json" || tx.Format != "text" {
		t.Errorf("version/format: json %q %q, text %q %q", js.Version, js.Format, tx.Version, tx.Format)
	}
	wantTotals := map[string]map[int]int64{
		"0x36460c31ee204c3b": {0: 13, 1: 12},
		"0x4c5e34fc781ebe93": {0: 66, 1: 61},
		"0x81700cfbaedb500a": {0: 14, 1: 13},
	}
	wantFunc := map[string]string{
		"0x36460c31ee204c3b": "Broadcast",
		"0x4c5e34fc781ebe93": "AllReduce",
		"0x81700cfbaedb500a": "AllReduce",
	}
	if len(js.Comms) != 3 || len(tx.Comms) != 3 {
		t.Fatalf("comms: json %d, text %d, want 3 each", len(js.Comms), len(tx.Comms))
	}
	for _, c := range js.Comms {
		if c.Size != 2 || c.Status != "RUNNING" || len(c.Missing) != 0 || c.Partial {
			t.Errorf("json %s: size %d status %q missing %v partial %v", c.Hash, c.Size, c.Status, c.Missing, c.Partial)
		}
		if !reflect.DeepEqual(c.Counts, wantTotals[c.Hash]) {
			t.Errorf("json %s counts %v, want %v", c.Hash, c.Counts, wantTotals[c.Hash])
		}
		if len(c.Funcs) != 1 || !reflect.DeepEqual(c.Funcs[wantFunc[c.Hash]], wantTotals[c.Hash]) {
			t.Errorf("json %s funcs %v", c.Hash, c.Funcs)
		}
	}
	for _, c := range tx.Comms {
		// Only one function was used per comm here, so the text gives the same numbers.
		if c.Size != 2 || c.Status != "RUNNING" || !c.Partial || c.Counts != nil {
			t.Errorf("text %s: size %d status %q partial %v counts %v", c.Hash, c.Size, c.Status, c.Partial, c.Counts)
		}
		if !reflect.DeepEqual(c.Funcs[wantFunc[c.Hash]], wantTotals[c.Hash]) {
			t.Errorf("text %s funcs %v, want %s %v", c.Hash, c.Funcs, wantFunc[c.Hash], wantTotals[c.Hash])
		}
	}
}

// Hashes must equal what the Init line prints as commId, so RAS and log views join.
func TestHashesMatchInitCommID(t *testing.T) {
	reCommID := regexp.MustCompile(`commId (0x[0-9a-f]+)`)
	for _, dir := range []string{"multicomm", "multicomm_silent", "default_subsys", "warn_crash"} {
		logs, _ := filepath.Glob(filepath.Join(capturesDir, dir, "nccl.*.log"))
		ids := map[string]bool{}
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range reCommID.FindAllSubmatch(b, -1) {
				ids[string(m[1])] = true
			}
		}
		if len(ids) == 0 {
			continue // WARN-level logs print no Init lines
		}
		files, _ := filepath.Glob(filepath.Join(capturesDir, dir, "ras.*.json.txt"))
		for _, f := range files {
			found := 0
			for _, c := range parseCapture(t, f).Comms {
				if ids[c.Hash] {
					found++
				}
			}
			// The world comm has a commId; new_group children (ncclCommSplit) print none.
			if found != 1 {
				t.Errorf("%s: %d hashes match Init commIds %v, want 1", f, found, ids)
			}
		}
	}
}

func TestNormHash(t *testing.T) {
	for in, want := range map[string]string{
		"04c8e25cc07de60e":    "0x4c8e25cc07de60e",
		"0x04C8E25CC07DE60E":  "0x4c8e25cc07de60e",
		"0x4c8e25cc07de60e":   "0x4c8e25cc07de60e",
		"0000000000000000":    "0x0",
		"zz":                  "zz",
		"0x123456789abcdef01": "0x123456789abcdef01", // too long for 64 bits: kept
		"":                    "",
	} {
		if got := normHash(in); got != want {
			t.Errorf("normHash(%q) = %q, want %q", in, got, want)
		}
	}
}

// A synthetic text report with every block kind NCCL's client_support.cc can print.
const textAllBlocks = `NCCL version 2.27.7+cuda12.9 compiled with CUDA 12.9
CUDA runtime version 12090, driver version 12090

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      2          8            1         16       16

Communicators... (5.012s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         8        16        16   RUNNING  INCOMPLETE,ERROR,MISMATCH
    1         4         1       1-2         2         8     ABORT  MISMATCH

Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
  Process 4242 on node 10.0.0.2 managing GPU 3

DEAD
  2 job processes are considered dead (unreachable via the RAS network)
  Process 4243 on node 10.0.0.2 managing GPU 4

#0-0 (000b0e9c1d77a2f4) INCOMPLETE
  Missing communicator data from 2 ranks
  Rank 11 -- GPU 3 managed by process 4242 on node 10.0.0.2
  Rank 12 -- [process information not found]

#0-0 (000b0e9c1d77a2f4) ERROR
  Initialization error on 1 rank
  Rank 5 reported Invalid usage -- GPU 5 managed by process 4100 on node 10.0.0.1
  Asynchronous errors on 2 ranks
  2 ranks reported Remote process error
  Rank 6 -- GPU 6 managed by process 4101 on node 10.0.0.1
  Rank 7 -- GPU 7 managed by process 4102 on node 10.0.0.1

Warnings
========

TIMEOUT
  Encountered 3 communication timeouts while gathering communicator data

#0-0 (000b0e9c1d77a2f4) MISMATCH
  Communicator ranks have different status
  13 ranks have status RUNNING
  Rank 13 has status NOCOMM -- GPU 5 managed by process 4300 on node 10.0.0.2
  Communicator ranks have different AllReduce operation counts
  10 ranks have launched up to operation 42
  2 ranks have launched up to operation 41
  Rank 1 -- GPU 1 managed by process 4096 on node 10.0.0.1
  Rank 2 -- GPU 2 managed by process 4097 on node 10.0.0.1
  Rank 3 has not launched any operations -- GPU 3 managed by process 4098 on node 10.0.0.1
  Communicator ranks have different Broadcast operation counts
  12 ranks have not launched any operations
  Rank 4 has launched up to operation 1 -- [process information not found]

#1-0 (ffffffffffffffff) MISMATCH
  Communicator ranks have different status
  Rank 0 has status ABORT -- GPU 0 managed by process 1 on node h
  Rank 1 has status RUNNING -- GPU 1 managed by process 2 on node h
  Some future line we do not know
#9-9 (abc) NEWKIND
  Rank 0 -- GPU 0 managed by process 1 on node h
`

func TestParseTextAllBlocks(t *testing.T) {
	got, err := ParseText([]byte(textAllBlocks))
	if err != nil {
		t.Fatal(err)
	}
	want := &snapshot.RAS{
		Version: "2.27.7+cuda12.9", Format: "text", Dead: 2, Unresp: 1, Timeouts: 3,
		Comms: []snapshot.RASComm{
			{
				Hash: "0xb0e9c1d77a2f4", Size: 16, Status: "RUNNING", Partial: true,
				Missing: []int{11, 12, 13}, Unresp: []int{11, 12},
				Errors: map[int]string{5: "init:ncclInvalidUsage", 6: "async:ncclRemoteError", 7: "async:ncclRemoteError"},
				Funcs: map[string]map[int]int64{
					"AllReduce": {1: 41, 2: 41, 3: 0},
					"Broadcast": {4: 1},
				},
				Groups: []snapshot.RASGroup{
					{Func: "AllReduce", Ranks: 10, Count: 42},
					{Func: "AllReduce", Ranks: 2, Count: 41},
					{Func: "Broadcast", Ranks: 12, Count: 0},
				},
			},
			{Hash: "0xffffffffffffffff", Size: 2, Status: "ABORT", Partial: true},
			{Hash: "0xabc", Partial: true},
		},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("got\n%s\nwant\n%s", g, w)
	}
}

func TestParseTextErrors(t *testing.T) {
	full := loadCapture(t, filepath.Join(capturesDir, "multicomm_silent", "ras.hang6s.text.txt"))
	cut := full[:bytes.Index(full, []byte("Errors"))]
	for _, tc := range []struct {
		name      string
		in        []byte
		truncated bool
		partial   bool // a report comes back despite the error
	}{
		{"empty", nil, false, false},
		{"error line", []byte("ERROR: Unknown command STATUS\n"), false, false},
		{"http", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), false, false},
		{"cut before Errors", cut, true, true},
		{"crlf", bytes.ReplaceAll(full, []byte("\n"), []byte("\r\n")), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := ParseText(tc.in)
			if tc.name == "crlf" {
				if err != nil || len(rep.Comms) != 3 {
					t.Fatalf("crlf report: %v, %+v", err, rep)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error for %q", tc.in)
			}
			if errors.Is(err, ErrTruncated) != tc.truncated {
				t.Errorf("error %v: truncated = %v, want %v", err, !tc.truncated, tc.truncated)
			}
			if (rep != nil) != tc.partial {
				t.Errorf("report %+v, want one: %v", rep, tc.partial)
			}
		})
	}
}

const jsonSynthetic = `{
  "nccl_version": "2.29.1",
  "communicators_count": 1,
  "new_top_level_field": {"x": [1, 2, 3]},
  "communicators": [
    {
      "hash": "0x000ABC",
      "size": 4,
      "ranks": [
        {"rank": 0, "host": "10.0.0.1", "pid": 10,
         "status": {"init_state": 0, "async_error": 6, "finalize_called": false, "destroy_flag": false, "abort_flag": true},
         "collective_counts": {"Broadcast": 1, "Reduce": 0, "AllGather": 0, "ReduceScatter": 0, "AllReduce": 5, "AllToAll": 2}},
        {"rank": 1, "host": "10.0.0.2", "pid": 10, "future": true,
         "status": {"init_state": 3, "async_error": 0},
         "collective_counts": {"Broadcast": 1, "AllReduce": 4}}
      ],
      "missing_ranks": [
        {"rank": 3, "host": "10.0.0.3", "pid": 30, "status": {"unresponsive": true, "considered_dead": true}},
        {"rank": 2, "host": "10.0.0.3", "pid": 31, "status": {"unresponsive": true, "considered_dead": false}}
      ]
    },
    {
      "hash": "0x1",
      "size": 2,
      "ranks": [],
      "missing_ranks": [
        {"rank": 0, "host": "10.0.0.3", "pid": 30, "status": {"unresponsive": true, "considered_dead": true}},
        {"rank": 1, "host": "10.0.0.1", "pid": 10, "status": {"unresponsive": false, "considered_dead": false}}
      ]
    }
  ],
  "ras": {"collection_time_sec": 5.001, "timeouts_count": 2}
}`

func TestParseJSONSynthetic(t *testing.T) {
	got, err := ParseJSONKeep([]byte(jsonSynthetic), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &snapshot.RAS{
		Version: "2.29.1", Format: "json", Dead: 1, Unresp: 1, Timeouts: 2,
		Comms: []snapshot.RASComm{
			{
				Hash: "0xabc", Size: 4, Status: "ABORT",
				Missing: []int{2, 3}, Unresp: []int{2, 3}, Dead: []int{3},
				Counts: map[int]int64{0: 8, 1: 5},
				Funcs: map[string]map[int]int64{
					"Broadcast": {0: 1, 1: 1},
					"AllReduce": {0: 5, 1: 4},
					"AllToAll":  {0: 2},
				},
				Errors: map[int]string{0: "async:ncclRemoteError", 1: "init:ncclInternalError"},
			},
			{Hash: "0x1", Size: 2, Missing: []int{0, 1}, Unresp: []int{0}, Dead: []int{0}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("got\n%s\nwant\n%s", g, w)
	}

	kept, err := ParseJSONKeep([]byte(jsonSynthetic), func(host string, pid int) bool { return host == "10.0.0.2" })
	if err != nil {
		t.Fatal(err)
	}
	c := kept.Comms[0]
	if !reflect.DeepEqual(c.Counts, map[int]int64{1: 5}) || len(c.Funcs["Broadcast"]) != 1 || !slices.Equal(c.Missing, []int{2, 3}) {
		t.Errorf("Keep: counts %v funcs %v missing %v", c.Counts, c.Funcs, c.Missing)
	}
}

func TestParseJSONErrors(t *testing.T) {
	full := loadCapture(t, filepath.Join(capturesDir, "multicomm", "ras.healthy.json.txt"))
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"truncated", string(full[:len(full)/2]), false},
		{"empty", "", false},
		{"not json", "NCCL version 2.28.9\n", false},
		{"other object", `{"hello": 1}`, false},
		{"wrong types skipped", `{"nccl_version": "2.28.9", "communicators": [{"hash": 5, "size": "x", "ranks": [{"rank": 0, "collective_counts": {"AllReduce": -1, "Broadcast": 2}}]}], "ras": {"timeouts_count": "many"}}`, true},
		{"preamble", "# a comment\n" + string(full), true},
		{"trailing garbage", string(full) + "}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := ParseJSONKeep([]byte(tc.in), nil)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if err == nil && rep == nil {
				t.Fatal("nil report without error")
			}
		})
	}
}
