package logparse

import (
	"bytes"
	"strings"
	"testing"
)

func TestSecondPrefixes(t *testing.T) {
	pad := strings.Repeat(" ", 40)
	for _, tc := range []struct {
		name, msg string
		want      []Second // Token as its string in want.Token
	}{
		{"per-op line", "AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x55 [nranks=2] stream (nil)", nil},
		{"padded terminal copy", "proxy.cc:1 -> 6" + pad + "gpu7:42:43 [0] NCCL INFO Using network IB", []Second{{At: 15 + 40, Padded: true}}},
		{"padded, with file:line", "x" + pad + "gpu7:42:43 [0] misc/socket.cc:71 NCCL WARN bad", []Second{{At: 41, Padded: true}}},
		{"glued to a cut line", "AllReduce: opCount 1 sendbuff 0x1 recvbgpu7:42:43 [0] NCCL INFO AllReduce: opCount 2", []Second{{At: 34, Token: []byte("recvbgpu7:42:43"), PID: 42, HostEnd: 9}}},
		{"glued, no device", "Init Cgpu7:42:43 NCCL INFO x", []Second{{At: 5, Token: []byte("Cgpu7:42:43"), PID: 42, HostEnd: 5}}},
		{"word NCCL in a sentence", "failed: see NCCL INFO output for details", nil},
		{"not a pid", "x gpu7:ab:43 [0] NCCL WARN y", nil},
		{"two", "a" + pad + "h:1:2 [0] NCCL INFO b" + pad + "h:1:2 [0] NCCL INFO c", []Second{{At: 41, Padded: true}, {At: 41 + 21 + 40, Padded: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Second
			for s := range SecondPrefixes([]byte(tc.msg)) {
				got = append(got, s)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.At != w.At || g.Padded != w.Padded || !bytes.Equal(g.Token, w.Token) || g.PID != w.PID || g.HostEnd != w.HostEnd {
					t.Errorf("%d: got %+v (token %q), want %+v (token %q)", i, g, g.Token, w, w.Token)
				}
			}
		})
	}
	s := Second{Token: []byte("recvbgpu7:42:43"), PID: 42, HostEnd: 9}
	if at, ok := s.GluedAt("gpu7"); !ok || at != 5 {
		t.Errorf("GluedAt(gpu7) = %d, %v; want 5", at, ok)
	}
	if _, ok := s.GluedAt("gpu8"); ok {
		t.Error("GluedAt(gpu8) found a host the token does not end with")
	}
	if _, ok := s.GluedAt("longerthanthetokenhost"); ok {
		t.Error("GluedAt found a host longer than the token")
	}
}

func TestCollHead(t *testing.T) {
	for m, want := range map[string]bool{
		"AllReduce: opCount 3 sendbuff 0x7f": true,
		"AllReduce: opC":                     true,
		"AllReduce: opCount":                 true,
		"Channel 00/02 : 0 1":                false,
		"ReallyLongOperationName: opCount 1": false,
		"AllReduce: something else":          false,
		": opCount 1":                        false,
	} {
		if got := CollHead([]byte(m)); got != want {
			t.Errorf("CollHead(%q) = %v, want %v", m, got, want)
		}
	}
}

// TestUnwrapper feeds lines a terminal broke at 100 columns: once the width is learnt (three
// breaks), broken lines come back whole; a longer line turns it off.
func TestUnwrapper(t *testing.T) {
	head := "gpu7:42:43 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<35417> with status=12 opcode=0 l"
	if len(head) != 100 {
		t.Fatalf("head is %d bytes", len(head))
	}
	tail := "en=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1"
	var in []string
	for range 5 {
		in = append(in, head, tail)
	}
	in = append(in, "gpu7:42:43 [0] NCCL INFO short line", strings.Repeat("z", 120), head, tail)
	var u Unwrapper
	var out []string
	var l Line
	for _, raw := range in {
		u.Next([]byte(raw), func(b []byte) {
			Parse(b, &l)
			u.Learn(&l, b)
			out = append(out, string(b))
		})
	}
	u.Flush(func(b []byte) { out = append(out, string(b)) })
	whole := head + tail
	want := []string{head, tail, head, tail, head, tail, whole, whole, "gpu7:42:43 [0] NCCL INFO short line", strings.Repeat("z", 120), head, tail}
	if strings.Join(out, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(out, "\n"), strings.Join(want, "\n"))
	}
}

// FuzzSecondPrefixes checks that every place found lies in the message and that a glued
// token's host split is safe for any host.
func FuzzSecondPrefixes(f *testing.F) {
	for _, l := range seedLines(f) {
		f.Add(l, "gpu7")
	}
	f.Add([]byte("a"+strings.Repeat(" ", 40)+"h:1:2 [0] NCCL INFO b"), "h")
	f.Add([]byte("AllReduce: opCount 1 sendbuff 0x1 recvbgpu7:42:43 [0] NCCL INFO AllReduce: opCount 2"), "gpu7")
	f.Add([]byte(" NCCL WARN :1:2 NCCL INFO"), "")
	f.Fuzz(func(t *testing.T, m []byte, host string) {
		prev := -1
		for s := range SecondPrefixes(m) {
			if s.At < 0 || s.At > len(m) || s.At < prev {
				t.Fatalf("place %d out of order or range (message of %d)", s.At, len(m))
			}
			prev = s.At
			if !s.Padded {
				if s.HostEnd < 0 || s.HostEnd > len(s.Token) {
					t.Fatalf("host end %d outside token %q", s.HostEnd, s.Token)
				}
				if at, ok := s.GluedAt(host); ok && (at < 0 || at > s.HostEnd) {
					t.Fatalf("glued host at %d outside token %q", at, s.Token)
				}
			}
		}
	})
}

// FuzzUnwrapper feeds arbitrary lines: what comes out is what went in, in order, some
// lines joined, none lost.
func FuzzUnwrapper(f *testing.F) {
	h := "gpu7:42:43 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<35417> with status=12 opcode=0 l"
	f.Add([]byte(strings.Repeat(h+"\nen=0 vendor err 129\n", 5)))
	f.Add([]byte(strings.Repeat(strings.Repeat("x", 90)+"\nyy\n", 4) + strings.Repeat("x", 95) + "\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		var u Unwrapper
		var l Line
		var out []byte
		emit := func(b []byte) {
			Parse(b, &l)
			u.Learn(&l, b)
			out = append(out, bytes.TrimRight(b, "\r\n")...)
		}
		var in []byte
		for _, line := range bytes.SplitAfter(text, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			in = append(in, bytes.TrimRight(line, "\r\n")...)
			u.Next(line, emit)
		}
		u.Flush(emit)
		if !bytes.Equal(in, out) {
			t.Fatalf("bytes changed:\n in  %q\n out %q", in, out)
		}
	})
}
