package analyze

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ncclwatch/watchdog/logparse"
)

// Reading a file is two stages: cutting its bytes into lines, then applying the lines in
// order to the file's processes (stateful: routing, unwrapping, fragments, records), each
// parsed on its way. Parsing is stateless but for the cache of the previous prefix, and
// most of the work. The cutter reads blocks straight into a batch, with no copy but the
// kernel's, and the applier takes the batch. On one goroutine (a folder's files, each on
// its own core) a block is cut and applied, each line parsed as it goes, with no handoff.
// When cores would otherwise be idle (one large console, the last files of a folder) the
// cutter runs ahead on its own goroutine and, between blocks, parses the batches waiting
// for the applier from their ends, a chunk of lines at a time, while the applier parses
// from a batch's start whatever the cutter has not reached: neither waits for the other,
// no line is parsed twice, and no third goroutine takes a core from the applier (whose
// stage is the one that cannot be split). Further spare cores each run a parse helper that
// does the same.

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
	err   error // on the last batch of a file: nil at its end, else why reading stopped
	last  bool
	// shared is set on the batches of a pipelined read: their lines are parsed by helpers
	// ahead of the applier.
	shared *sharedParse
}

// sharedParse is a batch's lines parsed ahead: chunks of chunkLines lines, each claimed by
// a helper or by the applier (the first to claim it parses it), and the batch's users (its
// applier and its helper pass), the last of whom frees it.
type sharedParse struct {
	parsed []logparse.Line
	chunks []atomic.Int32
	users  atomic.Int32
}

// A chunk's states.
const (
	chunkFree int32 = iota
	chunkHelper
	chunkApplier
	chunkParsed
)

// chunkLines is what one claim covers: a few microseconds of parsing, so that a helper and
// the applier that meet in a batch part within a chunk.
const chunkLines = 32

// Block sizes: what the cutter reads at once, inline and across goroutines. Inline, a block
// stays in the core's cache; across goroutines, a larger one keeps handoffs rare. Batches in
// flight: the applier's and batchesAhead more, two more per extra helper (each parsed line
// takes 1.4 KB of the batch).
const (
	inlineBlock    = 64 << 10
	pipelineBlock  = 128 << 10
	batchesAhead   = 3
	maxHelpers     = 6
	avgLineLenHint = 128
)

var inlineBatches = sync.Pool{New: func() any { return newBatch(inlineBlock, false) }}

func newBatch(block int, shared bool) *lineBatch {
	b := &lineBatch{buf: make([]byte, 0, block+4<<10), lines: make([]batchLine, 0, block/avgLineLenHint)}
	if shared {
		b.shared = &sharedParse{parsed: make([]logparse.Line, 0, block/avgLineLenHint)}
	}
	return b
}

// share readies a cut batch for its users: the applier and the parsers that may help it.
func (b *lineBatch) share(users int32) {
	sp := b.shared
	n := len(b.lines)
	if cap(sp.parsed) < n {
		// Slots are reused as they are: Parse sets every field a line's kind uses.
		sp.parsed = append(sp.parsed[:cap(sp.parsed)], make([]logparse.Line, n-cap(sp.parsed))...)
	}
	sp.parsed = sp.parsed[:n]
	k := (n + chunkLines - 1) / chunkLines
	if cap(sp.chunks) < k {
		sp.chunks = make([]atomic.Int32, k)
	}
	sp.chunks = sp.chunks[:k]
	for i := range sp.chunks {
		sp.chunks[i].Store(chunkFree)
	}
	sp.users.Store(users)
}

// release says one user is done with b: the last one frees it.
func (b *lineBatch) release(free chan<- *lineBatch) {
	if b.shared.users.Add(-1) == 0 {
		free <- b
	}
}

// helpOne parses the last chunk of b no one has claimed, and reports whether there was one
// before the chunks the applier has reached (it claims them from the start).
func (b *lineBatch) helpOne(p *logparse.Parser) bool {
	sp := b.shared
	for k := len(sp.chunks) - 1; k >= 0; k-- {
		c := &sp.chunks[k]
		switch c.Load() {
		case chunkApplier:
			return false
		case chunkFree:
			if c.CompareAndSwap(chunkFree, chunkHelper) {
				b.parseChunk(k, p)
				c.Store(chunkParsed)
				return true
			}
		}
	}
	return false
}

// help parses b's chunks from its end until it meets the applier.
func (b *lineBatch) help(p *logparse.Parser) {
	for b.helpOne(p) {
	}
}

func (b *lineBatch) parseChunk(k int, p *logparse.Parser) {
	for i := k * chunkLines; i < min((k+1)*chunkLines, len(b.lines)); i++ {
		if m := b.lines[i]; m.mark&markEmpty == 0 {
			p.Parse(b.buf[m.start:m.end:m.end], &b.shared.parsed[i])
		}
	}
}

// claim is the applier's look at chunk k as it reaches it: whether the helper parsed it.
// A chunk no one has claimed is the applier's: it parses each line as it applies it.
func (b *lineBatch) claim(k int) bool {
	c := &b.shared.chunks[k]
	return c.Load() == chunkParsed || (!c.CompareAndSwap(chunkFree, chunkApplier) && c.Load() == chunkParsed)
}

// lineCutter is the first stage: it reads blocks of the input, cuts them into lines and
// notes the gaps before them.
type lineCutter struct {
	r     io.Reader
	gaps  *gapReader
	block int
	carry []byte // the start of a line the previous block ended in
	pos   int64  // offset of the next line in what the gap reader passes on
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
	b.buf, b.lines, b.err, b.last = append(b.buf[:0], c.carry...), b.lines[:0], nil, false
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
	helpers := min(runtime.GOMAXPROCS(0)-2, maxHelpers)
	users := int32(2) // the applier and the cutter
	n := 1 + batchesAhead
	if helpers > 0 {
		users++
		n += 2 * helpers
	}
	// full carries batches to the applier, toHelp to the helpers, in the order they were
	// cut; free takes them back. None of them ever holds more than the n batches there
	// are, so that no send blocks.
	full := make(chan *lineBatch, n)
	toHelp := make(chan *lineBatch, n)
	free := make(chan *lineBatch, n)
	for range n {
		free <- newBatch(block, true)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range helpers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p logparse.Parser
			for b := range toHelp {
				b.help(&p)
				b.release(free)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(toHelp)
		var p logparse.Parser
		// ahead are the batches cut and not yet helped to their start, oldest first.
		var ahead []*lineBatch
		defer func() {
			for _, b := range ahead {
				b.release(free)
			}
		}()
		take := func(b *lineBatch) bool {
			cut.fill(ctx, b)
			b.share(users)
			ahead = append(ahead, b)
			if helpers > 0 {
				toHelp <- b
			}
			full <- b
			if b.last {
				close(full)
			}
			return b.last
		}
		for {
			select {
			case b := <-free:
				if take(b) {
					// The input is cut: what is left is parsing ahead.
					for len(ahead) > 0 {
						ahead[0].help(&p)
						ahead[0].release(free)
						ahead = ahead[1:]
					}
					return
				}
				continue
			case <-stop:
				close(full)
				return
			default:
			}
			// No batch to cut into: parse ahead of the applier, a chunk at a time.
			if len(ahead) > 0 {
				if !ahead[0].helpOne(&p) {
					ahead[0].release(free)
					ahead = ahead[1:]
				}
				continue
			}
			select {
			case b := <-free:
				if take(b) {
					return
				}
			case <-stop:
				close(full)
				return
			}
		}
	}()
	// The cutter returns at the end of the input, on a read error or a cancelled context;
	// stop and the wait make sure that it and the helpers have returned before the input
	// is closed.
	defer func() {
		close(stop)
		for range full {
		}
		wg.Wait()
	}()
	for b := range full {
		fr.applyBatch(b)
		if b.last {
			return b.err
		}
		b.release(free)
	}
	return nil
}

// applyBatch applies a batch's lines in order.
func (fr *fileReader) applyBatch(b *lineBatch) {
	st := &fr.res.stat
	parsed := false
	for i, m := range b.lines {
		if b.shared != nil && i%chunkLines == 0 {
			parsed = b.claim(i / chunkLines)
		}
		raw := b.buf[m.start:m.end:m.end]
		if m.mark&markGap != 0 {
			fr.wrap.Flush(fr.feed)
			fr.endRAS()
			fr.gap()
		}
		if m.mark&markEmpty != 0 {
			continue
		}
		if parsed {
			fr.pre, fr.preRaw = &b.shared.parsed[i], raw
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
