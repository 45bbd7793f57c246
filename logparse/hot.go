package logparse

import "bytes"

// The per-op line is most of a production log (hundreds of thousands per rank per hour), so
// it has a dedicated path: one left-to-right pass with plain index arithmetic, no method
// calls, that accepts exactly the layout NCCL prints (RCCL's trailing fields too). Parse
// tries it first with the common prefix; the general path uses it for other prefixes.

// hotColl parses, into l.Coll only, "<Op>: opCount <hex> sendbuff <p> recvbuff <p> count <u> datatype <d> op <d>
// root <d> comm <p> [nranks=<d>]" starting at msg.
func hotColl(m []byte, l *Line) bool {
	// Op name up to ':' (op names are at most 13 bytes).
	i := bytes.IndexByte(m[:min(len(m), 16)], ':')
	if i <= 0 || i+11 > len(m) || string(m[i:i+10]) != ": opCount " {
		return false
	}
	c := &l.Coll
	c.OpName = m[:i]
	c.Op = ParseOpName(c.OpName)
	j := i + 10
	v, j, ok := hotHex(m, j)
	if !ok {
		return false
	}
	c.OpCount = v
	// " sendbuff <p> recvbuff <p> count "
	if j+10 > len(m) || m[j+1] != 's' || m[j+9] != ' ' {
		return false
	}
	j += 10
	k := bytes.IndexByte(m[j:], ' ')
	if k < 0 {
		return false
	}
	j += k
	if j+10 > len(m) || m[j+1] != 'r' || m[j+9] != ' ' {
		return false
	}
	j += 10
	if k = bytes.IndexByte(m[j:], ' '); k < 0 {
		return false
	}
	j += k
	if j+7 > len(m) || m[j+1] != 'c' || m[j+6] != ' ' {
		return false
	}
	j += 7
	// count
	var u uint64
	start := j
	for j < len(m) {
		d := m[j] - '0'
		if d > 9 {
			break
		}
		u = u*10 + uint64(d)
		j++
	}
	if j == start || j-start >= 20 {
		return false
	}
	c.Count = u
	// " datatype <d>"
	if j+10 > len(m) || m[j+1] != 'd' || m[j+9] != ' ' {
		return false
	}
	j += 10
	dt, j, ok := hotInt(m, j)
	if !ok {
		return false
	}
	c.Datatype = Datatype(dt)
	if dt < 0 || dt > 127 {
		c.Datatype = -1
	}
	// " op <d>"
	if j+4 > len(m) || m[j+1] != 'o' || m[j+3] != ' ' {
		return false
	}
	red, j, ok := hotInt(m, j+4)
	if !ok {
		return false
	}
	c.RedOp = red
	// " root <d>"
	if j+6 > len(m) || m[j+1] != 'r' || m[j+5] != ' ' {
		return false
	}
	root, j, ok := hotInt(m, j+6)
	if !ok {
		return false
	}
	c.Root = int(root)
	// " comm 0x<hex>"
	if j+8 > len(m) || m[j+1] != 'c' || m[j+5] != ' ' || m[j+6] != '0' || m[j+7] != 'x' {
		return false
	}
	if v, j, ok = hotHex(m, j+8); !ok {
		return false
	}
	c.Comm = v
	// " [nranks=<d>]"
	if j+10 > len(m) || m[j+1] != '[' || m[j+8] != '=' {
		return false
	}
	nr, j, ok := hotInt(m, j+9)
	if !ok || j >= len(m) || m[j] != ']' {
		return false
	}
	c.NRanks = int(nr)
	return true
}

// hotHex reads 1 to 16 lower- or upper-case hex digits at m[j:].
func hotHex(m []byte, j int) (uint64, int, bool) {
	var v uint64
	start := j
	for ; j < len(m); j++ {
		c := m[j]
		d := c - '0'
		if d > 9 {
			d = (c | 0x20) - 'a'
			if d > 5 {
				break
			}
			d += 10
		}
		v = v<<4 | uint64(d)
	}
	return v, j, j > start && j-start <= 16
}

// hotInt reads an optionally negative decimal of at most 18 digits at m[j:].
func hotInt(m []byte, j int) (int64, int, bool) {
	// Datatype, op, root and nranks are mostly one digit.
	if j+1 < len(m) && m[j]-'0' <= 9 && m[j+1]-'0' > 9 {
		return int64(m[j] - '0'), j + 1, true
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
