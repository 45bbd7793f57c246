// Package syncbuf is a buffer that one goroutine writes (a logger, a console notifier) while
// another reads it: what a test needs to watch the log of a part it runs.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer safe for concurrent writes and reads; the zero value is empty.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
