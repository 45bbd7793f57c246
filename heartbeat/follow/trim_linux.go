package follow

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// punchHole frees the bytes [from, to) of f's file and returns how many bytes of disk that
// gave back. It opens the file for writing by its path and checks that the path still
// names f's inode, so a file that replaced it is never touched. The range need not be
// block-aligned: the filesystem frees the whole blocks inside it and zeroes the rest, so
// the hole reads as zeros from exactly from to exactly to.
func punchHole(f *File, from, to int64) (freed int64, kind TrimFailure, err error) {
	w, err := os.OpenFile(f.path, os.O_WRONLY, 0)
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EROFS) {
			return 0, TrimDenied, err
		}
		return 0, TrimError, err
	}
	defer w.Close()
	fd := int(w.Fd())
	var before, after unix.Stat_t
	if err := unix.Fstat(fd, &before); err != nil {
		return 0, TrimError, err
	}
	if uint64(before.Dev) != f.id.dev || before.Ino != f.id.ino {
		return 0, TrimError, fmt.Errorf("%s names another file now", f.path)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, from, to-from); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
			return 0, TrimUnsupported, fmt.Errorf("fallocate: %w", err)
		}
		return 0, TrimError, fmt.Errorf("fallocate: %w", err)
	}
	if err := unix.Fstat(fd, &after); err != nil {
		return 0, 0, nil // freed, but how much is unknown
	}
	return max(0, before.Blocks-after.Blocks) * 512, 0, nil
}
