package follow

import (
	"bytes"
	"fmt"
)

// TrimFailure is why the log bound could not free a file's consumed bytes.
type TrimFailure uint8

const (
	// TrimUnsupported: the filesystem cannot punch holes (the file grows without bound).
	TrimUnsupported TrimFailure = iota
	// TrimDenied: the file cannot be opened for writing (another user's file, a read-only
	// mount): run the follower as the writer's user, on a writable mount.
	TrimDenied
	// TrimError: any other failure; tried again at the next round.
	TrimError
	numTrimFailures
)

var trimFailureNames = [numTrimFailures]string{"unsupported", "denied", "error"}

func (k TrimFailure) String() string {
	if k < numTrimFailures {
		return trimFailureNames[k]
	}
	return fmt.Sprintf("TrimFailure(%d)", uint8(k))
}

func (c *counters) trimFailureCounts() map[TrimFailure]uint64 {
	out := make(map[TrimFailure]uint64, numTrimFailures)
	for k := range numTrimFailures {
		out[k] = c.trimFailures[k].Load()
	}
	return out
}

// minTrim is the least a round frees in one file: smaller holes cost a system call each
// for nothing.
const minTrim = 1 << 20

// trimAll frees, in every followed file, what lies between its header and its last
// Options.Keep bytes that were read, and saved when there is a state file.
func (fw *Follower) trimAll() {
	if fw.opts.Keep <= 0 {
		return
	}
	for _, f := range fw.files {
		if !f.trimOff && !f.closed {
			fw.trim(f)
		}
	}
}

func (fw *Follower) trim(f *File) {
	// Never free what a restart would read again: only what lies before the offset the
	// state file holds.
	safe := f.offset
	if fw.opts.StatePath != "" {
		safe = min(safe, f.savedOff)
	}
	cut := safe - fw.opts.Keep
	if f.headerEnd == 0 {
		// No per-op line yet: the header grows up to MaxHeader, then ends at a line there.
		if cut < fw.opts.MaxHeader+minTrim {
			return
		}
		b, ok := fw.lineStartBefore(f, fw.opts.MaxHeader)
		if !ok {
			return
		}
		f.headerEnd = b
		fw.stateGen++
	}
	from := max(f.headerEnd, f.freedTo)
	if cut-from < minTrim {
		return
	}
	// The hole ends where a line begins, so that a reader that starts over (a restarted
	// follower without its state, watchdog analyze) finds whole lines after it.
	cut, ok := fw.lineStartBefore(f, cut)
	if !ok || cut-from < minTrim {
		return
	}
	freed, kind, err := punchHole(f, from, cut)
	if err != nil {
		fw.c.trimFailures[kind].Add(1)
		switch kind {
		case TrimUnsupported:
			f.trimOff = true
			fw.log.Warn("cannot free the part of this log already read: the filesystem does not support punching holes (fallocate PUNCH_HOLE), so it grows without bound; put the logs on ext4, XFS, btrfs or tmpfs, or cut NCCL's per-op lines (NCCL_DEBUG_SUBSYS without COLL)",
				"path", f.path, "err", err)
		case TrimDenied:
			f.trimOff = true
			fw.log.Warn("cannot free the part of this log already read: it cannot be opened for writing, so it grows without bound; run the sidecar as the user that writes the log, on a writable mount",
				"path", f.path, "err", err)
		default:
			if !f.trimErr {
				f.trimErr = true
				fw.log.Warn("freeing the part of this log already read failed; retrying", "path", f.path, "err", err)
			}
		}
		return
	}
	f.trimErr = false
	f.freedTo = cut
	fw.stateGen++
	fw.c.freed.Add(uint64(freed))
	fw.log.Debug("freed log bytes", "path", f.path, "from", from, "to", cut, "freed", freed)
}

// lineStartBefore returns where the line holding offset off-1 begins: the offset just after
// the last newline before off, looked for in the preceding MaxLine bytes.
func (fw *Follower) lineStartBefore(f *File, off int64) (int64, bool) {
	window := min(int64(fw.opts.MaxLine)+1, int64(len(fw.buf)), off)
	if window <= 0 {
		return 0, false
	}
	buf := fw.buf[:window]
	if _, err := f.fd.ReadAt(buf, off-window); err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(buf, '\n')
	if i < 0 {
		return 0, false
	}
	return off - window + int64(i) + 1, true
}
