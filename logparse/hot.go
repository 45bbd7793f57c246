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
	// Each number is first tried as one word read inline, then by swarHex/swarDec: calling
	// them for every field costs 63 more instructions per line (7%, callgrind).
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
	// " datatype <d> op <d> root <d> comm 0x", mostly with one-digit numbers.
	if j+31 <= len(m) && string(m[j:j+10]) == " datatype " && m[j+10]-'0' <= 9 && string(m[j+11:j+15]) == " op " &&
		m[j+15]-'0' <= 9 && string(m[j+16:j+22]) == " root " && m[j+22]-'0' <= 9 && string(m[j+23:j+31]) == " comm 0x" {
		c.Datatype = Datatype(m[j+10] - '0')
		c.RedOp = int64(m[j+15] - '0')
		c.Root = int(m[j+22] - '0')
		j += 31
	} else if j = collTailFields(m, j, c); j < 0 {
		return false
	}
	// "<hex> [nranks=<d>]" mostly repeats one of the last two per-op lines' (a process
	// alternates between two communicators, data and tensor parallel): a comparison each,
	// the newer first.
	pc := l.prefixes()
	if j+32 <= len(m) {
		if tc := &pc.tails[pc.newer]; tc.n > 0 && tc.matches(m, j) {
			c.Comm, c.NRanks, c.End = tc.comm, tc.nranks, j+tc.n
			return true
		}
		if tc := &pc.tails[pc.newer^1]; tc.n > 0 && tc.matches(m, j) {
			c.Comm, c.NRanks, c.End = tc.comm, tc.nranks, j+tc.n
			pc.newer ^= 1
			return true
		}
	}
	start := j
	n = 0
	if j+16 <= len(m) {
		x, y := load8(m, j), load8(m, j+8)
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
		j += n
	}
	if n == 0 {
		if c.Comm, j, n = swarHex(m, j); n == 0 || n > 16 {
			return false
		}
	}
	if j+10 > len(m) || string(m[j:j+9]) != " [nranks=" {
		return false
	}
	nr, j, ok := hotInt(m, j+9)
	if !ok || j >= len(m) || m[j] != ']' {
		return false
	}
	c.NRanks, c.End = int(nr), j+1
	if start+32 <= len(m) && j+1-start <= 32 {
		pc.newer ^= 1
		pc.tails[pc.newer].remember(m, start, j+1-start, c.Comm, c.NRanks)
	}
	return true
}

// tailCache remembers the text of a per-op line from its communicator to "]" (at most 32
// bytes), with the values read from it.
type tailCache struct {
	text, mask [4]uint64
	n          int
	comm       uint64
	nranks     int
}

// remember keeps m[j:j+n]; the caller has checked j+32 <= len(m).
func (t *tailCache) remember(m []byte, j, n int, comm uint64, nranks int) {
	for w := range t.mask {
		switch k := n - 8*w; {
		case k >= 8:
			t.mask[w] = ^uint64(0)
		case k > 0:
			t.mask[w] = 1<<(8*k) - 1
		default:
			t.mask[w] = 0
		}
		t.text[w] = load8(m, j+8*w) & t.mask[w]
	}
	t.n, t.comm, t.nranks = n, comm, nranks
}

// matches reports whether m[j:] starts with the remembered text; the caller has checked
// j+32 <= len(m).
func (t *tailCache) matches(m []byte, j int) bool {
	return (load8(m, j)^t.text[0])&t.mask[0]|(load8(m, j+8)^t.text[1])&t.mask[1]|
		(load8(m, j+16)^t.text[2])&t.mask[2]|(load8(m, j+24)^t.text[3])&t.mask[3] == 0
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
