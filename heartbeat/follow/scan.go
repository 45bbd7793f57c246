package follow

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// patternDirs returns the existing directories that may hold matches.
func (fw *Follower) patternDirs() []string {
	var dirs []string
	for _, p := range fw.opts.Patterns {
		dir := filepath.Dir(p)
		if !hasMeta(dir) {
			if !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
			continue
		}
		found, _ := filepath.Glob(dir)
		for _, d := range found {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	if len(dirs) > maxDirs {
		dirs = dirs[:maxDirs]
	}
	return dirs
}

func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// addWatches (re)adds an inotify watch on every directory that may hold
// matches: cheap when already watched, and it recovers a directory that was
// deleted and created again.
func (fw *Follower) addWatches() {
	if fw.notify == nil {
		return
	}
	for _, d := range fw.patternDirs() {
		if err := fw.notify.add(d); err != nil && !os.IsNotExist(err) {
			fw.c.watchErrors.Add(1)
			fw.log.Debug("watching directory", "dir", d, "err", err)
		}
	}
}

func (fw *Follower) matches(path string) bool {
	if fw.isState(path) {
		return false
	}
	for _, p := range fw.opts.Patterns {
		if ok, _ := filepath.Match(p, path); ok {
			return true
		}
	}
	return false
}

// isState reports whether path is the state file or one of its temporary
// files, which a broad pattern could match.
func (fw *Follower) isState(path string) bool {
	sp := fw.opts.StatePath
	if sp == "" || filepath.Dir(path) != filepath.Dir(sp) {
		return false
	}
	base := filepath.Base(path)
	return base == filepath.Base(sp) || strings.HasPrefix(base, "."+filepath.Base(sp)+".tmp-")
}

type match struct {
	path  string
	id    fileID
	size  int64
	mtime int64
}

// rescan re-evaluates the patterns: files whose path no longer names them are
// renamed, rotated or deleted; new paths are opened, newest first when slots
// are short.
func (fw *Follower) rescan() {
	var found []match
	byPath := make(map[string]int)
	for _, p := range fw.opts.Patterns {
		paths, _ := filepath.Glob(p)
		for _, path := range paths {
			if _, dup := byPath[path]; dup || fw.isState(path) {
				continue
			}
			st, err := statPath(path)
			if err != nil || !st.regular {
				continue
			}
			byPath[path] = len(found)
			found = append(found, match{path: path, id: st.id, size: st.size, mtime: st.mtime})
		}
	}

	var byID map[fileID]int // built only when a file left its path
	for _, f := range fw.sortedFiles() {
		if i, ok := byPath[f.path]; ok && found[i].id == f.id {
			if found[i].size != f.readOff {
				fw.markDirty(f)
			}
			continue
		}
		if byID == nil {
			byID = make(map[fileID]int, len(found))
			for i, m := range found {
				byID[m.id] = i
			}
		}
		if i, ok := byID[f.id]; ok && fw.files[found[i].path] == nil {
			fw.rename(f, found[i].path)
			continue
		}
		if _, ok := byPath[f.path]; ok {
			fw.finish(f, Rotated)
		} else {
			fw.finish(f, Deleted)
		}
	}

	var fresh []match
	for _, m := range found {
		if fw.files[m.path] == nil {
			fresh = append(fresh, m)
		}
	}
	if len(fresh) > fw.opts.MaxFiles-len(fw.files) {
		slices.SortStableFunc(fresh, func(a, b match) int {
			switch {
			case a.mtime > b.mtime:
				return -1
			case a.mtime < b.mtime:
				return 1
			}
			return 0
		})
	}
	for _, m := range fresh {
		if fw.byID[m.id] != nil {
			fw.skip(m.path, "duplicate", nil)
			continue
		}
		fw.open(m.path, m.size)
	}
	for path := range fw.skipped {
		if _, ok := byPath[path]; !ok {
			delete(fw.skipped, path) // gone: log it again if it comes back
		}
	}
	fw.checkIdle(fw.now())
}

// discover opens a path reported by a create event.
func (fw *Follower) discover(path string) {
	st, err := statPath(path)
	if err != nil || !st.regular {
		return
	}
	if g := fw.byID[st.id]; g != nil {
		fw.rescanNow = true // a followed file moved here
		return
	}
	fw.open(path, st.size)
}

func (fw *Follower) rename(f *File, to string) {
	delete(fw.files, f.path)
	f.path = to
	fw.files[to] = f
	delete(fw.skipped, to)
	fw.c.renames.Add(1)
	fw.stateGen++
	fw.h.Event(f, Renamed)
}

// skip records a path that is not followed, logging it once.
func (fw *Follower) skip(path, why string, err error) {
	if _, ok := fw.skipped[path]; ok {
		return
	}
	if len(fw.skipped) < maxSkipped {
		fw.skipped[path] = struct{}{}
	}
	switch why {
	case "over MaxFiles":
		fw.c.dropped.Add(1)
		fw.log.Warn("not following file: too many files", "path", path, "max_files", fw.opts.MaxFiles)
	case "duplicate":
		fw.log.Debug("not following file: same file as another path", "path", path)
	default:
		fw.c.readErrors.Add(1)
		fw.log.Warn("not following file", "path", path, "reason", why, "err", err)
	}
}

// open starts following path; statSize is its size seen by the caller.
func (fw *Follower) open(path string, statSize int64) {
	if fw.files[path] != nil {
		return
	}
	if len(fw.files) >= fw.opts.MaxFiles {
		fw.skip(path, "over MaxFiles", nil)
		return
	}
	fd, err := os.Open(path)
	if err != nil {
		if !os.IsNotExist(err) {
			fw.skip(path, "open failed", err)
		}
		return
	}
	st, err := fstatFile(fd)
	if err != nil || !st.regular {
		fd.Close()
		if err != nil {
			fw.skip(path, "stat failed", err)
		}
		return
	}
	if fw.byID[st.id] != nil {
		fd.Close()
		fw.skip(path, "duplicate", nil)
		return
	}
	delete(fw.skipped, path)
	f := newFile(path, fd, st.id)
	f.lastData = fw.now()
	kind := Opened
	if s, ok := fw.saved[path]; ok {
		delete(fw.saved, path)
		if s.resumable(f, st.size) {
			f.offset, f.readOff, f.skipping = s.Offset, s.Offset, s.Skip
			f.head = headPrint{n: s.HeadLen, sum: s.HeadSum}
			f.savedOff = s.Offset
			if s.HeaderEnd > 0 && s.HeaderEnd <= s.Offset && s.FreedTo <= s.Offset {
				f.headerEnd, f.freedTo = s.HeaderEnd, max(s.FreedTo, 0)
			}
			f.payload = s.Payload
			kind = Resumed
		}
	} else if fw.initial && fw.opts.FromEnd {
		off, skip := fw.lastLineStart(f, st.size)
		f.offset, f.readOff, f.skipping = off, off, skip
	}
	if f.readOff != 0 {
		if err := f.seek(f.readOff); err != nil {
			fd.Close()
			fw.skip(path, "seek failed", err)
			return
		}
	}
	fw.files[path] = f
	fw.byID[st.id] = f
	fw.c.files.Store(uint64(len(fw.files)))
	fw.stateGen++
	fw.h.Event(f, kind)
	fw.markDirty(f)
}

// lastLineStart finds where the last line of a file of this size begins, so
// that following from the end does not deliver the tail of a line; with no
// newline in the last MaxLine bytes it skips to the next newline.
func (fw *Follower) lastLineStart(f *File, size int64) (off int64, skipping bool) {
	if size == 0 {
		return 0, false
	}
	window := min(int64(fw.opts.MaxLine)+1, size)
	buf := make([]byte, window)
	if _, err := f.fd.ReadAt(buf, size-window); err != nil {
		return size, false
	}
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		return size - window + int64(i) + 1, false
	}
	if window == size {
		return 0, false
	}
	return size, true
}
