//go:build !linux

package follow

import "errors"

// punchHole: freeing part of a file needs Linux's fallocate.
func punchHole(f *File, from, to int64) (int64, TrimFailure, error) {
	return 0, TrimUnsupported, errors.New("punching holes needs Linux")
}
