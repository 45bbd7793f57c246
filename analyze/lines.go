package analyze

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/ncclwatch/watchdog/logparse"
)

// Reading a file is two stages: cutting its bytes into lines (and, when the stages run apart,
// parsing each one: stateless but for the cache of the previous prefix), then applying the
// lines in order to the file's processes (stateful: routing, unwrapping, fragments,
// records). The cutter reads blocks straight into a batch, with no copy but the kernel's,
// and the applier takes the batch. When a core would otherwise be idle (one large console,
// the last files of a folder) the stages run on two goroutines a few batches apart, the
// cutter parsing too; otherwise one goroutine cuts a block and applies it, parsing each line
// as it goes, with no handoff.

// lineMark says what the cutter found at a line besides its bytes.
type lineMark uint8

const (
	// markGap: lines are missing before this one (a hole, a run of NULs).
	markGap lineMark = 1 << iota
	// markCut: the line was longer than maxLine; these are its first maxLine bytes, the
	// rest is dropped.
	markCut
	// markEmpty: no line here, only its marks (a gap at the end of the file).
	markEmpty
)

// batchLine is one line of a batch: buf[start:end].
type batchLine struct {
	start, end int
	mark       lineMark
}

// lineBatch holds the lines of one block of a file.
type lineBatch struct {
	buf   []byte
	lines []batchLine
	// parsed holds each line parsed, when the cutter parses (parse set).
	parsed []logparse.Line
	parse  bool
	err    error // on the last batch of a file: nil at its end, else why reading stopped
	last   bool
}

// Block sizes: what the cutter reads at once, inline and across goroutines. Inline, a block
// stays in the core's cache; across goroutines, a larger one keeps handoffs rare, and three
// in flight keep both stages busy (each parsed line takes 1.4 KB of the batch).
const (
	inlineBlock    = 64 << 10
	pipelineBlock  = 128 << 10
	batchesAhead   = 3
	avgLineLenHint = 128
)

var inlineBatches = sync.Pool{New: func() any { return newBatch(inlineBlock, false) }}

func newBatch(block int, parse bool) *lineBatch {
	b := &lineBatch{buf: make([]byte, 0, block+4<<10), lines: make([]batchLine, 0, block/avgLineLenHint)}
	if parse {
		b.parsed = make([]logparse.Line, 0, block/avgLineLenHint)
	}
	return b
}

// lineCutter is the first stage: it reads blocks of the input, cuts them into lines, notes
// the gaps before them, and parses them when its batches ask for it.
type lineCutter struct {
	r      io.Reader
	gaps   *gapReader
	parser logparse.Parser
	block  int
	carry  []byte // the start of a line the previous block ended in
	pos    int64  // offset of the next line in what the gap reader passes on
	// skipping: inside a line longer than maxLine, past its first maxLine bytes.
	skipping bool
	eof      bool
	err      error
	lines    int64
}

// newCutter reads what br holds and then, past it, the reader under it (under, the gap
// reader br reads from), so that blocks are read straight into batches.
func newCutter(br *bufio.Reader, under *gapReader, block int) *lineCutter {
	c := &lineCutter{gaps: under, block: block}
	if under == nil {
		c.r = br
		return c
	}
	head, _ := br.Peek(br.Buffered())
	c.r = io.MultiReader(bytes.NewReader(head), under)
	return c
}

// fill cuts the next block into b: at least one line, unless the input ends first (then
// b.last is set, with b.err).
func (c *lineCutter) fill(ctx context.Context, b *lineBatch) {
	b.buf, b.lines, b.parsed, b.err, b.last = append(b.buf[:0], c.carry...), b.lines[:0], b.parsed[:0], nil, false
	c.carry = c.carry[:0]
	from, scanned := 0, 0
	before := c.lines
	for {
		c.read(b)
		if from = c.cut(b, from, scanned); len(b.lines) > 0 || b.last {
			break
		}
		// No line ends in what was read: the next read's bytes are searched, not these.
		scanned = len(b.buf)
	}
	if before>>16 != c.lines>>16 && ctx.Err() != nil {
		b.last, b.err = true, ctx.Err()
	}
}

// read appends up to a block of input to b.buf.
func (c *lineCutter) read(b *lineBatch) {
	if c.eof {
		return
	}
	want := len(b.buf) + c.block
	if cap(b.buf) < want {
		b.buf = append(b.buf[:cap(b.buf)], make([]byte, want-cap(b.buf))...)[:len(b.buf)]
	}
	for len(b.buf) < want {
		n, err := c.r.Read(b.buf[len(b.buf):want])
		b.buf = b.buf[:len(b.buf)+n]
		if err != nil {
			c.eof = true
			if err != io.EOF {
				c.err = fmt.Errorf("read: %w", err)
			}
			return
		}
		if n > 0 && bytes.IndexByte(b.buf[len(b.buf)-n:], '\n') >= 0 {
			return
		}
	}
}

// cut makes lines of the complete lines in b.buf from from on (no line ends before
// scanned), and returns where the bytes not yet cut start: with lines made, the start of a
// line is kept for the next block; without, more of it must be read first.
func (c *lineCutter) cut(b *lineBatch, from, scanned int) int {
	start := from
	for {
		at := max(start, scanned)
		nl := bytes.IndexByte(b.buf[at:], '\n')
		if nl < 0 {
			break
		}
		end := at + nl + 1
		c.line(b, start, end)
		start = end
	}
	rest := len(b.buf) - start
	switch {
	case c.eof:
		if rest > 0 {
			c.line(b, start, len(b.buf))
		} else if c.gaps != nil && !c.skipping && c.gaps.gapBefore(c.pos) {
			// A gap at the very end: the processes are told all the same.
			b.lines = append(b.lines, batchLine{start: start, end: start, mark: markGap | markEmpty})
		}
		b.last, b.err = true, c.err
		return len(b.buf)
	case c.skipping:
		// The rest of a line too long to read: dropped.
		c.pos += int64(rest)
		b.buf = b.buf[:start]
		return start
	case rest >= maxLine:
		// A line longer than any NCCL prints: its first maxLine bytes are read, the rest
		// dropped up to its end.
		c.line(b, start, start+maxLine)
		c.pos += int64(rest - maxLine)
		c.skipping = true
		b.buf = b.buf[:start+maxLine]
		return len(b.buf)
	case len(b.lines) > 0:
		c.carry = append(c.carry, b.buf[start:]...)
		b.buf = b.buf[:start]
		return start
	}
	return start
}

// line adds buf[start:end] to b, unless it is the end of a line whose start was cut.
func (c *lineCutter) line(b *lineBatch, start, end int) {
	var mark lineMark
	if c.gaps != nil && !c.skipping && c.gaps.gapBefore(c.pos) {
		mark = markGap
	}
	c.pos += int64(end - start)
	if c.skipping {
		c.skipping = false
		if mark != 0 {
			b.lines = append(b.lines, batchLine{start: start, end: start, mark: mark | markEmpty})
		}
		return
	}
	if end-start > maxLine || (end-start == maxLine && b.buf[end-1] != '\n') {
		mark |= markCut
		end = start + maxLine
	}
	b.lines = append(b.lines, batchLine{start: start, end: end, mark: mark})
	c.lines++
	if b.parse {
		// Slots are reused as they are: Parse sets every field a line's kind uses.
		if n := len(b.parsed); n < cap(b.parsed) {
			b.parsed = b.parsed[:n+1]
		} else {
			b.parsed = append(b.parsed, logparse.Line{})
		}
		c.parser.Parse(b.buf[start:end:end], &b.parsed[len(b.parsed)-1])
	}
}

// readMode says how a file is read: its stages on one goroutine or two, and the block
// (0: inlineBlock or pipelineBlock; tests cut smaller ones).
type readMode struct {
	pipeline bool
	block    int
}

// read is the second stage: it applies every line of the file, from blocks cut here or,
// with pipeline, on another goroutine.
func (fr *fileReader) read(ctx context.Context, r *bufio.Reader, mode readMode) error {
	if !mode.pipeline {
		block := cmp.Or(mode.block, inlineBlock)
		cut := newCutter(r, fr.gaps, block)
		var b *lineBatch
		if block == inlineBlock {
			// A folder of hundreds of files would otherwise take a batch's memory each.
			b = inlineBatches.Get().(*lineBatch)
			defer inlineBatches.Put(b)
		} else {
			b = newBatch(block, false)
		}
		for {
			cut.fill(ctx, b)
			fr.applyBatch(b)
			if b.last {
				return b.err
			}
		}
	}
	block := cmp.Or(mode.block, pipelineBlock)
	cut := newCutter(r, fr.gaps, block)
	full := make(chan *lineBatch, batchesAhead)
	free := make(chan *lineBatch, batchesAhead+1)
	for range batchesAhead + 1 {
		free <- newBatch(block, true)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(full)
		for {
			var b *lineBatch
			select {
			case b = <-free:
			case <-stop:
				return
			}
			// The stages balance themselves: the cutter parses only while the applier
			// has batches waiting; when it waits, it gets the next block unparsed and
			// parses it itself.
			b.parse = len(full) > 0
			cut.fill(ctx, b)
			full <- b
			if b.last {
				return
			}
		}
	}()
	// The cutter returns at the end of the input, on a read error or a cancelled context;
	// stop and done make sure it has returned before the input is closed.
	defer func() {
		close(stop)
		for range full {
		}
		<-done
	}()
	for b := range full {
		fr.applyBatch(b)
		if b.last {
			return b.err
		}
		free <- b
	}
	return nil
}

// applyBatch applies a batch's lines in order.
func (fr *fileReader) applyBatch(b *lineBatch) {
	st := &fr.res.stat
	for i, m := range b.lines {
		raw := b.buf[m.start:m.end:m.end]
		if m.mark&markGap != 0 {
			fr.wrap.Flush(fr.feed)
			fr.endRAS()
			fr.gap()
		}
		if m.mark&markEmpty != 0 {
			continue
		}
		if b.parse {
			fr.pre, fr.preRaw = &b.parsed[i], raw
		}
		if m.mark&markCut != 0 {
			st.TooLong++
			fr.wrap.Flush(fr.feed)
			fr.endRAS()
			fr.apply(raw)
		} else if !fr.wrap.Wrapping() {
			fr.feed(raw)
		} else {
			fr.wrap.Next(raw, fr.feed)
		}
		fr.pre, fr.preRaw = nil, nil
	}
	if b.last {
		fr.wrap.Flush(fr.feed)
	}
}

// parsed is raw parsed: the line the cutter parsed when raw is that line itself, else raw
// parsed into l now (inline reading, a line put back together, a part of one, a RAS
// report's line).
func (fr *fileReader) parsed(raw []byte, l *logparse.Line) *logparse.Line {
	if p := fr.pre; p != nil && len(raw) == len(fr.preRaw) && (len(raw) == 0 || &raw[0] == &fr.preRaw[0]) {
		fr.pre = nil // used once: apply may read parts of it again
		return p
	}
	logparse.Parse(raw, l)
	return l
}
