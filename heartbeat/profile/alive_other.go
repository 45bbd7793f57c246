//go:build !unix

package profile

import "errors"

// Alive cannot tell without flock: the caller falls back on the header and the pid.
func Alive(path string) (bool, error) {
	return false, errors.New("profiler region liveness: no flock on this platform")
}
