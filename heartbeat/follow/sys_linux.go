package follow

import (
	"os"
	"syscall"
)

// fileID is a file's identity: device and inode.
type fileID struct{ dev, ino uint64 }

type statInfo struct {
	id      fileID
	size    int64
	mtime   int64 // ns
	regular bool
}

func fromStat(st *syscall.Stat_t) statInfo {
	return statInfo{
		id:      fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)},
		size:    st.Size,
		mtime:   int64(st.Mtim.Sec)*1e9 + int64(st.Mtim.Nsec),
		regular: st.Mode&syscall.S_IFMT == syscall.S_IFREG,
	}
}

// statPath stats a path, following symlinks, without allocating a FileInfo
// (the rescan stats every followed path twice a second).
func statPath(path string) (statInfo, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Stat(path, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return statInfo{}, &os.PathError{Op: "stat", Path: path, Err: err}
		}
		return fromStat(&st), nil
	}
}

// fstatFile stats an open file without allocating.
func fstatFile(f *os.File) (statInfo, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return statInfo{}, err
	}
	var st syscall.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fstat(int(fd), &st)
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return statInfo{}, err
	}
	if serr != nil {
		return statInfo{}, &os.PathError{Op: "fstat", Path: f.Name(), Err: serr}
	}
	return fromStat(&st), nil
}

const seekDataWhence = 3 // SEEK_DATA, Linux 3.1+

// seekData returns the offset of the first data at or after off, to skip a
// hole; ok is false where the filesystem cannot tell. It moves the file
// position, which the caller sets again.
func seekData(f *os.File, off int64) (int64, bool) {
	d, err := f.Seek(off, seekDataWhence)
	if err != nil {
		return 0, false
	}
	return d, true
}
