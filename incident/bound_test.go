package incident

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// MismatchAt is a collective mismatch as the rules report one on a job of n ranks: every
// rank's op at the position (one per rank), the culprits named and a line of evidence each.
// distinct says how many signatures the ranks issued (1 culprit per signature but the first).
func mismatchAt(n, culprits, distinct int) Incident {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	inc := Incident{ID: "inc-100k", Key: "mismatch:comm:0x1", Kind: KindMismatch, State: StateOpen, Severity: SeverityCritical,
		Job: "llama-405b", Comm: "0x9e1c4f2b7a3d5e60", Seq: 1842, Victims: n - culprits,
		Summary: fmt.Sprintf("ranks disagree at collective #1842 on a communicator of %d ranks", n),
		Ops:     map[string]Op{}, OpenedAt: t0, LastSeen: t0, Revision: 1}
	for r := range n {
		op := Op{Op: "AllReduce", Count: 1048576, Datatype: "bf16", RedOp: "sum"}
		if r%max(n/distinct, 1) == 0 && r > 0 {
			op = Op{Op: "AllGather", Count: uint64(4096 + r), Datatype: "bf16"}
		}
		inc.Ops[strconv.Itoa(r)] = op
	}
	for r := range culprits {
		long := ""
		if r < 100 {
			long = strings.Repeat("…", 300) // near the text cap: the whole must still fit
		}
		inc.Culprits = append(inc.Culprits, Culprit{Rank: r, Host: fmt.Sprintf("gpu-node-%05d.cluster.example.com", r/8), PID: 40000 + r, GPU: strconv.Itoa(r % 8)})
		inc.Evidence = append(inc.Evidence, fmt.Sprintf("rank %d on gpu-node-%05d issued AllGather(count %d bf16) at collective #1842 where its peers issued AllReduce(count 1048576 bf16 sum) %s",
			r, r/8, 4096+r, long))
	}
	return inc
}

// TestBoundAt100kRanks: whatever a rule names at 100k ranks, the bounded incident stays
// under MaxJSONBytes (the raw one is megabytes), keeps its identity and says what it left out.
func TestBoundAt100kRanks(t *testing.T) {
	for _, c := range []struct {
		name                string
		culprits, distinct  int
		wantGroups, wantOps int
	}{
		{"one culprit", 1, 2, 2, 0},
		{"every rank named, each its own signature", 100000, 100000, MaxOpGroups, 0},
		{"half the ranks", 50000, 2, 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := mismatchAt(100000, c.culprits, c.distinct)
			b := Bound(raw)
			js, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("bounded %d KB: %d groups, %d culprits, %d evidence lines, omitted %+v", len(js)>>10, len(b.OpGroups), len(b.Culprits), len(b.Evidence), *b.Omitted)
			if len(js) > MaxJSONBytes {
				t.Errorf("bounded JSON %d bytes > %d", len(js), MaxJSONBytes)
			}
			if b.ID != raw.ID || b.Key != raw.Key || b.Job != raw.Job || b.Seq != raw.Seq || b.Victims != raw.Victims {
				t.Errorf("identity changed: %+v", b)
			}
			if len(b.Ops) != c.wantOps || len(b.OpGroups) != c.wantGroups {
				t.Errorf("%d ops, %d groups; want %d and %d", len(b.Ops), len(b.OpGroups), c.wantOps, c.wantGroups)
			}
			ranks := b.Omitted.OpRanks
			for _, g := range b.OpGroups {
				ranks += g.Ranks
				if len(g.Examples) == 0 || len(g.Examples) > MaxOpExamples {
					t.Errorf("group %+v: %d examples", g.Op, len(g.Examples))
				}
			}
			if ranks != 100000 {
				t.Errorf("groups and omitted count %d ranks, want 100000", ranks)
			}
			if got := len(b.Culprits) + b.Omitted.Culprits; got != c.culprits {
				t.Errorf("culprits kept + omitted = %d, want %d", got, c.culprits)
			}
			if again := Bound(b); !reflect.DeepEqual(again, b) {
				t.Errorf("bounding twice changed it")
			}
		})
	}
}

// TestBoundSmallIsUnchanged: an incident within every cap is kept as it is (its ops per
// rank, no Omitted), as a copy the caller may change.
func TestBoundSmallIsUnchanged(t *testing.T) {
	inc := mismatchAt(8, 1, 2)
	inc.Evidence[0] = "rank 0 issued AllGather"
	b := Bound(inc)
	if !reflect.DeepEqual(b, inc) {
		t.Fatalf("changed:\n%+v\n%+v", b, inc)
	}
	b.Ops["0"] = Op{Op: "changed"}
	b.Culprits[0].Host = "changed"
	if inc.Ops["0"].Op == "changed" || inc.Culprits[0].Host == "changed" {
		t.Error("Bound shares its maps or slices with its input")
	}
}

// TestBoundGroupsInRankOrder: examples are the lowest ranks of each signature, in rank
// (not text) order, the most common signature first.
func TestBoundGroupsInRankOrder(t *testing.T) {
	inc := Incident{Ops: map[string]Op{}}
	for r := range 40 {
		op := Op{Op: "AllReduce", Count: 8}
		if r == 3 || r == 17 || r == 30 {
			op.Count = 9
		}
		inc.Ops[strconv.Itoa(r)] = op
	}
	b := Bound(inc)
	want := []OpGroup{{Op: Op{Op: "AllReduce", Count: 8}, Ranks: 37, Examples: []string{"0", "1", "2", "4", "5"}},
		{Op: Op{Op: "AllReduce", Count: 9}, Ranks: 3, Examples: []string{"3", "17", "30"}}}
	if !reflect.DeepEqual(b.OpGroups, want) || b.Ops != nil {
		t.Errorf("groups %+v ops %v", b.OpGroups, b.Ops)
	}
}

func TestTruncateKeepsRunes(t *testing.T) {
	cut := 0
	for n := 0; n < 20; n++ {
		s := truncate(strings.Repeat("é🔥", 10), n, &cut)
		if !utf8.ValidString(s) || len(s) > n {
			t.Errorf("truncate to %d: %q (%d bytes)", n, s, len(s))
		}
	}
}

// TestRoughSizeBoundsTheJSON: the estimate that lets Bound skip encoding small incidents
// is never below the real size, whatever the strings hold.
func TestRoughSizeBoundsTheJSON(t *testing.T) {
	hostile := strings.Repeat("\x01<>&\"\\\u2028é", 50)
	for _, inc := range []Incident{mismatchAt(8, 1, 2), mismatchAt(40, 3, 3), {ID: hostile, Key: hostile, Summary: hostile,
		Culprits: []Culprit{{Host: hostile, GPU: hostile, Port: hostile}}, Evidence: []string{hostile, hostile},
		Ops:      map[string]Op{hostile: {Op: hostile, Datatype: hostile, RedOp: hostile, Count: 1 << 63, Root: -1 << 62}},
		OpGroups: []OpGroup{{Op: Op{Op: hostile}, Ranks: 1 << 40, Examples: []string{hostile}}}, Omitted: &Omitted{Culprits: 1 << 50, Evidence: 1 << 50, OpGroups: 1, OpRanks: 1, Text: 1},
		LagSeconds: -1.234567890123e-300, Seq: -1 << 62, Victims: 1 << 62, Revision: 1 << 62, Cause: Cause(hostile),
		ResolvedAt: &time.Time{}, Episode: &Episode{Onset: time.Now(), End: time.Now(), LostShare: -1.234567890123e-300, Lost: -1 << 62, Steps: -1 << 62}}} {
		if r, s := roughSize(inc), size(inc); r < s {
			t.Errorf("rough size %d < JSON size %d", r, s)
		}
	}
}
