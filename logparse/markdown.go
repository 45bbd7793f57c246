package logparse

import "bytes"

// Unlink undoes what GitHub's renderer made of a posted log line: it turned "net_ib.cc:101"
// and "10.1.3.201" into links, and the poster copied them as "[net_ib.cc:101](http://...)".
// Each "[text](http...)" becomes its text again. Without such a link it returns line itself
// and false; else the rewritten line, built in dst's storage (which must not overlap line).
func Unlink(dst, line []byte) ([]byte, bool) {
	at := bytes.Index(line, bytesOf("](http"))
	if at < 0 {
		return line, false
	}
	out := dst[:0]
	done := 0 // line[:done] is in out
	for at >= 0 {
		open := bytes.LastIndexByte(line[done:at], '[')
		end := bytes.IndexByte(line[at:], ')')
		text := line[done+open+1 : at]
		if open < 0 || end < 0 || bytes.IndexByte(text, ']') >= 0 || bytes.IndexByte(line[at+2:at+end], ' ') >= 0 {
			// Not a link: keep it as it is, and look after it.
			out = append(out, line[done:at+1]...)
			done = at + 1
		} else {
			out = append(out, line[done:done+open]...)
			out = append(out, text...)
			done = at + end + 1
		}
		next := bytes.Index(line[done:], bytesOf("](http"))
		if next < 0 {
			break
		}
		at = done + next
	}
	return append(out, line[done:]...), true
}
