package logparse

import "bytes"

// The per-op line is most of a production log (hundreds of thousands per rank per hour), so
// it has a dedicated path: one left-to-right pass with plain index arithmetic, reading
// eight bytes per load where it can, that accepts exactly the layout NCCL prints (RCCL's
// trailing fields too). Parse tries it first with the common prefix; the general path uses
// it for other prefixes. fast_test.go checks it against a token-by-token reading.

// hotColl parses, into l.Coll only, "<Op>: opCount <hex> sendbuff <p> recvbuff <p> count <u> datatype <d> op <d>
// root <d> comm <p> [nranks=<d>]" starting at msg. Each field's usual shape (a number
// that ends within one word, one-digit datatype, op and root) is read inline, eight bytes
// per load; anything else falls back to the general readers.
func hotColl(m []byte, l *Line) bool {
	if len(m) < 16 {
		return false
	}
	// Op name up to ':' (op names are at most 13 bytes).
	i := firstMarked(byteMask(load8(m, 0), ':'))
	if i == 8 {
		i += firstMarked(byteMask(load8(m, 8), ':'))
	}
	if i == 0 || i == 16 || i+11 > len(m) || string(m[i:i+10]) != ": opCount " {
		return false
	}
	c := &l.Coll
	c.OpName = m[:i]
	c.Op = ParseOpName(c.OpName)
	j := i + 10
	var n int
	if j+8 <= len(m) {
		x := load8(m, j)
		if n = firstMarked(nonHexDigits(x)); n > 0 && n < 8 {
			c.OpCount, j = hex8(x, n), j+n
		} else {
			n = 0
		}
	}
	if n == 0 {
		if c.OpCount, j, n = swarHex(m, j); n == 0 || n > 16 {
			return false
		}
	}
	if j = skipBuffers(m, j); j < 0 {
		return false
	}
	n = 0
	if j+8 <= len(m) {
		x := load8(m, j)
		if n = firstMarked(nonDigits(x)); n > 0 && n < 8 {
			c.Count, j = decimal8(x, n), j+n
		} else {
			n = 0
		}
	}
	if n == 0 {
		if c.Count, j, n = swarDec(m, j); n == 0 || n >= 20 {
			return false
		}
	}
	if j+len(collTailText) <= len(m) && collTail.matches(m, j) {
		// " datatype <d> op <d> root <d> comm 0x" with one-digit numbers.
		c.Datatype = Datatype(m[j+10] - '0')
		c.RedOp = int64(m[j+15] - '0')
		c.Root = int(m[j+22] - '0')
		j += len(collTailText)
	} else if j = collTailFields(m, j, c); j < 0 {
		return false
	}
	n = 0
	if j+16 <= len(m) {
		x, y := load8(m, j), load8(m, j+8)
		cc := &l.cache.comm
		if cc.n > 0 && x&cc.mask[0] == cc.text[0] && y&cc.mask[1] == cc.text[1] {
			// The previous line's communicator, its terminator included.
			c.Comm, j, n = cc.value, j+cc.n, cc.n
		} else {
			switch n = firstMarked(nonHexDigits(x)); n {
			case 1, 2, 3, 4, 5, 6, 7:
				c.Comm = hex8(x, n)
			case 8: // pointers are mostly 8 to 12 digits
				if k := firstMarked(nonHexDigits(y)); k < 8 {
					c.Comm, n = hex8(x, 8)<<(4*k)|hex8(y, k), 8+k
				} else {
					n = 0
				}
			}
			if n > 0 {
				cc.remember(x, y, n, c.Comm)
				j += n
			}
		}
	}
	if n == 0 {
		if c.Comm, j, n = swarHex(m, j); n == 0 || n > 16 {
			return false
		}
	}
	// " [nranks=<d>]"
	if j+10 > len(m) || string(m[j:j+9]) != " [nranks=" {
		return false
	}
	nr, j, ok := hotInt(m, j+9)
	if !ok || j >= len(m) || m[j] != ']' {
		return false
	}
	c.NRanks = int(nr)
	return true
}

// wordCache remembers a number's text (up to 15 bytes, with the byte that ended it) and
// its value.
type wordCache struct {
	text, mask [2]uint64
	n          int
	value      uint64
}

func (w *wordCache) remember(x, y uint64, n int, v uint64) {
	if k := n + 1; k < 8 { // with the terminator, which must not extend the number
		w.mask = [2]uint64{1<<(8*k) - 1, 0}
	} else {
		w.mask = [2]uint64{^uint64(0), 1<<(8*(k-8)) - 1}
	}
	w.text = [2]uint64{x & w.mask[0], y & w.mask[1]}
	w.n, w.value = n, v
}

// collTailText is the usual text between the count and the communicator; each # stands
// for one digit.
const collTailText = " datatype # op # root # comm 0x"

var collTail = newTemplate(collTailText)

// template matches a 25 to 32 byte text with three wildcard digits: four word compares,
// then a test per wildcard.
type template struct {
	want, mask [4]uint64 // mask: 0xff for a literal byte, 0 for a digit
	last       int       // offset of the fourth word, which overlaps the third
	digits     [3]int    // offsets of the wildcards
}

func newTemplate(s string) template {
	t := template{last: len(s) - 8}
	b := []byte(s)
	lit := make([]byte, len(b))
	nd := 0
	for i := range b {
		lit[i] = 0xff
		if b[i] == '#' {
			if nd < len(t.digits) {
				t.digits[nd] = i
			}
			b[i], lit[i] = 0, 0
			nd++
		}
	}
	if len(s) < 25 || len(s) > 32 || nd != len(t.digits) {
		panic("template: 25 to 32 bytes with three wildcards")
	}
	for w, at := range [4]int{0, 8, 16, t.last} {
		t.want[w], t.mask[w] = load8(b, at), load8(lit, at)
	}
	return t
}

// matches reports whether m[j:] starts with the template's text, any digit where it has a
// #; the caller has checked the length.
func (t *template) matches(m []byte, j int) bool {
	return load8(m, j)&t.mask[0] == t.want[0] && load8(m, j+8)&t.mask[1] == t.want[1] &&
		load8(m, j+16)&t.mask[2] == t.want[2] && load8(m, j+t.last)&t.mask[3] == t.want[3] &&
		m[j+t.digits[0]]-'0' <= 9 && m[j+t.digits[1]]-'0' <= 9 && m[j+t.digits[2]]-'0' <= 9
}

// collTailFields reads " datatype <d> op <d> root <d> comm 0x" field by field: the index
// after it, or -1.
func collTailFields(m []byte, j int, c *Coll) int {
	if j+10 > len(m) || string(m[j:j+10]) != " datatype " {
		return -1
	}
	dt, j, ok := hotInt(m, j+10)
	if !ok {
		return -1
	}
	c.Datatype = Datatype(dt)
	if dt < 0 || dt > 127 {
		c.Datatype = -1
	}
	if j+4 > len(m) || string(m[j:j+4]) != " op " {
		return -1
	}
	if c.RedOp, j, ok = hotInt(m, j+4); !ok {
		return -1
	}
	if j+6 > len(m) || string(m[j:j+6]) != " root " {
		return -1
	}
	root, j, ok := hotInt(m, j+6)
	if !ok {
		return -1
	}
	c.Root = int(root)
	if j+8 > len(m) || string(m[j:j+8]) != " comm 0x" {
		return -1
	}
	return j + 8
}

// skipBuffers reads " sendbuff <p> recvbuff <p> count " at m[j:]: the buffers are not
// needed, only skipped. It returns the index after it, or -1.
func skipBuffers(m []byte, j int) int {
	if j+11 > len(m) || string(m[j:j+10]) != " sendbuff " || m[j+10] == ' ' {
		return -1
	}
	j += 10
	// Pointers are at most 18 bytes: most end within two words.
	k := 16
	if j+16 <= len(m) {
		k = firstSpace(load8(m, j), load8(m, j+8))
	}
	if k < 16 {
		j += k
	} else {
		j = skipWord(m, j)
	}
	if j+11 > len(m) || string(m[j:j+10]) != " recvbuff " || m[j+10] == ' ' {
		return -1
	}
	j += 10
	if k = 16; j+16 <= len(m) {
		k = firstSpace(load8(m, j), load8(m, j+8))
	}
	if k < 16 {
		j += k
	} else {
		j = skipWord(m, j)
	}
	if j+7 > len(m) || string(m[j:j+7]) != " count " {
		return -1
	}
	return j + 7
}

// skipWord returns the index of the first space at or after m[j], or len(m).
func skipWord(m []byte, j int) int {
	if k := bytes.IndexByte(m[j:], ' '); k >= 0 {
		return j + k
	}
	return len(m)
}

// hotInt reads an optionally negative decimal of at most 18 digits at m[j:].
func hotInt(m []byte, j int) (int64, int, bool) {
	// Datatype, op, root, nranks, channels and ranks mostly have one or two digits.
	if j+2 < len(m) {
		if d0, d1 := m[j]-'0', m[j+1]-'0'; d0 <= 9 {
			if d1 > 9 {
				return int64(d0), j + 1, true
			}
			if m[j+2]-'0' > 9 {
				return int64(d0)*10 + int64(d1), j + 2, true
			}
		}
	}
	neg := j < len(m) && m[j] == '-'
	if neg {
		j++
	}
	start := j
	var v int64
	for j < len(m) && m[j]-'0' <= 9 && j-start < 19 {
		v = v*10 + int64(m[j]-'0')
		j++
	}
	if j == start || j-start > 18 {
		return 0, j, false
	}
	if neg {
		v = -v
	}
	return v, j, true
}
