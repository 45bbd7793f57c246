package logparse

import (
	"strconv"
	"testing"
)

// plainDec and plainHex are the byte-at-a-time readings the word-at-a-time ones must match.
func plainDec(b []byte, i int) (uint64, int, int) {
	start := i
	var v uint64
	for i < len(b) && isDigit(b[i]) && i-start < 20 {
		v = v*10 + uint64(b[i]-'0')
		i++
	}
	return v, i, i - start
}

func plainHex(b []byte, i int) (uint64, int, int) {
	s := scanner{b: b, i: i}
	v, _ := s.hex()
	n := s.i - i
	if n > 17 {
		n = 17
	}
	return v, s.i, n
}

func checkNumbers(t *testing.T, b []byte) {
	t.Helper()
	for i := 0; i <= len(b); i++ {
		v, end, n := swarDec(b, i)
		pv, pend, pn := plainDec(b, i)
		if n != pn || (n < 20 && (v != pv || end != pend)) {
			t.Fatalf("swarDec(%q, %d) = %d,%d,%d; want %d,%d,%d", b, i, v, end, n, pv, pend, pn)
		}
		v, end, n = swarHex(b, i)
		pv, pend, pn = plainHex(b, i)
		if n != pn || (n <= 16 && (v != pv || end != pend)) {
			t.Fatalf("swarHex(%q, %d) = %x,%d,%d; want %x,%d,%d", b, i, v, end, n, pv, pend, pn)
		}
		for _, c := range []byte{' ', ':', ']'} {
			want := -1
			for k := i; k < len(b) && k < i+16; k++ {
				if b[k] == c {
					want = k - i
					break
				}
			}
			if got := indexByte16(b, i, c); got != want {
				t.Fatalf("indexByte16(%q, %d, %q) = %d; want %d", b, i, c, got, want)
			}
		}
	}
}

func TestWordAtATimeNumbers(t *testing.T) {
	cases := []string{
		"", "0", "9 ", "12345678", "123456789", "1234567 ", "99999999999999999999 x",
		"1844674407370955161 ", "0x7faa1f440000 ", "ffffffffffffffff]", "1ffffffffffffffff ",
		"aBcDeF09/:@`gG ", "\x00\x10\x19\x39\x3a\x40\x41\x46\x47\x60\x61\x66\x67\x7f\x80\xb0\xc1\xff",
		"count 16384 datatype 7 op 0 root 0 comm 0x10d842d0 [nranks=2] stream (nil)",
	}
	for k := 0; k < 64; k++ {
		cases = append(cases, strconv.FormatUint(uint64(1)<<k-1, 10)+" ", strconv.FormatUint(uint64(1)<<k-1, 16)+"]")
	}
	for _, c := range cases {
		checkNumbers(t, []byte(c))
	}
}

func FuzzWordAtATimeNumbers(f *testing.F) {
	f.Add([]byte("0x7faa1f440000 count 16384 datatype 7"))
	f.Add([]byte("\x3a\x40\x47\x60\x67 123"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// checkNumbers reads from every offset: keep each run short.
		checkNumbers(t, b[:min(len(b), 256)])
	})
}

func TestEqualAt(t *testing.T) {
	a := []byte("a-very-long-hostname-of-a-big-cluster-node-0001:123456:123457 rest")
	for n := 0; n <= 61; n++ {
		if !equalAt(a, 0, a, n) {
			t.Fatalf("n=%d: equal prefixes differ", n)
		}
		for k := 0; k < n; k++ {
			b := append([]byte(nil), a...)
			b[k] ^= 1
			if equalAt(b, 0, a, n) {
				t.Fatalf("n=%d: byte %d differs, reported equal", n, k)
			}
		}
	}
}
