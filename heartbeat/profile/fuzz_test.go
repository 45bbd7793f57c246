package profile

import (
	"encoding/json"
	"testing"
)

// FuzzDecode: no input makes Decode panic, and what it accepts is self-consistent.
func FuzzDecode(f *testing.F) {
	m := newImage(2, 2)
	m.comm(0, 0x1234)
	m.comm(1, 0x5678)
	f.Add(m.b)
	f.Add(m.b[:headerSize])
	f.Add(m.b[:20])
	one := newImage(1, 1)
	f.Add(one.b)
	le.PutUint32(one.b[hdrLayoutVersion:], 2)
	f.Add(one.b)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			if r != nil {
				t.Fatalf("a region with an error: %v", err)
			}
			return
		}
		maxComms := int(u32(b, hdrMaxComms))
		if len(r.Comms)+len(r.Busy) > maxComms {
			t.Fatalf("%d comms and %d busy slots of %d", len(r.Comms), len(r.Busy), maxComms)
		}
		for _, c := range r.Comms {
			if len(c.Peers) > int(u32(b, hdrMaxPeers)) {
				t.Fatalf("%d peers", len(c.Peers))
			}
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("region does not marshal: %v", err)
		}
	})
}
