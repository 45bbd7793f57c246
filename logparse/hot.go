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
	i := indexByte16(m, 0, ':')
	if i <= 0 || i+11 > len(m) || string(m[i:i+10]) != ": opCount " {
		return false
	}
	c := &l.Coll
	c.OpName = m[:i]
	c.Op = ParseOpName(c.OpName)
	v, j, n := swarHex(m, i+10)
	if n == 0 || n > 16 {
		return false
	}
	c.OpCount = v
	// " sendbuff <p> recvbuff <p> count ": the buffers are not needed, only skipped.
	if j+11 > len(m) || string(m[j:j+10]) != " sendbuff " || m[j+10] == ' ' {
		return false
	}
	if j = skipWord(m, j+10); j+11 > len(m) || string(m[j:j+10]) != " recvbuff " || m[j+10] == ' ' {
		return false
	}
	if j = skipWord(m, j+10); j+7 > len(m) || string(m[j:j+7]) != " count " {
		return false
	}
	if c.Count, j, n = swarDec(m, j+7); n == 0 || n >= 20 {
		return false
	}
	// " datatype <d>"
	if j+10 > len(m) || string(m[j:j+10]) != " datatype " {
		return false
	}
	dt, j, ok := hotInt(m, j+10)
	if !ok {
		return false
	}
	c.Datatype = Datatype(dt)
	if dt < 0 || dt > 127 {
		c.Datatype = -1
	}
	// " op <d>"
	if j+4 > len(m) || string(m[j:j+4]) != " op " {
		return false
	}
	if c.RedOp, j, ok = hotInt(m, j+4); !ok {
		return false
	}
	// " root <d>"
	if j+6 > len(m) || string(m[j:j+6]) != " root " {
		return false
	}
	root, j, ok := hotInt(m, j+6)
	if !ok {
		return false
	}
	c.Root = int(root)
	// " comm 0x<hex>"
	if j+8 > len(m) || string(m[j:j+8]) != " comm 0x" {
		return false
	}
	if c.Comm, j, n = swarHex(m, j+8); n == 0 || n > 16 {
		return false
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

// skipWord returns the index of the first space at or after m[j], or len(m).
func skipWord(m []byte, j int) int {
	if k := indexByte16(m, j, ' '); k >= 0 {
		return j + k
	}
	if j+16 < len(m) {
		if k := bytes.IndexByte(m[j+16:], ' '); k >= 0 {
			return j + 16 + k
		}
	}
	return len(m)
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
