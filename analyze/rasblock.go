package analyze

import (
	"bytes"
	"errors"

	"github.com/ncclwatch/watchdog/heartbeat/ras"
)

// rasBlock is a text RAS report being read out of a log: ncclras's reply saved whole, or
// pasted into a console between the job's own lines.
type rasBlock struct {
	buf   []byte
	lines int64
}

// feed reads one line: into the RAS report it continues, else as a log line. A line that
// cannot be part of the report ends it and is read as a log line (a PyTorch timeout
// printed after the report is the job's, not the report's).
func (fr *fileReader) feed(raw []byte) {
	if fr.rasBlk != nil {
		if ras.InText(raw) && len(fr.rasBlk.buf)+len(raw) < maxRAS {
			fr.rasBlk.add(raw)
			return
		}
		fr.endRAS()
	}
	if len(raw) > 0 && raw[0] == 'N' && ras.TextStart(raw) {
		fr.rasBlk = &rasBlock{}
		fr.rasBlk.add(raw)
		return
	}
	fr.apply(raw)
}

func (b *rasBlock) add(raw []byte) {
	b.buf = append(b.buf, raw...)
	if len(raw) == 0 || raw[len(raw)-1] != '\n' {
		b.buf = append(b.buf, '\n')
	}
	b.lines++
}

// endRAS parses the report being read. What turns out not to be one (a version line
// alone, nothing of a report after it) is read as log lines after all.
func (fr *fileReader) endRAS() {
	b := fr.rasBlk
	if b == nil {
		return
	}
	fr.rasBlk = nil
	rep, err := ras.ParseText(b.buf)
	if rep == nil || !reportBody(b.buf) {
		for rest := b.buf; len(rest) > 0; {
			i := bytes.IndexByte(rest, '\n') + 1
			fr.apply(rest[:i])
			rest = rest[i:]
		}
		return
	}
	st := &fr.res.stat
	st.Lines += b.lines
	if err != nil && errors.Is(err, ras.ErrTruncated) && st.ReadErr == "" {
		// As a report read alone: kept, and said to be cut.
		st.ReadErr = err.Error()
	}
	fr.res.ras = append(fr.res.ras, rep)
}

// reportBody reports whether a block holds more of a report than its version lines.
func reportBody(b []byte) bool {
	return bytes.Contains(b, []byte("\nJob summary")) || bytes.Contains(b, []byte("\nCommunicators")) ||
		bytes.Contains(b, []byte("\nGroup "))
}
