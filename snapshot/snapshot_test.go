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
	f.Add(`"5,1,AR,1,f32,sum,0,9;,2,AG,1,bf16,,0,3;1,2,AR,1,f32"`)
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

func TestCompactOpsCarryTheIssueIndex(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  Ops
	}{
		{"every op indexed", Ops{{Seq: 7, Op: "AllReduce", Count: 2, Dtype: "float32", Red: "sum", T: 100, Idx: 20},
			{Seq: 8, Op: "Broadcast", Count: 2, Dtype: "float32", Root: 3, T: 150, Idx: 23},
			{Seq: 9, Op: "AllGather", Count: 2, Dtype: "bfloat16", T: 160, Idx: 24}}},
		{"an op without one between", Ops{{Seq: 1, Op: "AllReduce", Count: 1, Dtype: "float32", T: 1, Idx: 5},
			{Seq: 2, Op: "AllReduce", Count: 1, Dtype: "float32", T: 2},
			{Seq: 3, Op: "AllReduce", Count: 1, Dtype: "float32", T: 3, Idx: 9}}},
		{"none (older writers)", Ops{{Seq: 1, Op: "AllReduce", Count: 1, Dtype: "float32", T: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.ops)
			if err != nil {
				t.Fatal(err)
			}
			var back Ops
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			if !reflect.DeepEqual(back, c.ops) {
				t.Fatalf("%s read back as %+v", b, back)
			}
		})
	}
}

// TestEncodeShedsPeersBeforeEvents: a node too large for MaxNodeBytes loses recent ops, then
// the plugin's peer rows, and only then events; counts and ops in flight always stay.
func TestEncodeShedsPeersBeforeEvents(t *testing.T) {
	big := func(peers, events int) *Node {
		var p Process
		p.Host, p.PID = "n", 1
		c := Comm{ID: "0x1", Count: 9, Done: &Completion{Issued: 9, Done: 8,
			InFlight: &Flight{Op: Op{Seq: 9, Op: "AllReduce", Count: 1, Dtype: "float32", T: 1}, GPUStart: 2}}}
		for i := 0; i < peers; i++ {
			c.Done.Peers = append(c.Done.Peers, PeerProgress{Peer: i, Dir: DirSend, Steps: 100, StepsDone: 99,
				State: ProxySendPeerWait, StateAt: 123456789, LastStep: 123456789, Open: 1})
		}
		for i := 0; i < 200; i++ {
			p.Comms = append(p.Comms, c)
		}
		for i := 0; i < events; i++ {
			p.Events = append(p.Events, Event{Kind: EventWarn, Msg: strings.Repeat("w", MaxMsg)})
		}
		return &Node{Job: "j", Node: "n", Processes: []Process{p}}
	}
	for _, c := range []struct {
		name       string
		node       *Node
		shed       string
		peers, evs bool
	}{
		{"fits", big(1, 1), "", true, true},
		{"peers go", big(MaxPeers, 10), "recent,peers", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := Encode(c.node)
			if err != nil {
				t.Fatal(err)
			}
			n, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			comm := n.Processes[0].Comms[0]
			if n.Shed != c.shed || (len(comm.Done.Peers) > 0) != c.peers || (len(n.Processes[0].Events) > 0) != c.evs ||
				comm.Done.InFlight == nil || comm.Done.Done != 8 {
				t.Fatalf("%d bytes, shed %q, %d peers, %d events, done %+v", len(b), n.Shed, len(comm.Done.Peers),
					len(n.Processes[0].Events), comm.Done)
			}
		})
	}
}
