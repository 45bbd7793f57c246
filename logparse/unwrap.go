package logparse

import "bytes"

// Unwrapper puts back together the lines a terminal or a collector broke at its width. A
// console copied from a terminal, or a collector that cuts lines at a width, breaks every
// long line into pieces of that width: the pieces after the first start mid-word, with no
// prefix. Unwrapper learns the width from the log (a line of one length followed by such a
// piece, seen wrapTimes times) and from then on puts the pieces back together before a line
// is read. Until it has learnt the width, a broken line is read as it stands. Its zero
// value is ready; one Unwrapper reads one stream.
type Unwrapper struct {
	width   int  // the width learnt; 0 until then
	prevLen int  // length of the line before, without its line end
	maxLen  int  // the longest line yet: a terminal's width is never exceeded
	off     bool // a line longer than the width learnt came: this log is not wrapped
	// cands count the lengths of lines that a piece followed, while learning.
	cands [4]struct{ n, seen int }
	held  []byte // a line of a multiple of width bytes, waiting for its rest
	probe Line
}

const (
	// wrapMin is the narrowest width taken for a terminal's: shorter lines are whole lines.
	wrapMin = 80
	// wrapTimes is how often a length must be followed by a piece to be the width.
	wrapTimes = 3
)

// piece reports whether l (raw parsed) is the rest of a broken line: nothing of a line's
// start (no NCCL prefix or level, no launcher rank, no PyTorch or launcher words), and not
// indented or a traceback's start, which are lines of their own.
func piece(l *Line, raw []byte) bool {
	if len(raw) == 0 || raw[0] == '\t' || raw[0] == '\r' || raw[0] == '\n' || bytes.HasPrefix(raw, []byte("  ")) {
		// (one space is where a cut fell before a word; two or a tab, an indented line)
		return false
	}
	if l.Host != nil || l.Level != LevelNone || l.LauncherRank >= 0 || l.Kind.FromTorch() {
		return false
	}
	return (l.Kind == KindUnknown || l.Kind == KindContinuation) && !bytes.HasPrefix(raw, []byte("Traceback"))
}

// Learn is told each line read and how it parsed: a piece after a line of n bytes makes n a
// candidate for the width, when no line so far was longer.
func (u *Unwrapper) Learn(l *Line, raw []byte) {
	n := u.prevLen
	u.prevLen = len(lineBody(raw))
	if u.width != 0 || n < wrapMin || l.Kind == KindColl || !piece(l, raw) {
		return
	}
	free := -1
	for i := range u.cands {
		c := &u.cands[i]
		switch {
		case c.n == n:
			if c.seen++; c.seen >= wrapTimes {
				u.width = n
			}
			return
		case c.seen == 0 && free < 0:
			free = i
		}
	}
	if free >= 0 {
		u.cands[free].n, u.cands[free].seen = n, 1
	}
}

// Wrapping reports whether a width has been learnt: Next then holds lines back.
func (u *Unwrapper) Wrapping() bool { return u.width != 0 }

// Next takes one line as read and returns the lines to read now: none while a broken line
// waits for its rest, the line itself, or the line put back together. A held line that no
// piece follows is returned before the line that follows it.
func (u *Unwrapper) Next(raw []byte, emit func([]byte)) {
	if u.width == 0 {
		emit(raw)
		return
	}
	line := lineBody(raw)
	if len(line) > u.width {
		// Not a terminal's width after all: read the rest as it stands.
		u.Flush(emit)
		u.width, u.off = 0, true
		emit(raw)
		return
	}
	if len(u.held) > 0 {
		Parse(line, &u.probe)
		if piece(&u.probe, line) && len(u.held)+len(line) < 1<<16 {
			u.held = append(u.held, line...)
			if len(line) == u.width {
				return // the piece is whole: more follow
			}
			emit(u.held)
			u.held = u.held[:0]
			return
		}
		emit(u.held)
		u.held = u.held[:0]
	}
	if len(line) == u.width {
		u.held = append(u.held[:0], line...)
		return
	}
	emit(raw)
}

// Flush returns a line still held (the file ended, or a gap came).
func (u *Unwrapper) Flush(emit func([]byte)) {
	if len(u.held) > 0 {
		emit(u.held)
		u.held = u.held[:0]
	}
}

// lineBody is raw without its line end: it runs on every line, where bytes.TrimRight's
// cutset costs a tenth of the read.
func lineBody(raw []byte) []byte {
	for len(raw) > 0 && (raw[len(raw)-1] == '\n' || raw[len(raw)-1] == '\r') {
		raw = raw[:len(raw)-1]
	}
	return raw
}
