package follow

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
)

const (
	stateVersion = 1
	// headMax is how many leading bytes identify a file's content, beside
	// its device and inode (inode numbers are reused after a delete).
	headMax = 256
	// maxStateEntries bounds what is loaded from a state file.
	maxStateEntries = 1 << 16
)

// headPrint is the FNV-1a hash of a file's first n bytes.
type headPrint struct {
	n   int
	sum uint64
}

type stateFile struct {
	Version int         `json:"version"`
	Files   []savedFile `json:"files"`
}

type savedFile struct {
	Path    string `json:"path"`
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Offset  int64  `json:"offset"`
	Skip    bool   `json:"skip,omitempty"` // inside a capped line: skip to its newline
	HeadLen int    `json:"head_len"`
	HeadSum uint64 `json:"head_fnv64a"`
	// HeaderEnd and FreedTo are the log bound's (Options.Keep): where the file's header
	// ends, and the end of what was freed after it (0: not known, nothing).
	HeaderEnd int64 `json:"header_end,omitempty"`
	FreedTo   int64 `json:"freed_to,omitempty"`
	// Payload is the Handler's checkpoint for this file at Offset (see Checkpointer).
	Payload json.RawMessage `json:"payload,omitempty"`
}

// resumable: the same file (device, inode, leading bytes), at least as long
// as the saved offset.
func (s savedFile) resumable(f *File, size int64) bool {
	if s.Dev != f.id.dev || s.Ino != f.id.ino || s.Offset < 0 || size < s.Offset {
		return false
	}
	if s.HeadLen < 0 || s.HeadLen > headMax || int64(s.HeadLen) > size {
		return false
	}
	h, err := hashHead(f.fd, s.HeadLen)
	return err == nil && h == s.HeadSum
}

func hashHead(f *os.File, n int) (uint64, error) {
	var buf [headMax]byte
	if n > 0 {
		if _, err := f.ReadAt(buf[:n], 0); err != nil {
			return 0, err
		}
	}
	h := fnv.New64a()
	h.Write(buf[:n])
	return h.Sum64(), nil
}

// loadState reads the state file; a missing or unreadable one means every
// file starts at 0 (lines may be delivered again, none are lost).
func (fw *Follower) loadState() map[string]savedFile {
	out := make(map[string]savedFile)
	if fw.opts.StatePath == "" {
		return out
	}
	b, err := os.ReadFile(fw.opts.StatePath)
	if errors.Is(err, fs.ErrNotExist) {
		return out
	}
	if err != nil {
		fw.log.Warn("state file unreadable, reading files from the start", "path", fw.opts.StatePath, "err", err)
		return out
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		fw.log.Warn("state file corrupt, reading files from the start", "path", fw.opts.StatePath, "err", err)
		return out
	}
	if st.Version != stateVersion {
		fw.log.Warn("state file version unknown, reading files from the start", "path", fw.opts.StatePath, "version", st.Version)
		return out
	}
	for i, s := range st.Files {
		if i >= maxStateEntries {
			break
		}
		out[filepath.Clean(s.Path)] = s
	}
	return out
}

// saveState writes the offsets of the followed files (temp file, fsync,
// rename).
func (fw *Follower) saveState() error {
	if fw.opts.StatePath == "" || fw.files == nil {
		return nil
	}
	st := stateFile{Version: stateVersion, Files: make([]savedFile, 0, len(fw.files))}
	for _, f := range fw.sortedFiles() {
		if f.head.n < headMax && f.readOff > int64(f.head.n) {
			n := int(min(int64(headMax), f.readOff))
			if sum, err := hashHead(f.fd, n); err == nil {
				f.head = headPrint{n: n, sum: sum}
			}
		}
		sf := savedFile{
			Path: f.path, Dev: f.id.dev, Ino: f.id.ino,
			Offset: f.offset, Skip: f.skipping,
			HeadLen: f.head.n, HeadSum: f.head.sum,
			HeaderEnd: f.headerEnd, FreedTo: f.freedTo,
		}
		if cp, ok := fw.h.(Checkpointer); ok {
			// Called between Line calls, so the payload matches Offset exactly.
			if p := cp.Checkpoint(f); json.Valid(p) {
				sf.Payload = p
			}
		}
		st.Files = append(st.Files, sf)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(fw.opts.StatePath, b); err != nil {
		fw.c.stateErrors.Add(1)
		return err
	}
	fw.savedGen = fw.stateGen
	for _, sf := range st.Files {
		if f := fw.files[sf.Path]; f != nil {
			f.savedOff = sf.Offset
		}
	}
	return nil
}

func writeFileAtomic(path string, b []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	return os.Rename(tmp.Name(), path)
}
