package logparse

import (
	"bytes"
	"iter"
)

// A console line can hold two NCCL lines: a terminal's copy padded a whole line with spaces
// to its width and lost the newline, or two writers' text was glued where the first line
// was cut (no newline, the second line's host glued to the first's last word). The second
// line's prefix is then inside the first's message, before its "NCCL INFO" or "NCCL WARN".

// Second is a second NCCL prefix found inside a message.
type Second struct {
	// At is where, in the message, the second line starts (Padded) or where the token that
	// holds its host starts (glued).
	At int
	// Padded: the first line is whole, padded with spaces; the second's "host:pid:tid" is
	// whole at At.
	Padded bool
	// Token is, for glued lines, "<end of the first line><host>:<pid>:<tid>", PID the
	// pid in it and HostEnd the index in Token of the ':' after the host: where the host
	// starts is known only from the processes the reader has seen (GluedAt).
	Token   []byte
	PID     int
	HostEnd int
}

// GluedAt returns where in s.Token the host starts, given a host known to have a process
// with s.PID: the longest such host that the token ends with before its pid.
func (s Second) GluedAt(host string) (int, bool) {
	if s.HostEnd < len(host) || string(s.Token[s.HostEnd-len(host):s.HostEnd]) != host {
		return 0, false
	}
	return s.HostEnd - len(host), true
}

// SecondPrefixes yields, left to right, the places in m where a second NCCL line may start.
// It runs on every NCCL line, so it looks for the rare 'N' first: per-op messages have none.
func SecondPrefixes(m []byte) iter.Seq[Second] { return SecondPrefixesFrom(m, 0) }

// SecondPrefixesFrom is SecondPrefixes where no second line's "NCCL" starts before from
// (a per-op line's fields read, Coll.End): what yields is the same, and the search shorter.
func SecondPrefixesFrom(m []byte, from int) iter.Seq[Second] {
	return func(yield func(Second) bool) {
		off := from
		for {
			i := bytes.IndexByte(m[off:], 'N')
			if i < 0 {
				return
			}
			i += off
			off = i + 1
			if i == 0 || m[i-1] != ' ' || !(hasPrefix(m[i:], "NCCL INFO") || hasPrefix(m[i:], "NCCL WARN")) {
				continue
			}
			if at, ok := paddedAt(m, i); ok {
				if !yield(Second{At: at, Padded: true}) {
					return
				}
				continue
			}
			// Before it: "host:pid:tid [dev] " (the dev may be absent), the host glued to
			// the first line's text.
			j := i - 1
			if j > 0 && m[j-1] == ']' {
				o := bytes.LastIndexByte(m[:j], '[')
				if o <= 0 || m[o-1] != ' ' {
					continue
				}
				j = o - 1
			}
			sp := bytes.LastIndexByte(m[:j], ' ') + 1
			tok := m[sp:j]
			c2 := bytes.LastIndexByte(tok, ':')
			if c2 <= 0 {
				continue
			}
			c1 := bytes.LastIndexByte(tok[:c2], ':')
			if c1 < 0 {
				continue
			}
			pid, ok1 := atoi(tok[c1+1 : c2])
			_, ok2 := atoi(tok[c2+1:])
			if !ok1 || !ok2 {
				continue
			}
			if !yield(Second{At: sp, Token: tok, PID: pid, HostEnd: c1}) {
				return
			}
		}
	}
}

// paddedAt reads back from "NCCL INFO|WARN" at i over "[dev] " and "file:line " to a whole
// "host:pid:tid" token after a run of spaces, and returns where that token starts.
func paddedAt(m []byte, i int) (int, bool) {
	j := i
	for k := 0; k < 3 && j > 0; k++ {
		end := j - 1
		if m[end] != ' ' {
			return 0, false
		}
		start := bytes.LastIndexByte(m[:end], ' ') + 1
		if host, _, _, ok := hostPidTid(m[start:end]); ok && hostName(host) {
			return start, start >= 3 && m[start-1] == ' ' && m[start-2] == ' ' && m[start-3] == ' '
		}
		j = start
	}
	return 0, false
}

// hostName reports a host of hostname characters (empty: a container without a hostname).
func hostName(h []byte) bool {
	for _, c := range h {
		if !(c == '-' || c == '.' || c == '_' || isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z')) {
			return false
		}
	}
	return true
}

// CollHead reports a message that starts like a per-op line but is cut before its end
// ("AllReduce: opCount 3 sendbuff 0x7f"): the head of a line whose rest another writer's
// text interrupted.
func CollHead(m []byte) bool {
	c := bytes.IndexByte(m, ':')
	return c > 0 && c < 16 && (hasPrefix(m[c:], ": opCount") || (len(m) < c+12 && hasPrefix([]byte(": opCount"), string(m[c:]))))
}
