//go:build !linux

package follow

import (
	"hash/fnv"
	"io"
	"os"
)

// The sidecar runs on Linux. Elsewhere the package builds and follows files,
// but a file's identity is its path, so a rename rotation is seen as a
// truncation or not at all, and holes are not skipped.

type fileID struct{ dev, ino uint64 }

type statInfo struct {
	id      fileID
	size    int64
	mtime   int64
	regular bool
}

func pathID(path string) fileID {
	h := fnv.New64a()
	io.WriteString(h, path)
	return fileID{ino: h.Sum64()}
}

func fromFileInfo(path string, fi os.FileInfo) statInfo {
	return statInfo{id: pathID(path), size: fi.Size(), mtime: fi.ModTime().UnixNano(), regular: fi.Mode().IsRegular()}
}

func statPath(path string) (statInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return statInfo{}, err
	}
	return fromFileInfo(path, fi), nil
}

func fstatFile(f *os.File) (statInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		return statInfo{}, err
	}
	return fromFileInfo(f.Name(), fi), nil
}

func seekData(f *os.File, off int64) (int64, bool) { return 0, false }
