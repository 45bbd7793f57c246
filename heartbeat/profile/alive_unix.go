//go:build unix

package profile

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Alive says whether the process that writes the region at path still runs. The plugin
// holds an exclusive flock on its region from creation to its end, and the kernel drops it
// however the process ends (exit, crash, SIGKILL, OOM kill), in whatever pid namespace: a
// free lock means a stale region. Taking a shared lock without waiting asks the question;
// the plugin never locks again, so it never waits on this.
func Alive(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("profiler region liveness: %w", err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("profiler region liveness %s: %w", path, err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false, nil
}
