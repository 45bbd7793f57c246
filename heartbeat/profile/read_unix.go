//go:build unix

package profile

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// slotTries bounds how often Read copies a slot that a writer keeps entering before it
// reports the slot Busy; the first tries only yield, the later ones sleep a little.
const slotTries = 1000

// slotRetries counts copies of a slot redone because a writer was inside it (tests read it
// to show the retry path ran).
var slotRetries atomic.Int64

// Read maps the region at path read-only and copies it consistently: the header word by
// word, each comm slot between two loads of its seqlock (retried while they differ or are
// odd). The writer is another process, so every load is an atomic one: that orders the
// copy between the two sequence loads on every architecture, as the plugin's stores are
// ordered by its release fence.
func Read(path string) (*Region, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read profiler region: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read profiler region: %w", err)
	}
	size := fi.Size()
	if size < headerSize || size > maxFileSize {
		// Too small to map usefully (or absurd): let Decode say what it is.
		b, err := io.ReadAll(io.LimitReader(f, headerSize))
		if err != nil {
			return nil, fmt.Errorf("read profiler region %s: %w", path, err)
		}
		if size > maxFileSize {
			return nil, fmt.Errorf("%w: %s is %d bytes", ErrCorrupt, path, size)
		}
		_, err = Decode(b)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map profiler region %s: %w", path, err)
	}
	defer syscall.Munmap(mem)
	r, err := readMapped(mem)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.Path = path
	return r, nil
}

// readMapped copies and decodes a mapped region. A file truncated while mapped faults on
// access; SetPanicOnFault turns that into a recoverable panic and then an error.
func readMapped(mem []byte) (r *Region, err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			re, ok := p.(runtime.Error)
			if !ok {
				panic(p)
			}
			r, err = nil, fmt.Errorf("%w: the file shrank while read: %v", ErrTruncated, re)
		}
	}()
	img := make([]byte, len(mem))
	loadWords(img[:headerSize], mem[:headerSize])
	g, err := checkHeader(img)
	if err != nil {
		return nil, err
	}
	busy := make([]bool, g.maxComms)
	for i := range g.maxComms {
		off := g.slot(i)
		busy[i] = !copySlot(img[off:off+g.commSize], mem[off:off+g.commSize], g.maxPeers)
	}
	return decode(img, g, busy)
}

// copySlot copies one comm slot (its header, the peer rows in use, its history and timings) between two equal,
// even loads of its sequence number.
func copySlot(dst, src []byte, maxPeers int) bool {
	for try := range slotTries {
		s1 := load64(src, chSeq)
		if s1%2 == 0 {
			loadWords(dst[:commHdrSize], src[:commHdrSize])
			n := 0
			if binary.LittleEndian.Uint32(dst[chState:]) == slotLive {
				n = min(int(binary.LittleEndian.Uint32(dst[chNPeers:])), maxPeers)
			}
			end := commHdrSize + n*peerSize
			loadWords(dst[commHdrSize:end], src[commHdrSize:end])
			if n := len(src) - tailSize; n >= end {
				loadWords(dst[n:], src[n:])
			}
			if load64(src, chSeq) == s1 {
				binary.LittleEndian.PutUint64(dst[chSeq:], s1)
				return true
			}
		}
		slotRetries.Add(1)
		if try < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
	}
	return false
}

func load64(b []byte, off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}

// loadWords copies src to dst 8 bytes at a time with atomic loads; both are 8-aligned
// (the mapping is page aligned and every layout offset is a multiple of 8).
func loadWords(dst, src []byte) {
	for i := 0; i+8 <= len(src); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], load64(src, i))
	}
}
