package logparse

import "bytes"

// The console prefixes: what launchers, schedulers, collectors and terminals put before a
// line, NCCL's or Python's alike, in any stack and order (up to eight), read here and only
// here. Each is removed from the line's start; a rank it names becomes Header.LauncherRank,
// a time it carries times the line when NCCL printed none.
//
//	prefix                                   from                              kept as
//	"[rank3]:", "[default3]:"                torchrun --tee, PyTorch           LauncherRank
//	"[1,3]<stdout>:", "[1,3]:"               Open MPI --tag-output             LauncherRank (vpid)
//	"3: ", " 3: ", "03: "                    srun --label (Slurm)              LauncherRank
//	"[3] " (not NCCL's "[dev] NCCL ...")     rank tags                         LauncherRank
//	"Fri Aug 11 12:31:45 2023 "              Open MPI --timestamp-output       Time
//	"2023-08-11T12:31:45.123Z ", "...Z: "    kubectl --timestamps, Open MPI 4+ Time (zoned)
//	"2025-11-09 15:39:31.043 +08:00 "        collectors                        Time (zoned)
//	"E1129 03:11:35.586230 460 api.py:882] " glog: torchrun's agent             Time (yearless), Glog
//	"[E1129 03:11:35.586230091 PG.cpp:9] "   PyTorch's C++ (c10)               Time (yearless), Glog
//	"[W socket.cpp:464] "                    PyTorch's C++ before 2.4          Glog
//	"[pod/name/container] "                  kubectl logs --prefix             -
//	"[trainer3]:", "[worker-0|2]:"           collectors' tags                  -
//	"<source> [stderr] ", "... [stdout]: "   collectors' streams               -
//	"host: "                                 pdsh, clush                       Label
//	"\x1b[32m", "```", "`", "> "             terminals, a poster's markdown    -
//
// A glog prefix is the application's (PyTorch's, its launcher's): NCCL prints none, and
// what follows one is never NCCL's own line. Its time has no year: whoever reads it takes
// the year from the job's other times (Timestamp.UnixMicro).
//
// NCCL's own prefix ("[time] host:pid:tid [dev] [file:line] NCCL LEVEL") follows
// (parsePrefix, loosePrefix, bareLevel); a second one inside a line's message is found by
// SecondPrefixes, and lines a terminal broke at its width are put back by Unwrapper.

// Unprefixed is line without the console prefixes before it (the grammar above).
func Unprefixed(line []byte) []byte {
	var h Line
	h.reset()
	return stripLauncher(trimRight(line), &h)
}

// stripLauncher removes what launchers and collectors put before NCCL's own prefix, in any
// stack: torchrun --tee "[default3]:", PyTorch "[rank3]:", Open MPI --tag-output
// "[1,3]<stdout>:" (with --timestamp-output a ctime date before it), srun --label "3: ",
// a "[3] " rank tag, pdsh "host: ", kubectl --timestamps' RFC 3339 time and --prefix
// "[pod/name/container] ", a collector's "2025-11-09 15:39:31.043 +08:00 ". Times found here
// time the line when NCCL printed none.
func stripLauncher(b []byte, l *Line) []byte {
	for n := 0; n < 8 && len(b) > 0; n++ {
		rest, ok := stripOne(b, l)
		if !ok {
			return b
		}
		b = rest
		for len(b) > 0 && b[0] == ' ' {
			b = b[1:]
		}
	}
	return b
}

// stripOne removes one launcher prefix from the start of b.
func stripOne(b []byte, l *Line) ([]byte, bool) {
	switch c := b[0]; {
	case c == 0x1b:
		// A terminal colour code ("\x1b[32m") a console kept.
		if n := ansiEnd(b); n > 0 {
			return b[n:], true
		}
		return b, false
	case c == '`' || c == '>':
		// What a poster's markdown adds: a code fence or an inline-code quote glued to the
		// line ("```host:pid:tid ...", "`file.cc:12 NCCL WARN ...`"), a blockquote "> ".
		k := 0
		for k < len(b) && k < 8 && b[k] == c {
			k++
		}
		return b[k:], true
	case c == '[':
		if rest, ok := stripGlog(b, l); ok {
			return rest, true
		}
		return stripBracket(b, l)
	case isDigit(c):
		if rest, ok := stripRFC3339(b, l); ok {
			return rest, true
		}
		// srun --label: "3: ", zero- or space-padded. "12:34:56" (a custom timestamp) has no
		// space after the first colon.
		k := 0
		for k < len(b) && k < 7 && isDigit(b[k]) {
			k++
		}
		if k+1 >= len(b) || b[k] != ':' || b[k+1] != ' ' {
			return b, false
		}
		r, _ := atoi(b[:k])
		l.LauncherRank, l.LauncherFrom, l.Task = r, RankFromTask, r
		return b[k+2:], true
	case c == ' ':
		k := 0
		for k < len(b) && b[k] == ' ' {
			k++
		}
		if k < len(b) && isDigit(b[k]) {
			return stripOne(b[k:], l)
		}
		return b, false
	case c >= 'A' && c <= 'Z':
		if rest, ok := stripGlog(b, l); ok {
			return rest, true
		}
		if rest, ok := stripCtime(b, l); ok {
			return rest, true
		}
		if rest, ok := stripStream(b); ok {
			return rest, true
		}
		return stripLabel(b, l)
	case c >= 'a' && c <= 'z':
		if rest, ok := stripStream(b); ok {
			return rest, true
		}
		return stripLabel(b, l)
	}
	return b, false
}

// stripStream removes a collector's source and stream: "<bench>.<node> [stderr] ",
// "trainer-3 [stdout] " (a name without spaces, then the stream it was read from).
func stripStream(b []byte) ([]byte, bool) {
	k := 0
	for k < len(b) && k < 96 {
		c := b[k]
		if c == '-' || c == '.' || c == '_' || c == '/' || isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'z' {
			k++
			continue
		}
		break
	}
	if k == 0 || k >= len(b) || b[k] != ' ' {
		return b, false
	}
	rest := b[k+1:]
	for _, tag := range [...]string{"[stderr] ", "[stdout] ", "[stderr]: ", "[stdout]: "} {
		if hasPrefix(rest, tag) {
			return rest[len(tag):], true
		}
	}
	return b, false
}

// ansiEnd is the length of the ANSI SGR sequence ("\x1b[0m", "\x1b[1;31m") b starts with,
// 0 when it starts with none.
func ansiEnd(b []byte) int {
	if len(b) < 3 || b[0] != 0x1b || b[1] != '[' {
		return 0
	}
	for k := 2; k < len(b) && k < 12; k++ {
		switch c := b[k]; {
		case c == 'm':
			return k + 1
		case isDigit(c) || c == ';':
		default:
			return 0
		}
	}
	return 0
}

// stripTag removes a collector's "[name]:" tag ("[trainer3]:", "[worker-0|2]:"): a word
// without spaces, whose number (if any) is not known to be a rank.
// kubectl logs --prefix tags "[pod/name/container] " the same way, with a space.
func stripTag(b []byte) ([]byte, bool) {
	e := bytes.IndexByte(b[:min(len(b), 128)], ']')
	if e < 2 || e+1 >= len(b) || bytes.IndexByte(b[1:e], ' ') >= 0 || bytes.IndexByte(b[1:e], '[') >= 0 {
		return b, false
	}
	switch {
	case b[e+1] == ':' && e <= 48:
		return b[e+2:], true
	case b[e+1] == ' ' && hasPrefix(b, "[pod/") && bytes.Count(b[:e], bytesOf("/")) == 2:
		return b[e+2:], true
	}
	return b, false
}

// stripBracket removes "[rankN]:", "[defaultN]:", "[J,R]<stdout>:" or a "[N] " rank tag.
func stripBracket(b []byte, l *Line) ([]byte, bool) {
	j, from := 1, RankFromTask
	switch {
	case hasPrefix(b, "[rank"):
		j, from = 5, RankFromJob
	case hasPrefix(b, "[default"):
		j, from = 8, RankFromNode
	}
	k := j
	for k < len(b) && isDigit(b[k]) {
		k++
	}
	if k == j || k >= len(b) {
		return stripTag(b)
	}
	r, ok := atoi(b[j:k])
	if !ok {
		return b, false
	}
	switch {
	case b[k] == ']' && k+1 < len(b) && b[k+1] == ':':
		if j == 1 && !(k+2 < len(b) && b[k+2] == ' ') {
			// "[3]:" without a space is not a rank tag we know.
			return b, false
		}
		l.LauncherRank, l.LauncherFrom = r, from
		if from == RankFromTask {
			l.Task = r
		}
		return b[k+2:], true
	case b[k] == ']' && j == 1 && k+1 < len(b) && b[k+1] == ' ':
		// "[3] " rank tag; "[3] NCCL INFO" and "[3] misc/socket.cc:71 NCCL WARN" are
		// NCCL's own device field of a line whose host:pid:tid was cut away.
		rest := b[k+2:]
		if hasPrefix(rest, "NCCL ") && !hasPrefix(rest, "NCCL version ") {
			return b, false
		}
		if sp := bytes.IndexByte(rest, ' '); sp > 0 && sourceLoc(rest[:sp]) && hasPrefix(rest[sp+1:], "NCCL ") {
			return b, false
		}
		l.LauncherRank, l.LauncherFrom, l.Task = r, RankFromTask, r
		return b[k+2:], true
	case b[k] == ',' && j == 1:
		// Open MPI: "[jobid,rank]<stdout>:"
		m := k + 1
		for m < len(b) && isDigit(b[m]) {
			m++
		}
		if m == k+1 || m >= len(b) || b[m] != ']' {
			return b, false
		}
		vpid, ok := atoi(b[k+1 : m])
		if !ok {
			return b, false
		}
		rest := b[m+1:]
		if len(rest) > 0 && rest[0] == '<' {
			e := bytes.IndexByte(rest, '>')
			if e < 0 || e > 12 {
				return b, false
			}
			rest = rest[e+1:]
		}
		if len(rest) == 0 || rest[0] != ':' {
			return b, false
		}
		l.LauncherRank, l.LauncherFrom = vpid, RankFromJob
		return rest[1:], true
	}
	return b, false
}

var months = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// stripCtime removes a C ctime() date, "Fri Aug 11 12:31:45 2023" (Open MPI
// --timestamp-output), and times the line with it.
func stripCtime(b []byte, l *Line) ([]byte, bool) {
	// "Www Mmm dd hh:mm:ss yyyy": 24 bytes, the day space-padded.
	if len(b) < 24 || b[3] != ' ' || b[7] != ' ' || b[10] != ' ' || b[13] != ':' || b[16] != ':' || b[19] != ' ' {
		return b, false
	}
	month := 0
	for i, m := range months {
		if string(b[4:7]) == m {
			month = i + 1
		}
	}
	day, ok1 := atoi(trimSpace(b[8:10]))
	hour, ok2 := atoi(b[11:13])
	minute, ok3 := atoi(b[14:16])
	sec, ok4 := atoi(b[17:19])
	year, ok5 := atoi(b[20:24])
	if month == 0 || !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 60 {
		return b, false
	}
	if !l.HasTime {
		l.Time = Timestamp{Year: year, Month: month, Day: day, Hour: hour, Min: minute, Sec: sec}
		l.HasTime = true
	}
	return b[24:], true
}

// stripRFC3339 removes an ISO 8601 time and times the line with it: kubectl logs
// --timestamps and container runtimes ("2023-08-11T12:31:45.123456789Z "), Open MPI 4+
// --timestamp-output ("2019-06-02T16:13:44.884Z: "), and collectors that print the date and
// time apart with their zone ("2025-11-09 15:39:31.043 +08:00 "). A zone makes the time
// zoned; without one it is local time, like NCCL's own.
func stripRFC3339(b []byte, l *Line) ([]byte, bool) {
	if len(b) < 20 || b[4] != '-' || b[7] != '-' || (b[10] != 'T' && b[10] != ' ') || b[13] != ':' || b[16] != ':' {
		return b, false
	}
	var ts Timestamp
	var ok bool
	if ts.Year, ok = atoi(b[0:4]); !ok {
		return b, false
	}
	ts.Month, _ = atoi(b[5:7])
	ts.Day, _ = atoi(b[8:10])
	ts.Hour, _ = atoi(b[11:13])
	ts.Min, _ = atoi(b[14:16])
	if ts.Sec, ok = atoi(b[17:19]); !ok || ts.Month < 1 || ts.Month > 12 || ts.Day < 1 || ts.Day > 31 || ts.Hour > 23 || ts.Min > 59 || ts.Sec > 60 {
		return b, false
	}
	i := 19
	if i < len(b) && b[i] == '.' {
		k := i + 1
		for k < len(b) && k-i <= 12 && isDigit(b[k]) {
			k++
		}
		digits := min(k-i-1, 9)
		if digits == 0 {
			return b, false
		}
		n, _ := atoi(b[i+1 : i+1+digits])
		ts.Nanos, ts.Digits = n*int(pow10[9-digits]), digits
		i = k
	}
	i, ok = isoZone(b, i, b[10] == ' ', &ts)
	if !ok {
		return b, false
	}
	if i < len(b) && b[i] == ':' {
		i++
	}
	if i < len(b) && b[i] != ' ' {
		return b, false
	}
	if !l.HasTime {
		l.Time, l.HasTime = ts, true
	}
	return b[i:], true
}

// isoZone reads the zone after an ISO time at b[i]: "Z", "+02:00", "+0200", or, when the
// date and time are apart (spaced), the same after a space. It returns where the zone ends.
func isoZone(b []byte, i int, spaced bool, ts *Timestamp) (int, bool) {
	if i < len(b) && (b[i] == 'Z' || b[i] == 'z') {
		ts.Zoned = true
		return i + 1, true
	}
	j := i
	if spaced && j+1 < len(b) && b[j] == ' ' && (b[j+1] == '+' || b[j+1] == '-') {
		j++
	}
	if j+5 > len(b) || (b[j] != '+' && b[j] != '-') {
		return i, true
	}
	h, ok1 := atoi(b[j+1 : j+3])
	k := j + 3
	if k < len(b) && b[k] == ':' {
		k++
	}
	if k+2 > len(b) {
		return i, false
	}
	m, ok2 := atoi(b[k : k+2])
	if !ok1 || !ok2 || h > 14 || m > 59 {
		return i, false
	}
	ts.Zoned, ts.Offset = true, int32(h*3600+m*60)
	if b[j] == '-' {
		ts.Offset = -ts.Offset
	}
	return k + 2, true
}

// stripLabel removes a "label: " (pdsh's host) and keeps it in l.Label: a Python
// exception's class reads the same ("ValueError: ..."), and parseTorch tells them apart.
func stripLabel(b []byte, l *Line) ([]byte, bool) {
	rest, ok := stripHostLabel(b)
	if ok {
		l.Label = b[:len(b)-len(rest)]
	}
	return rest, ok
}

// stripHostLabel removes a pdsh/clush "host: " label. NCCL's own "host:pid:tid" has a
// digit after the colon, never a space.
func stripHostLabel(b []byte) ([]byte, bool) {
	if len(b) > 5 && hasPrefix(b, "nccl") && b[4] >= 'A' && b[4] <= 'Z' {
		// "ncclSystemError: ..." is PyTorch quoting NCCL's result, not a host.
		return b, false
	}
	for k := 0; k < len(b) && k < 64; k++ {
		c := b[k]
		switch {
		case c == ':':
			if k > 0 && k+1 < len(b) && b[k+1] == ' ' {
				if rest := b[k+2:]; hasPrefix(rest, "Test NCCL failure ") || hasPrefix(rest, "Test CUDA failure ") {
					// nccl-tests names the failing host the same way: kept, it is whose.
					return b, false
				}
				return b[k+2:], true
			}
			return b, false
		case c == '-' || c == '.' || c == '_' || isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z'):
		default:
			return b, false
		}
	}
	return b, false
}

// stripGlog removes glog's prefix and times the line with it (month and day, no year):
// "E1129 03:11:35.586230 460 torch/distributed/elastic/multiprocessing/api.py:882] " (the
// level, mmdd hh:mm:ss.uuuuuu, the thread, where it logged from), as torchrun's agent prints
// it; PyTorch's C++ logging puts it in brackets, with nanoseconds and no thread
// ("[W1129 03:13:05.119497044 ProcessGroupNCCL.cpp:4051] "), and before 2.4 without the time
// ("[E ProcessGroupNCCL.cpp:1316] ").
func stripGlog(b []byte, l *Line) ([]byte, bool) {
	i := 0
	bracketed := b[0] == '['
	if bracketed {
		i = 1
	}
	if i+2 >= len(b) || !glogLevel(b[i]) {
		return b, false
	}
	i++
	var ts Timestamp
	timed := b[i] != ' '
	if !timed && !bracketed {
		// "E file.py:3] " alone is too loose a pattern to take off a line.
		return b, false
	}
	if timed {
		// "mmdd hh:mm:ss", then an optional fraction.
		if i+13 > len(b) || b[i+4] != ' ' || b[i+7] != ':' || b[i+10] != ':' {
			return b, false
		}
		var ok [5]bool
		ts.Month, ok[0] = atoi(b[i : i+2])
		ts.Day, ok[1] = atoi(b[i+2 : i+4])
		ts.Hour, ok[2] = atoi(b[i+5 : i+7])
		ts.Min, ok[3] = atoi(b[i+8 : i+10])
		ts.Sec, ok[4] = atoi(b[i+11 : i+13])
		if ok != [5]bool{true, true, true, true, true} || ts.Month < 1 || ts.Month > 12 || ts.Day < 1 || ts.Day > 31 ||
			ts.Hour > 23 || ts.Min > 59 || ts.Sec > 60 {
			return b, false
		}
		i += 13
		if i < len(b) && b[i] == '.' {
			k := i + 1
			for k < len(b) && k-i <= 9 && isDigit(b[k]) {
				k++
			}
			digits := k - i - 1
			if digits == 0 || k < len(b) && isDigit(b[k]) {
				return b, false
			}
			n, _ := atoi(b[i+1 : k])
			ts.Nanos, ts.Digits = n*int(pow10[9-digits]), digits
			i = k
		}
	}
	// The thread (glog pads it with spaces), then where it logged from: "file:line]".
	for n := 0; n < 2; n++ {
		k := i
		for k < len(b) && k-i < 8 && b[k] == ' ' {
			k++
		}
		if k == i || k >= len(b) {
			return b, false
		}
		e := k
		for e < len(b) && e-k < 256 && b[e] != ' ' && b[e] != ']' {
			e++
		}
		if e < len(b) && b[e] == ']' {
			if !glogSource(b[k:e]) || e+1 < len(b) && b[e+1] != ' ' {
				return b, false
			}
			if !l.HasTime && timed {
				l.Time, l.HasTime = ts, true
			}
			l.Glog = true
			return b[min(e+1, len(b)):], true
		}
		if _, ok := atoi(b[k:e]); !ok || n > 0 || !timed {
			return b, false
		}
		i = e // a thread id
	}
	return b, false
}

// glogLevel reports glog's severity letters: INFO, WARNING, ERROR, FATAL.
func glogLevel(c byte) bool { return c == 'I' || c == 'W' || c == 'E' || c == 'F' }

// glogSource reports where a glog line was logged from: "file.ext:line", a path allowed.
func glogSource(t []byte) bool {
	c := bytes.LastIndexByte(t, ':')
	if c <= 0 || c+1 >= len(t) {
		return false
	}
	if _, ok := atoi(t[c+1:]); !ok {
		return false
	}
	return bytes.IndexByte(t[:c], '.') > 0
}
