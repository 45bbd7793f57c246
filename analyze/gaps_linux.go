package analyze

import "os"

// seekData returns where data resumes at or after off (SEEK_DATA, Linux 3.1+); false where
// the filesystem cannot tell.
func seekData(f *os.File, off int64) (int64, bool) {
	d, err := f.Seek(off, 3)
	return d, err == nil
}
