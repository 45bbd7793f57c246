package follow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// notifier is an inotify instance watching the directories that hold the
// patterns. One watch per directory reports writes to every file in it, so
// no watch descriptor is spent per file.
//
// The follower waits in epoll_wait and nanosleep itself, as blocking system
// calls, rather than through the Go poller and timers: parking a goroutine
// and waking it costs the runtime scheduler several thread wake-ups, which
// at hundreds of batches per second was most of the CPU (see
// BenchmarkThroughput).
type notifier struct {
	fd    int // inotify, non-blocking
	ep    int // epoll over fd and wakeR
	wakeR int // pipe that wake writes to
	wakeW int
	buf   []byte

	mu     sync.Mutex // wake against close: never write to a reused fd
	closed bool

	dirs   map[int32]string // watch descriptor -> directory
	byPath map[string]int32
}

const watchMask = syscall.IN_MODIFY | syscall.IN_CREATE | syscall.IN_DELETE |
	syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF |
	syscall.IN_MOVE_SELF | syscall.IN_ONLYDIR |
	syscall.IN_EXCL_UNLINK // no events for writes to files already unlinked

const (
	inotifyHeader = syscall.SizeofInotifyEvent
	maxNotifyDirs = 256
)

func newNotifier() (n *notifier, err error) {
	n = &notifier{fd: -1, ep: -1, wakeR: -1, wakeW: -1}
	defer func() {
		if err != nil {
			n.close()
			n = nil
		}
	}()
	if n.fd, err = syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK); err != nil {
		return n, fmt.Errorf("inotify_init1: %w", err)
	}
	if n.ep, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return n, fmt.Errorf("epoll_create1: %w", err)
	}
	var p [2]int
	if err = syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		return n, fmt.Errorf("pipe2: %w", err)
	}
	n.wakeR, n.wakeW = p[0], p[1]
	for _, fd := range []int{n.fd, n.wakeR} {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
		if err = syscall.EpollCtl(n.ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return n, fmt.Errorf("epoll_ctl: %w", err)
		}
	}
	n.buf = make([]byte, 64<<10)
	n.dirs = make(map[int32]string)
	n.byPath = make(map[string]int32)
	return n, nil
}

// add watches dir; adding it again is cheap and picks up a directory that
// was deleted and created again.
func (n *notifier) add(dir string) error {
	if _, ok := n.byPath[dir]; !ok && len(n.byPath) >= maxNotifyDirs {
		return errors.New("too many directories")
	}
	wd, err := syscall.InotifyAddWatch(n.fd, dir, watchMask)
	if err != nil {
		return &os.PathError{Op: "inotify_add_watch", Path: dir, Err: err}
	}
	if old, ok := n.byPath[dir]; ok && old != int32(wd) {
		delete(n.dirs, old)
	}
	n.dirs[int32(wd)] = dir
	n.byPath[dir] = int32(wd)
	return nil
}

func (n *notifier) forget(wd int32) {
	if dir, ok := n.dirs[wd]; ok {
		delete(n.dirs, wd)
		if n.byPath[dir] == wd {
			delete(n.byPath, dir)
		}
	}
}

// read returns the queued events, waiting for some until the deadline
// (nil, nil when it passes or wake was called).
func (n *notifier) read(deadline time.Time) ([]byte, error) {
	for {
		k, err := syscall.Read(n.fd, n.buf)
		if k > 0 {
			return n.buf[:k], nil
		}
		if err != nil && err != syscall.EAGAIN && err != syscall.EINTR {
			return nil, fmt.Errorf("reading inotify: %w", err)
		}
		ms := int((time.Until(deadline) + time.Millisecond - 1) / time.Millisecond)
		if ms <= 0 {
			return nil, nil
		}
		var evs [2]syscall.EpollEvent
		k, err = syscall.EpollWait(n.ep, evs[:], ms)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("epoll_wait: %w", err)
		}
		if k == 0 {
			return nil, nil
		}
		for _, ev := range evs[:k] {
			if int(ev.Fd) == n.wakeR {
				var b [64]byte
				syscall.Read(n.wakeR, b[:])
				return nil, nil
			}
		}
	}
}

// sleep blocks the calling thread (see notifier).
func (n *notifier) sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}

// wake makes a pending or the next read return at once; safe from any
// goroutine, and after close.
func (n *notifier) wake() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.closed {
		syscall.Write(n.wakeW, []byte{1})
	}
}

func (n *notifier) close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var first error
	for _, fd := range []int{n.fd, n.ep, n.wakeR, n.wakeW} {
		if fd >= 0 {
			if err := syscall.Close(fd); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// notifyEvent is one decoded inotify event; name aliases the read buffer.
type notifyEvent struct {
	dir  string // "" for a queue overflow or an unknown watch
	name []byte
	mask uint32
	wd   int32
}

const (
	evWrite    = syscall.IN_MODIFY
	evCreate   = syscall.IN_CREATE | syscall.IN_MOVED_TO
	evGone     = syscall.IN_DELETE | syscall.IN_MOVED_FROM
	evDirGone  = syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_IGNORED
	evIsDir    = syscall.IN_ISDIR
	evOverflow = syscall.IN_Q_OVERFLOW
)

// each decodes the events in b.
func (n *notifier) each(b []byte, fn func(notifyEvent)) {
	for len(b) >= inotifyHeader {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		nameLen := int(binary.NativeEndian.Uint32(b[12:]))
		if inotifyHeader+nameLen > len(b) {
			return
		}
		name := b[inotifyHeader : inotifyHeader+nameLen]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		b = b[inotifyHeader+nameLen:]
		fn(notifyEvent{dir: n.dirs[wd], name: name, mask: mask, wd: wd})
	}
}
