package analyze

import (
	"bytes"
	"io"
	"os"
)

// gapReader passes a log on without the gaps in it: runs of NUL bytes where a line begins.
// A sidecar that bounds its logs (watchdog sidecar --log-keep-mib) frees what it has read
// between a log's header and its tail by punching a hole, which reads as zeros; a
// copytruncate under a writer without O_APPEND leaves the same. Parsed, the zeros would be
// a line of garbage glued to the next one, and a hole of gigabytes one long line that hides
// the line after it. Over a file, the holes themselves are skipped with SEEK_DATA instead
// of being read. Each gap is remembered at the offset, in what it passes on, of the line
// that follows it, for the reader to tell the parser that lines are missing there.
type gapReader struct {
	r io.Reader
	f *os.File // r itself when it is a plain file: holes are skipped by seeking

	lineStart bool // the last byte passed on ended a line, or none was passed on yet
	inRun     bool // inside a run of NULs at a line start
	out       int64
	gaps      []int64 // output offsets of lines after a gap, not yet taken
	count     int     // gaps seen
	skipped   int64   // bytes of gaps skipped
}

// maxPendingGaps bounds the gaps remembered ahead of the line reader.
const maxPendingGaps = 4096

func newGapReader(r io.Reader, f *os.File) *gapReader {
	return &gapReader{r: r, f: f, lineStart: true}
}

func (g *gapReader) Read(p []byte) (int, error) {
	for {
		if g.inRun && g.f != nil {
			g.skipHole()
		}
		n, err := g.r.Read(p)
		n = g.filter(p[:n])
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// skipHole moves past the hole the current run of NULs is in, if the filesystem says where
// its data resumes.
func (g *gapReader) skipHole() {
	cur, err := g.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return
	}
	if d, ok := seekData(g.f, cur); ok && d > cur {
		g.skipped += d - cur
		return
	}
	_, _ = g.f.Seek(cur, io.SeekStart) // seekData may have moved it
}

// filter drops the runs of NULs that begin lines from b, in place, and returns what is
// left.
func (g *gapReader) filter(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	if !g.inRun && bytes.IndexByte(b, 0) < 0 {
		g.lineStart = b[len(b)-1] == '\n'
		g.out += int64(len(b))
		return len(b)
	}
	w := 0
	for i := 0; i < len(b); {
		if (g.lineStart || g.inRun) && b[i] == 0 {
			j := i
			for j < len(b) && b[j] == 0 {
				j++
			}
			if !g.inRun {
				g.count++
				if len(g.gaps) < maxPendingGaps {
					g.gaps = append(g.gaps, g.out+int64(w))
				}
			}
			g.inRun = true
			g.skipped += int64(j - i)
			i = j
			continue
		}
		g.inRun = false
		end := len(b)
		if k := bytes.IndexByte(b[i:], '\n'); k >= 0 {
			end = i + k + 1
		}
		copy(b[w:], b[i:end])
		w += end - i
		g.lineStart = b[end-1] == '\n'
		i = end
	}
	g.out += int64(w)
	return w
}

// gapBefore reports whether a gap came just before the line that starts at output offset
// at, forgetting the gaps before it.
func (g *gapReader) gapBefore(at int64) bool {
	found := false
	for len(g.gaps) > 0 && g.gaps[0] <= at {
		found = found || g.gaps[0] == at
		g.gaps = g.gaps[1:]
	}
	return found
}
