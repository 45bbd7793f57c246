package snapshot

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestCompactRoundTrip(t *testing.T) {
	c := Comm{ID: "0xabc/s1c7", Ptr: "0x1", Rank: 3, NRanks: 8, State: "ready", Count: 1002,
		Recent: Ops{
			{Seq: 1000, Op: "AllGather", Count: 4194304, Dtype: "bfloat16", T: 1795306000123456},
			{Seq: 1001, Op: "ReduceScatter", Count: 4194304, Dtype: "bfloat16", Red: "sum", T: 1795306000125000},
			{Seq: 1002, Op: "Broadcast", Count: 7, Dtype: "float8e5m2", Root: 3, T: 1795306000120000},
			{Seq: 1010, Op: "Mystery", Count: 1, Dtype: "unknown", Red: "user", T: 1795306000130000},
		},
		Marks: Marks{{Seq: 992, Digest: "9f3a", T: 1795306000100000}, {Seq: 1008, Digest: "77", T: 1795306000129000}},
		P2P:   []P2P{{Peer: 2, Sends: 5, Recvs: 4}},
	}
	last := c.Recent[len(c.Recent)-1]
	c.Last = &last
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"last"`) {
		t.Errorf("Last should be left out when it is the newest recent op: %s", b)
	}
	var back Comm
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip:\n got %+v\nwant %+v\nwire %s", back, c, b)
	}
	plain, err := json.Marshal([]Op(c.Recent))
	if err != nil {
		t.Fatal(err)
	}
	compact, err := json.Marshal(c.Recent)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("4 ops: %d bytes compact, %d as JSON objects: %s / %s", len(compact), len(plain), compact, plain)
	if len(compact)*2 > len(plain) {
		t.Errorf("compact ops %d bytes, not under half of %d", len(compact), len(plain))
	}
	// Older writers' arrays are still read.
	var ops Ops
	if err := json.Unmarshal(plain, &ops); err != nil || len(ops) != 4 {
		t.Fatalf("plain array: %v %v", ops, err)
	}
}

func TestCompactRejectsGarbage(t *testing.T) {
	for _, s := range []string{`"1,2"`, `"x,2,AR,1,f32"`, `"1,2,AR,notanumber,f32"`, `"1,2,AR,1,f32,sum,root"`, `7`} {
		var ops Ops
		if err := json.Unmarshal([]byte(s), &ops); err == nil {
			t.Errorf("%s: want an error", s)
		}
	}
}

func FuzzOps(f *testing.F) {
	f.Add(`"1000,1795306000123456,AG,4194304,bf16;,1544,RS,4194304,bf16,sum;8,5000,BC,7,e5m2,,3"`)
	f.Add(`"5,1,AR,1,f32"`)
	f.Fuzz(func(t *testing.T, s string) {
		var ops Ops
		if json.Unmarshal([]byte(s), &ops) != nil {
			return
		}
		b, err := json.Marshal(ops)
		if err != nil {
			return // an op name holding a separator cannot be written back
		}
		var again Ops
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("re-read %s: %v", b, err)
		}
		if !reflect.DeepEqual(again, ops) && len(ops) > 0 {
			t.Fatalf("round trip of %q: %+v vs %+v", s, ops, again)
		}
	})
}

func TestEncodeDecode(t *testing.T) {
	n := &Node{Job: "j", Node: "n", Processes: []Process{{Host: "n", PID: 1, Comms: []Comm{{ID: "0x1", Count: 1,
		Recent: Ops{{Seq: 1, Op: "AllReduce", Count: 2, Dtype: "float32", Red: "sum", T: 5}}}}}}}
	b, err := Encode(n)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Processes[0].Comms[0].Last == nil || back.Processes[0].Comms[0].Last.Seq != 1 {
		t.Fatalf("decoded %+v", back.Processes[0].Comms[0])
	}
	if _, err := Decode([]byte(`{"v":1}`)); err == nil {
		t.Fatal("an older schema must be refused")
	}
}
