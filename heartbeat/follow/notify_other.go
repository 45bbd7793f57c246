//go:build !linux

package follow

import (
	"errors"
	"time"
)

// Without inotify the follower polls (Options.SafetyPoll, 10 ms by default).
type notifier struct{}

type notifyEvent struct {
	dir  string
	name []byte
	mask uint32
	wd   int32
}

const (
	evWrite = 1 << iota
	evCreate
	evGone
	evDirGone
	evIsDir
	evOverflow
)

func newNotifier() (*notifier, error)                   { return nil, errors.New("inotify is Linux only") }
func (n *notifier) add(string) error                    { return nil }
func (n *notifier) forget(int32)                        {}
func (n *notifier) read(time.Time) ([]byte, error)      { return nil, nil }
func (n *notifier) sleep(time.Duration)                 {}
func (n *notifier) wake()                               {}
func (n *notifier) close() error                        { return nil }
func (n *notifier) each(b []byte, fn func(notifyEvent)) {}
