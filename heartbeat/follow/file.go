package follow

import (
	"bytes"
	"errors"
	"io"
	"os"
	"time"
)

// File is one followed file: an inode reached through Path. Path and Offset
// change while it is followed and may be read only during Handler calls;
// Host, PID, Device and Inode never change and may be read anywhere.
type File struct {
	path string
	host string
	pid  int
	id   fileID

	fd       *os.File // its position is always readOff
	offset   int64    // end of the last consumed byte (delivered line or skipped bytes)
	readOff  int64    // next byte to read: offset + len(carry) unless skipping
	carry    []byte   // a line begun in an earlier read, at most MaxLine bytes
	carryNUL bool     // NULs were stripped from the carried line
	skipping bool     // a capped line was delivered; skip to its newline

	lineStart int64 // where the line being delivered began
	gap       bool  // a hole or NULs came where a line began: the next line follows a gap

	// The log bound (Options.Keep).
	headerEnd int64 // the first per-op line's start (File.EndHeader); 0: not known yet
	freedTo   int64 // the end of the range freed so far
	savedOff  int64 // the offset last written to the state file
	trimOff   bool  // freeing failed for good (unsupported, not permitted): not tried again
	trimErr   bool  // a freeing error was logged and not yet followed by a success

	head     headPrint
	lastData time.Time
	idle     bool
	dirty    bool
	closed   bool
	readErr  bool // a read error was logged and not yet followed by a success

	payload []byte // the Handler's checkpoint restored with a Resumed file
}

// Payload is the Handler's checkpoint saved with this file's offset by an earlier run (see
// Checkpointer); nil unless the file was Resumed.
func (f *File) Payload() []byte { return f.payload }

// Path is the path the file is followed at.
func (f *File) Path() string { return f.path }

// Host is the host name from an nccl.<host>.<pid>.log name ("" otherwise).
func (f *File) Host() string { return f.host }

// PID is the pid from an nccl.<host>.<pid>.log name (0 otherwise).
func (f *File) PID() int { return f.pid }

// Offset is the offset just after the last consumed line: during Line, the
// end of that line (newline included); during Opened/Resumed, where reading
// starts.
func (f *File) Offset() int64 { return f.offset }

// EndHeader says that the line being delivered is the file's first that is not header (its
// first per-op line): the log bound (Options.Keep) keeps everything before it. Only the
// first call counts; call it during Line.
func (f *File) EndHeader() {
	if f.headerEnd == 0 {
		f.headerEnd = f.lineStart
	}
}

// Device and Inode identify the file.
func (f *File) Device() uint64 { return f.id.dev }

// Inode: see Device.
func (f *File) Inode() uint64 { return f.id.ino }

func newFile(path string, fd *os.File, id fileID) *File {
	host, pid, _ := ParseName(path)
	return &File{path: path, host: host, pid: pid, id: id, fd: fd}
}

// seek moves reading to off.
func (f *File) seek(off int64) error {
	if _, err := f.fd.Seek(off, io.SeekStart); err != nil {
		return err
	}
	f.readOff = off
	return nil
}

// readFile reads what the file has beyond readOff, up to budget bytes; true
// if it stopped at the budget with more to read. An empty read checks for
// truncation.
func (fw *Follower) readFile(f *File, budget int) (more bool) {
	total := 0
	for {
		n, err := f.fd.Read(fw.buf)
		if n > 0 {
			readAt := fw.now()
			if f.idle {
				f.idle = false
				fw.h.Event(f, Active)
				if f.closed {
					return false
				}
			}
			f.lastData = readAt
			fw.consume(f, fw.buf[:n], readAt)
			f.readOff += int64(n)
			if n == len(fw.buf) && fw.buf[n-1] == 0 && len(f.carry) == 0 && !f.skipping {
				fw.skipHole(f)
			}
			total += n
			fw.bytes += uint64(n)
			fw.stateGen++
		}
		if err != nil && err != io.EOF {
			fw.readError(f, err)
			return false
		}
		if err == io.EOF || n < len(fw.buf) {
			break // one system call per wake-up: a short read is the end for now
		}
		if total >= budget {
			return true
		}
	}
	if f.readErr {
		f.readErr = false
	}
	if total == 0 {
		st, err := fstatFile(f.fd)
		if err != nil {
			fw.readError(f, err)
			return false
		}
		if st.size < f.readOff {
			fw.truncated(f, st.size)
			return true
		}
	}
	return false
}

func (fw *Follower) readError(f *File, err error) {
	fw.c.readErrors.Add(1)
	if !f.readErr {
		f.readErr = true
		fw.log.Warn("reading followed file", "path", f.path, "err", err)
	}
}

// consume splits data (the bytes at f.readOff) into lines and delivers them.
// Bytes after the last newline are carried to the next read.
func (fw *Follower) consume(f *File, data []byte, readAt time.Time) {
	pos := f.readOff
	maxLine := fw.opts.MaxLine
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			pos += int64(len(data))
			fw.hold(f, data, pos, readAt)
			return
		}
		line := data[:i]
		data = data[i+1:]
		pos += int64(i) + 1
		if f.skipping {
			f.skipping = false
			f.offset = pos
			continue
		}
		var flags LineFlags
		// NULs where the line began, before any of its text: a hole (freed bytes, or what a
		// copytruncate left under its writer).
		if len(f.carry) == 0 && (f.carryNUL || (len(line) > 0 && line[0] == 0)) {
			f.gap = true
		}
		if bytes.IndexByte(line, 0) >= 0 {
			line = stripNUL(line)
			flags |= LineNUL
		}
		if len(f.carry) > 0 || f.carryNUL {
			if f.carryNUL {
				flags |= LineNUL
			}
			if room := maxLine - len(f.carry); len(line) > room {
				line = line[:room]
				flags |= LineCapped
			}
			fw.appendCarry(f, line)
			line = f.carry
			f.carry = f.carry[:0]
			f.carryNUL = false
		} else if len(line) > maxLine {
			line = line[:maxLine]
			flags |= LineCapped
		}
		f.lineStart, f.offset = f.offset, pos
		if len(line) == 0 && flags&LineNUL != 0 {
			continue // nothing but NULs
		}
		fw.deliver(f, line, readAt, flags)
	}
}

// hold carries a line's beginning (data, ending at file offset end) until its
// newline arrives, or delivers it capped once it exceeds MaxLine.
func (fw *Follower) hold(f *File, data []byte, end int64, readAt time.Time) {
	if f.skipping {
		f.offset = end
		return
	}
	if len(f.carry) == 0 && !f.carryNUL && data[0] == 0 {
		f.gap = true // NULs where a line begins, as in consume
	}
	if bytes.IndexByte(data, 0) >= 0 {
		data = stripNUL(data)
		f.carryNUL = true
		if len(data) == 0 && len(f.carry) == 0 {
			f.offset = end // a run of NULs: nothing to keep
			return
		}
	}
	maxLine := fw.opts.MaxLine
	if len(f.carry)+len(data) <= maxLine {
		fw.appendCarry(f, data)
		return
	}
	flags := LineCapped
	if f.carryNUL {
		flags |= LineNUL
	}
	fw.appendCarry(f, data[:maxLine-len(f.carry)])
	line := f.carry
	f.carry = f.carry[:0]
	f.carryNUL = false
	f.skipping = true
	f.lineStart, f.offset = f.offset, end
	fw.deliver(f, line, readAt, flags)
}

// appendCarry appends to the carry buffer, whose capacity never exceeds
// MaxLine (callers never append past it).
func (fw *Follower) appendCarry(f *File, b []byte) {
	if need := len(f.carry) + len(b); need > cap(f.carry) {
		c := make([]byte, len(f.carry), min(max(need, 2*cap(f.carry), 4<<10), fw.opts.MaxLine))
		copy(c, f.carry)
		f.carry = c
	}
	f.carry = append(f.carry, b...)
}

func (fw *Follower) deliver(f *File, line []byte, readAt time.Time, flags LineFlags) {
	if f.gap {
		flags |= LineGap
		f.gap = false
	}
	fw.lines++
	if flags&LineCapped != 0 {
		fw.c.capped.Add(1)
	}
	if flags&LinePartial != 0 {
		fw.c.partial.Add(1)
	}
	fw.h.Line(f, line, readAt, flags)
}

// flushPartial delivers the carried partial line of a file whose content
// ends here, and forgets a pending skip.
func (fw *Follower) flushPartial(f *File) {
	f.skipping = false
	if len(f.carry) == 0 {
		f.carryNUL = false
		return
	}
	flags := LinePartial
	if f.carryNUL {
		flags |= LineNUL
	}
	line := f.carry
	f.carry = f.carry[:0]
	f.carryNUL = false
	f.lineStart, f.offset = f.offset, f.readOff
	fw.deliver(f, line, fw.now(), flags)
}

// truncated restarts a file that shrank to size below its read offset.
func (fw *Follower) truncated(f *File, size int64) {
	fw.flushPartial(f)
	fw.c.truncations.Add(1)
	f.head = headPrint{}
	// A new stream: its header is still to come, and nothing of it was freed.
	f.headerEnd, f.freedTo, f.savedOff, f.gap = 0, 0, 0, false
	fw.stateGen++
	start := int64(0)
	// A writer without O_APPEND goes on at its old offset, leaving a hole.
	if d, ok := seekData(f.fd, 0); ok && d > 0 && d <= size {
		start = d
	}
	if err := f.seek(start); err != nil {
		fw.readError(f, err)
	}
	f.offset = f.readOff
	fw.h.Event(f, Truncated)
}

// skipHole jumps over the rest of a run of NULs (a hole left by a
// copytruncate under a writer without O_APPEND) instead of reading it.
func (fw *Follower) skipHole(f *File) {
	d, ok := seekData(f.fd, f.readOff)
	if !ok || d <= f.readOff {
		if err := f.seek(f.readOff); err != nil {
			fw.readError(f, err)
		}
		return
	}
	if err := f.seek(d); err != nil {
		fw.readError(f, err)
		return
	}
	f.offset = d
	f.gap = true
}

// pollAll fstats every file and reads those whose size moved.
func (fw *Follower) pollAll() {
	for _, f := range fw.files {
		fw.pollFile(f)
	}
}

func (fw *Follower) pollFile(f *File) {
	st, err := fstatFile(f.fd)
	if err != nil {
		fw.readError(f, err)
		return
	}
	if st.size != f.readOff {
		fw.markDirty(f)
	}
}

// finish reads a file to its end, delivers its partial line, sends the final
// event and forgets the file.
func (fw *Follower) finish(f *File, kind EventKind) {
	for fw.readFile(f, readBudget) && !f.closed {
	}
	if f.closed {
		return
	}
	fw.flushPartial(f)
	switch kind {
	case Rotated:
		fw.c.rotations.Add(1)
	case Deleted:
		fw.c.deletions.Add(1)
	}
	fw.h.Event(f, kind)
	fw.close(f)
	fw.stateGen++
}

// close releases the file and forgets it.
func (fw *Follower) close(f *File) {
	if f.closed {
		return
	}
	f.closed = true
	if err := f.fd.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		fw.log.Debug("closing followed file", "path", f.path, "err", err)
	}
	if fw.files[f.path] == f {
		delete(fw.files, f.path)
	}
	if fw.byID[f.id] == f {
		delete(fw.byID, f.id)
	}
	f.carry = nil
	fw.c.files.Store(uint64(len(fw.files)))
}

// checkIdle sends Idle to files without data for IdleAfter.
func (fw *Follower) checkIdle(now time.Time) {
	if fw.opts.IdleAfter < 0 {
		return
	}
	for _, f := range fw.files {
		if !f.idle && now.Sub(f.lastData) >= fw.opts.IdleAfter {
			f.idle = true
			if cap(f.carry) > 4<<10 && len(f.carry) == 0 {
				f.carry = nil // give a big idle buffer back
			}
			fw.h.Event(f, Idle)
		}
	}
}

// stripNUL removes NUL bytes in place.
func stripNUL(b []byte) []byte {
	out := b[:0]
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			out = append(out, b...)
			break
		}
		out = append(out, b[:i]...)
		b = b[i+1:]
	}
	return out
}
