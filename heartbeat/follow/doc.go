// Package follow tails every NCCL debug log on a node: the files that match
// one or more glob patterns (by default /var/log/nccl/*.log, written by
// NCCL_DEBUG_FILE=/var/log/nccl/nccl.%h.%p.log), as they appear, grow, are
// truncated, rotated, deleted and recreated, and hands each complete line to
// a Handler within a few milliseconds of its write.
//
// # Why neither github.com/nxadm/tail nor github.com/fsnotify/fsnotify
//
// nxadm/tail v1.4.11 was read and rejected:
//   - Rotation loses lines: on a move or delete it closes the old file and
//     reopens the path without reading the old inode to EOF, and its select
//     between "modified" and "deleted" is random.
//   - Huge lines are not bounded: bufio.Reader.ReadString buffers the whole
//     line, and MaxLineSize splits it into several lines instead of capping it.
//   - Offsets are approximate (Tell "may not be completely accurate"), so the
//     resume state could deliver a line twice or lose one; it has no notion of
//     device+inode identity.
//   - Truncation is only noticed when a write event sees a smaller size, is
//     not reported to the caller, and a copytruncate followed by fast writes
//     is missed.
//   - Each line costs a string, a *Line and a channel send, plus a goroutine
//     per file; its inotify watcher is a package global.
//
// fsnotify v1.6.0 was implemented first and measured: its goroutine reads
// inotify, allocates each event's name and hands events over one at a time
// on an unbuffered channel, so every write costs goroutine wake-ups. With 8
// files at 2,000 lines/s that was 12-13% of a core, and still 6.6% when reads
// were batched every 5 ms (the kernel queue must be drained event by event).
// The same loop over raw inotify (the syscall package, no new module) with
// the waits done as blocking system calls is at 3-5% with 3 ms batching and
// delivers in ~3 ms at p99; see BenchmarkThroughput and BenchmarkLatency.
// On these VMs a thread wake-up alone accounts for ~40-50 µs of CPU, so
// wake-ups, not bytes, are the cost to cut.
//
// # Design
//
// One inotify watch per directory that holds the patterns reports writes to
// every file in it (no watch descriptor per file), and a single loop, in the
// goroutine that calls Run, does all the work:
//
//   - A write event marks the file; the loop reads it into one shared
//     128 KiB buffer and splits lines in place. Handler.Line gets a slice of
//     that buffer (or of the file's carry buffer for a line that spanned
//     reads), valid only during the call. Nothing is allocated per line or
//     per event.
//   - After a read that found events the loop leaves the inotify queue alone
//     for Options.BatchInterval (3 ms): an isolated write is read at once,
//     a steady stream is read in batches, at most ~330 wake-ups a second.
//   - A rescan (Options.Rescan, 500 ms) re-evaluates the globs and stats each
//     path: discovery, rotation, deletion and renames are decided there; a
//     create event opens a new file at once, and a rename or delete event
//     triggers a rescan at once.
//   - A safety poll (Options.SafetyPoll, 1 s) fstats every open file and reads
//     it if its size moved, covering lost events (queue overflow, filesystems
//     without inotify). Without inotify (Options.DisableWatch, non-Linux, or
//     inotify unavailable) the poll is the only trigger and defaults to
//     10 ms, and new files are found by the rescan.
//
// All Handler calls come from the goroutine that called Run, one at a time,
// so calls for one file (and for all files) are serialized. A Handler must
// not block: a slow Handler delays every file. Run starts no goroutine; it
// waits in epoll_wait, and a cancel wakes it through a pipe.
//
// # Per-file semantics
//
// A File is one inode reached through a path. Its first event is Opened or
// Resumed; its last is Rotated, Deleted or Stopped (EventKind.Final).
//
//   - Complete lines only: the newline is not part of the line. A trailing
//     partial line is held until its newline arrives. When the inode is
//     finished (deleted, rotated away, truncated) the held partial line is
//     delivered with LinePartial, since nothing can complete it any more. When
//     the Follower stops it is not delivered: the saved offset points to its
//     start, so after a restart it is read again and delivered once, whole.
//   - Lines longer than Options.MaxLine (64 KiB) are delivered as their first
//     MaxLine bytes with LineCapped; the rest up to the newline is skipped
//     without buffering it.
//   - NUL bytes are stripped and the line is flagged LineNUL; NULs or a hole where a line
//     began also flag the next line LineGap (lines may be missing before it). A copytruncate
//     under a writer that does not use O_APPEND (NCCL's fopen "w") leaves a
//     hole of NULs before the writer's next line; stripping them recovers that
//     line intact. A line that was nothing but NULs is dropped.
//   - Truncation (size < read offset): the held partial line is delivered, a
//     Truncated event is sent and reading restarts at 0 (skipping a leading
//     hole with SEEK_DATA where the filesystem supports it). A new process that
//     reuses the pid opens the same path with "w" and shows up the same way,
//     so a consumer should treat Truncated as the start of a new stream.
//   - Rename rotation, delete and recreate: the old inode is read to EOF, its
//     partial line delivered, then Rotated (the path names another file) or
//     Deleted (no file at the path) ends it, and the new file at the path is a
//     new File read from offset 0. Which of the two kinds is reported depends
//     on whether the new file already exists when the change is noticed. A
//     file renamed to another path that also matches the patterns keeps its
//     File and offset and gets a Renamed event.
//   - Idle files stay open and cost one fstat per safety poll; after
//     Options.IdleAfter without data an Idle event is sent, and Active when
//     data comes again.
//
// # Log bound
//
// NCCL never rotates its debug file and writes it without O_APPEND, at ~180 bytes per
// collective: a node of 8 ranks writes ~11 GB an hour. With Options.Keep set, each file
// keeps its header (everything before the line the Handler marks with File.EndHeader: the
// first per-op line; at most Options.MaxHeader) and its last Keep bytes, and every
// StateEvery, right after the offsets are saved, what lies between and was read and saved
// is freed with fallocate(PUNCH_HOLE|KEEP_SIZE): the blocks go back to the filesystem, the
// file keeps its size, the writer its offset, and the hole reads as zeros. The hole ends
// where a line begins, so a reader that starts over (this follower without its state,
// watchdog analyze) finds whole lines after it; such a reader gets the first of them
// flagged LineGap, since lines are missing before it. The file is opened for writing by its
// path (and must still be the same inode), so the follower needs write permission on it.
// Where the filesystem cannot punch holes, or the file cannot be opened for writing, the
// follower says so once per file and counts it (Stats.TrimFailures); it never truncates,
// which would lose what the writer wrote and the follower had not read yet.
//
// # Resume
//
// With Options.StatePath set, the offsets of followed files are saved as JSON
// (temp file + rename) every Options.StateEvery and when Run returns, keyed by
// path with device, inode, offset and a hash of the file's first 256 bytes.
// At start a file resumes at its saved offset (event Resumed) when device,
// inode and head hash match and the file is at least that long; otherwise it
// is read from 0. Options.FromEnd starts files that exist at start-up and
// have no usable saved offset at their last line boundary instead (off by
// default: the Init lines at the start of each file are needed).
//
// Limits: at most Options.MaxFiles files are followed (1024); others are
// logged once, counted in Stats.DroppedFiles and retried at each rescan, and
// when files compete for free slots the most recently modified win.
package follow
