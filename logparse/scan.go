package logparse

import (
	"bytes"
	"unsafe"
)

// scanner walks a message left to right. Every method reports failure through ok=false and
// leaves the position unspecified; callers give up on the line kind then.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) rest() []byte { return s.b[s.i:] }

// lit consumes a literal.
func (s *scanner) lit(p string) bool {
	if len(s.b)-s.i < len(p) || string(s.b[s.i:s.i+len(p)]) != p {
		return false
	}
	s.i += len(p)
	return true
}

// word consumes bytes up to (not including) the next space or the end.
func (s *scanner) word() []byte {
	j := s.i
	for j < len(s.b) && s.b[j] != ' ' {
		j++
	}
	w := s.b[s.i:j]
	s.i = j
	return w
}

// peer consumes a word naming a peer, "10.0.0.7<43125>" or "host<43125>", without what a
// poster's quoting glued after its port ("10.0.0.7<43125>`.").
func (s *scanner) peer() []byte {
	w := s.word()
	if gt := bytes.LastIndexByte(w, '>'); gt > 0 && bytes.IndexByte(w, '<') >= 0 {
		return w[:gt+1]
	}
	return w
}

func (s *scanner) space() bool { return s.lit(" ") }

// dec consumes an optionally signed decimal integer of at most 18 digits.
func (s *scanner) dec() (int64, bool) {
	b, i := s.b, s.i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var v int64
	for ; i < len(b) && i-start < 19; i++ {
		c := b[i] - '0'
		if c > 9 {
			break
		}
		v = v*10 + int64(c)
	}
	if i == start || i-start > 18 {
		return 0, false
	}
	s.i = i
	if neg {
		v = -v
	}
	return v, true
}

func (s *scanner) int() (int, bool) {
	v, ok := s.dec()
	return int(v), ok
}

// hex consumes hex digits (no prefix).
func (s *scanner) hex() (uint64, bool) {
	start := s.i
	var v uint64
	for s.i < len(s.b) {
		c := s.b[s.i]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return v, s.i > start && s.i-start <= 16
		}
		v = v<<4 | uint64(d)
		s.i++
	}
	return v, s.i > start && s.i-start <= 16
}

// ptr consumes a %p value: 0x... or (nil).
func (s *scanner) ptr() (uint64, bool) {
	if s.lit("(nil)") {
		return 0, true
	}
	if !s.lit("0x") {
		return 0, false
	}
	return s.hex()
}

// skipTo advances past the next occurrence of p.
func (s *scanner) skipTo(p string) bool {
	j := bytes.Index(s.b[s.i:], bytesOf(p))
	if j < 0 {
		return false
	}
	s.i += j + len(p)
	return true
}

// field consumes "name value" where value is a decimal: e.g. "rank 3".
func (s *scanner) field(name string) (int64, bool) {
	if !s.lit(name) || !s.space() {
		return 0, false
	}
	return s.dec()
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

func hasSuffix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[len(b)-len(p):]) == p
}

func contains(b []byte, p string) bool { return bytes.Contains(b, bytesOf(p)) }

func index(b []byte, p string) int { return bytes.Index(b, bytesOf(p)) }

// bytesOf lets the bytes package search for a string without the copy that converting it
// makes on every call; the searches only read it.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// atoi parses a whole slice as a non-negative decimal.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	v := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}
