package logparse

import "bytes"

// Parse classifies one line (without its trailing newline) into l. It never fails: what it
// does not recognise is KindUnknown. It allocates nothing.
func Parse(line []byte, l *Line) {
	line = trimRight(line)
	if len(line) > 0 {
		// The common INFO layout first, without zeroing the per-kind fields a per-op line
		// does not use (they are only meaningful for their own kinds). fastPrefix sets
		// every header field but these when it succeeds.
		if msg, ok := fastPrefix(line, l); ok {
			l.Level, l.Msg, l.LauncherRank, l.LauncherFrom, l.Task, l.File, l.FileLn, l.Label, l.Quoted = LevelInfo, msg, -1, RankFromNone, -1, nil, 0, nil, false
			// No op name starts with 'C'; channel lines, a quarter of a start-up, do.
			if len(msg) > 0 && msg[0] != 'C' && hotColl(msg, l) {
				l.Kind = KindColl
				return
			}
			l.Body = Body{}
			parseMessage(l)
			return
		}
	}
	parseGeneral(line, l)
}

// parseGeneral is Parse for every layout, without the shortcuts for the common one.
func parseGeneral(line []byte, l *Line) {
	l.reset()
	if len(line) == 0 {
		l.Kind = KindBlank
		return
	}
	line = stripLauncher(line, l)
	if len(line) == 0 {
		l.Kind = KindBlank
		return
	}
	ncclAt, level := -1, LevelNone
	if !l.Glog {
		ncclAt, level = findLevel(line)
	}
	msgAt := ncclAt + len("NCCL ") + levelLen(level)
	if ncclAt < 0 && !l.Glog {
		ncclAt, level = bareLevel(line)
		msgAt = ncclAt + levelLen(level)
	}
	if ncclAt >= 0 {
		// A prefix without host:pid:tid (cut away by whoever posted the log) still makes
		// an NCCL line; Host stays nil and the reader decides whose line it is.
		if parsePrefix(line[:ncclAt], l) || loosePrefix(line[:ncclAt], l) {
			l.Level = level
			msg := line[msgAt:]
			if len(msg) > 0 && msg[0] == ' ' {
				msg = msg[1:]
			}
			l.Msg = msg
			parseMessage(l)
			return
		}
	}
	// Unprefixed NCCL output: the bare version line (2.18-2.21 stdout, 2.22+ at WARN level;
	// RCCL says "RCCL version").
	if hasPrefix(line, "NCCL version ") || hasPrefix(line, "RCCL version ") {
		l.Kind = KindVersion
		l.Msg = line
		l.Text = versionText(line)
		return
	}
	if parseSignal(line, l) {
		return
	}
	parseTorch(line, l)
}

// fastPrefix parses the common INFO layout "[%F %T.%Nf] host:pid:tid [dev] NCCL INFO " left
// to right. Any other layout (WARN, TRACE, custom timestamps) takes the general path.
func fastPrefix(b []byte, l *Line) ([]byte, bool) {
	c := l.prefixes()
	i := 0
	l.HasTime = false
	if b[0] != '[' {
		l.Time = Timestamp{}
	} else {
		// The previous line's timestamp length is the likely one: check its end directly.
		end := c.tsEnd
		if end == 0 || end+1 >= len(b) || b[end] != ']' || b[end+1] != ' ' {
			end = bytes.IndexByte(b, ']')
			if end < 20 || end > 31 || end+1 >= len(b) || b[end+1] != ' ' {
				return nil, false
			}
		}
		parseTimestampCached(b, end, l)
		if !l.HasTime {
			return nil, false
		}
		c.tsEnd = end
		i = end + 2
	}
	// The rest of the prefix, "host:pid:tid [dev] NCCL INFO ", mostly repeats the previous
	// line's: one comparison, eight bytes at a time.
	if n := c.restLen; n > 0 && i+n <= len(b) && equalAt(b, i, c.rest[:], n) {
		l.Host, l.PID, l.TID, l.Dev = b[i:i+c.hostLen], c.pid, c.tid, c.dev
		return b[i+n:], true
	}
	// A failure leaves fields half set: the general path resets them.
	sp := bytes.IndexByte(b[i:], ' ')
	if sp < 0 {
		return nil, false
	}
	host, pid, tid, ok := hostPidTid(b[i : i+sp])
	j := i + sp + 1
	l.Dev = -1
	if ok && j < len(b) && b[j] == '[' {
		if j+3 < len(b) && isDigit(b[j+1]) && b[j+2] == ']' && b[j+3] == ' ' {
			l.Dev = int(b[j+1] - '0')
			j += 4
		} else if k := bytes.IndexByte(b[j:], ']'); k < 2 || j+k+1 >= len(b) || b[j+k+1] != ' ' {
			ok = false
		} else if d, ok2 := atoiSigned(b[j+1 : j+k]); ok2 {
			l.Dev = d
			j += k + 2
		} else {
			ok = false
		}
	}
	if !ok || !hasPrefix(b[j:], "NCCL INFO ") {
		return nil, false
	}
	l.Host, l.PID, l.TID = host, pid, tid
	j += len("NCCL INFO ")
	if j-i <= len(c.rest) {
		c.restLen = copy(c.rest[:], b[i:j])
		c.hostLen, c.pid, c.tid, c.dev = len(host), pid, tid, l.Dev
	}
	return b[j:], true
}

func trimRight(b []byte) []byte {
	for len(b) > 0 {
		if b[len(b)-1] == 'm' {
			// A terminal colour reset ("\x1b[0m") a console left at the end of the line.
			if e := bytes.LastIndexByte(b[max(len(b)-8, 0):], 0x1b); e >= 0 {
				if at := max(len(b)-8, 0) + e; ansiEnd(b[at:]) == len(b)-at {
					b = b[:at]
					continue
				}
			}
		}
		switch b[len(b)-1] {
		case '\n', '\r', ' ', '\t', 0, '`':
			// A backtick: the end of a line a poster quoted as markdown code.
			b = b[:len(b)-1]
			continue
		}
		break
	}
	return b
}

var levelTokens = [...]struct {
	tok   string
	level Level
}{{"INFO", LevelInfo}, {"WARN", LevelWarn}, {"TRACE", LevelTrace}, {"CALL", LevelCall}}

func levelLen(l Level) int {
	switch l {
	case LevelInfo, LevelWarn, LevelCall:
		return 4
	case LevelTrace:
		return 5
	}
	return 0
}

// findLevel returns the index of the first "NCCL <LEVEL>" token that starts the line or
// follows a space.
func findLevel(b []byte) (int, Level) {
	off := 0
	for {
		var at int
		if off == 0 && hasPrefix(b, "NCCL ") {
			at = 0
		} else {
			j := bytes.Index(b[off:], bytesOf(" NCCL "))
			if j < 0 {
				return -1, LevelNone
			}
			at = off + j + 1
		}
		rest := b[at+5:]
		for _, t := range levelTokens {
			if hasPrefix(rest, t.tok) && (len(rest) == len(t.tok) || rest[len(t.tok)] == ' ') {
				return at, t.level
			}
		}
		off = at + 5
	}
}

// bareLevel finds the level of an NCCL 2.1-2.3 line, which prints no "NCCL" before it:
// "host:pid:tid [dev] INFO msg", "host:pid:tid [dev] file.cu:123 WARN msg". Only that whole
// prefix, with a host that has a letter, makes such a line NCCL's: other programs print
// INFO and WARN words too.
func bareLevel(b []byte) (int, Level) {
	sp := bytes.IndexByte(b[:min(len(b), 160)], ' ')
	if sp <= 0 {
		return -1, LevelNone
	}
	if host, _, _, ok := hostPidTid(b[:sp]); !ok || !hasLetter(host) {
		return -1, LevelNone
	}
	j := sp + 1
	if j >= len(b) || b[j] != '[' {
		return -1, LevelNone
	}
	k := bytes.IndexByte(b[j:min(len(b), j+8)], ']')
	if k < 2 || j+k+1 >= len(b) || b[j+k+1] != ' ' {
		return -1, LevelNone
	}
	if _, ok := atoiSigned(b[j+1 : j+k]); !ok {
		return -1, LevelNone
	}
	j += k + 2
	if e := bytes.IndexByte(b[j:], ' '); e > 0 && sourceLoc(b[j:j+e]) {
		j += e + 1
	}
	rest := b[j:]
	for _, t := range levelTokens {
		if hasPrefix(rest, t.tok) && (len(rest) == len(t.tok) || rest[len(t.tok)] == ' ') {
			return j, t.level
		}
	}
	return -1, LevelNone
}

// parsePrefix reads "[ts] host:pid:tid [dev] [ms] [file:line [(func)]] " right to left, so
// that any custom timestamp before host:pid:tid is tolerated.
func parsePrefix(p []byte, l *Line) bool {
	p = trimRight(p)
	// Split into tokens from the right until the host:pid:tid token.
	end := len(p)
	var tokens [4][]byte
	n := 0
	for end > 0 && n < 5 {
		start := bytes.LastIndexByte(p[:end], ' ') + 1
		tok := p[start:end]
		if host, pid, tid, ok := hostPidTid(bytes.TrimLeft(tok, "`")); ok {
			// A backtick: the line was quoted as inline code inside a poster's sentence.
			l.Host, l.PID, l.TID = host, pid, tid
			for i := n - 1; i >= 0; i-- {
				t := tokens[i]
				switch {
				case len(t) > 2 && t[0] == '[' && t[len(t)-1] == ']':
					if d, ok := atoiSigned(t[1 : len(t)-1]); ok {
						l.Dev = d
					}
				case len(t) > 2 && t[0] == '(' && t[len(t)-1] == ')':
					// 2.30.7 WARN function name: nothing we need.
				default:
					if c := bytes.LastIndexByte(t, ':'); c > 0 {
						if ln, ok := atoi(t[c+1:]); ok {
							l.File, l.FileLn = t[:c], ln
						}
					}
				}
			}
			if start > 0 {
				parseTimestamp(p[:start-1], l)
			}
			return true
		}
		if n == len(tokens) {
			return false
		}
		tokens[n] = tok
		n++
		end = start - 1
		if end < 0 {
			break
		}
	}
	return false
}

// loosePrefix accepts what is left of NCCL's prefix when a poster or a collector cut it:
// "host:pid [dev]", "[dev]", or nothing. A lone "[dev]" is kept as the device.
func loosePrefix(p []byte, l *Line) bool {
	p = trimSpace(p)
	if len(p) == 0 {
		return true
	}
	if tok := p[bytes.LastIndexByte(p, ' ')+1:]; sourceLoc(tok) {
		// "misc/socket.cc:71": where NCCL warned from, not a host:pid.
		c := bytes.LastIndexByte(tok, ':')
		l.File, l.FileLn = tok[:c], 0
		if ln, ok := atoi(tok[c+1:]); ok {
			l.FileLn = ln
		}
		p = trimSpace(p[:len(p)-len(tok)])
	}
	if len(p) > 2 && p[len(p)-1] == ']' {
		if o := bytes.LastIndexByte(p, '['); o >= 0 {
			if d, ok := atoiSigned(p[o+1 : len(p)-1]); ok {
				l.Dev = d
				p = trimSpace(p[:o])
			}
		}
	}
	tok := p[bytes.LastIndexByte(p, ' ')+1:]
	if c := bytes.IndexByte(tok, ':'); c > 0 && bytes.IndexByte(tok[c+1:], ':') < 0 {
		if pid, ok := atoi(tok[c+1:]); ok && hasLetter(tok[:c]) {
			l.Host, l.PID = tok[:c], pid
			return true
		}
	}
	// Anything else before "NCCL <LEVEL>" must be short: a label, not a sentence that
	// happens to mention NCCL.
	return len(p) <= 48
}

// sourceLoc reports a "file.cc:123" token: a C/C++/CUDA source file and its line (NCCL and
// RCCL print where a WARN or an error breadcrumb comes from).
func sourceLoc(t []byte) bool {
	c := bytes.LastIndexByte(t, ':')
	if c <= 2 || c+1 >= len(t) {
		return false
	}
	if _, ok := atoi(t[c+1:]); !ok {
		return false
	}
	name := t[:c]
	for _, ext := range [...]string{".cc", ".c", ".h", ".cu", ".cpp", ".hpp", ".cuh"} {
		if len(name) > len(ext) && string(name[len(name)-len(ext):]) == ext {
			return true
		}
	}
	return false
}

func hasLetter(b []byte) bool {
	for _, c := range b {
		if c|0x20 >= 'a' && c|0x20 <= 'z' {
			return true
		}
	}
	return false
}

func atoiSigned(b []byte) (int, bool) {
	if len(b) > 0 && b[0] == '-' {
		v, ok := atoi(b[1:])
		return -v, ok
	}
	return atoi(b)
}

// hostPidTid splits "host:pid:tid". The host holds no ':' (NCCL cuts it at the first '.')
// and may be empty (a container without a hostname prints ":5202:5683").
func hostPidTid(t []byte) ([]byte, int, int, bool) {
	c2 := bytes.LastIndexByte(t, ':')
	if c2 <= 0 {
		return nil, 0, 0, false
	}
	c1 := bytes.LastIndexByte(t[:c2], ':')
	if c1 < 0 {
		return nil, 0, 0, false
	}
	pid, ok1 := atoi(t[c1+1 : c2])
	tid, ok2 := atoi(t[c2+1:])
	if !ok1 || !ok2 {
		return nil, 0, 0, false
	}
	host := t[:c1]
	if bytes.IndexByte(host, ':') >= 0 || bytes.IndexByte(host, '[') >= 0 || bytes.IndexByte(host, '`') >= 0 {
		return nil, 0, 0, false
	}
	return host, pid, tid, true
}

// parseTimestamp reads NCCL's default layout "[%F %T]" or "[%F %T.%Nf]". Other layouts are
// opaque: the line is then timed by its read time.
func parseTimestamp(t []byte, l *Line) {
	t = trimSpace(t)
	if len(t) > 21 && t[0] != '[' && t[len(t)-1] == ']' {
		// NCCL's own time behind a collector's ("2025-11-09 15:39:31.043 +08:00 [...]"):
		// NCCL's is read, it is when the line was printed.
		if o := bytes.LastIndexByte(t, '['); o > 0 && t[o-1] == ' ' {
			t = t[o:]
		}
	}
	if len(t) < 21 || t[0] != '[' || t[len(t)-1] != ']' {
		return
	}
	t = t[1 : len(t)-1]
	// 2006-01-02 15:04:05[.frac]
	if len(t) < 19 || t[4] != '-' || t[7] != '-' || (t[10] != ' ' && t[10] != 'T') || t[13] != ':' || t[16] != ':' {
		return
	}
	var ts Timestamp
	var ok bool
	if ts.Year, ok = atoi(t[0:4]); !ok {
		return
	}
	if ts.Month, ok = atoi(t[5:7]); !ok || ts.Month < 1 || ts.Month > 12 {
		return
	}
	if ts.Day, ok = atoi(t[8:10]); !ok || ts.Day < 1 || ts.Day > 31 {
		return
	}
	if ts.Hour, ok = atoi(t[11:13]); !ok || ts.Hour > 23 {
		return
	}
	if ts.Min, ok = atoi(t[14:16]); !ok || ts.Min > 59 {
		return
	}
	if ts.Sec, ok = atoi(t[17:19]); !ok || ts.Sec > 60 {
		return
	}
	if len(t) > 19 {
		if t[19] != '.' || len(t) == 20 || len(t) > 29 {
			return
		}
		frac := t[20:]
		n, ok := atoi(frac)
		if !ok {
			return
		}
		for i := len(frac); i < 9; i++ {
			n *= 10
		}
		ts.Nanos, ts.Digits = n, len(frac)
	}
	l.Time, l.HasTime = ts, true
}

// parseTimestampCached is parseTimestamp for the "[YYYY-MM-DD HH:MM:SS(.f)]" that ends at
// b[end]. Most lines share their second with the previous one: then only the fraction is
// read, eight digits per load.
func parseTimestampCached(b []byte, end int, l *Line) {
	c := l.prefixes()
	if end < 20 || end > 30 {
		parseTimestamp(b[:end+1], l)
		return
	}
	if !c.secOK || load8(b, 0) != c.sec[0] || load8(b, 8) != c.sec[1] || load8(b, 12) != c.sec[2] {
		parseTimestamp(b[:end+1], l)
		if l.HasTime {
			c.ts = l.Time
			c.ts.Nanos, c.ts.Digits = 0, 0
			c.sec = [3]uint64{load8(b, 0), load8(b, 8), load8(b, 12)}
			c.secOK = true
		}
		return
	}
	var nanos, digits int
	if end > 20 {
		digits = end - 21
		if b[20] != '.' || digits == 0 {
			return
		}
		if digits < 8 && 29 <= len(b) && firstMarked(nonDigits(load8(b, 21))) == digits {
			nanos = int(decimal8(load8(b, 21), digits) * pow10[9-digits])
		} else {
			v, ok := atoi(b[21:end])
			if !ok {
				return
			}
			nanos = v * int(pow10[9-digits])
		}
	} else if b[20] != ']' {
		return
	}
	l.Time = c.ts
	l.Time.Nanos, l.Time.Digits = nanos, digits
	l.HasTime = true
}

func versionText(b []byte) []byte {
	s := scanner{b: b}
	if !s.skipTo("CCL version ") {
		return nil
	}
	// RCCL 2.27 aligns its version banner: "RCCL version : 2.27.7-HEAD:29e1567".
	s.lit(": ")
	return s.word()
}
