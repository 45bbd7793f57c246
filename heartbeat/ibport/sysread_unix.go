//go:build unix

package ibport

import (
	"errors"
	"syscall"
)

// readSmall reads a sysfs attribute into buf with one open/read/close and no allocation
// beyond the path conversion: os.Open would add a File, a finalizer and a poller probe
// per file, and the sampler reads a few hundred files a second.
func readSmall(path string, buf []byte) (int, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	n, err := syscall.Read(fd, buf)
	syscall.Close(fd)
	if err != nil {
		return 0, err
	}
	if n == len(buf) {
		return 0, errTooLong
	}
	return n, nil
}

// unsupported reports a read error by which a driver says it does not implement a counter.
func unsupported(err error) bool {
	return errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EINVAL)
}
