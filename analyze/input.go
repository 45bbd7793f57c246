package analyze

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
	"github.com/ncclwatch/watchdog/logparse/frdump"
)

// Stdin is the path that names standard input.
const Stdin = "-"

// Skipped is a file that was found but not read as a log, and why.
type Skipped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ErrInput marks errors in what the user asked to read: a path that does not exist, a
// folder with nothing to read. The command exits 2 on them.
var ErrInput = errors.New("input error")

// logExts are the names a folder walk reads: NCCL_DEBUG_FILE logs, captured consoles, Slurm
// output, RAS reports saved by ncclras (text or JSON), Flight Recorder dumps (named
// <prefix><rank>, saved as .pkl); files without extension too.
var logExts = map[string]bool{".log": true, ".txt": true, ".out": true, ".err": true, ".json": true, "": true,
	".pkl": true, ".pickle": true}

// Collect expands paths into the files to read. Files named explicitly are always read (their
// content decides what they are); folders are walked for *.log, *.txt, *.out, *.err, *.json
// and files without extension, each also as .gz or .zst. Everything else found in a folder
// is listed as skipped, with the reason.
func Collect(paths []string) ([]string, []Skipped, error) {
	var out []string
	var skipped []Skipped
	for _, p := range paths {
		if p == Stdin {
			out = append(out, p)
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		var here []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				skipped = append(skipped, Skipped{Path: path, Reason: "cannot be listed: " + err.Error()})
				if d != nil && d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			name := d.Name()
			if d.IsDir() {
				if path != p && strings.HasPrefix(name, ".") {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasPrefix(name, ".") {
				return nil
			}
			if !d.Type().IsRegular() {
				skipped = append(skipped, Skipped{Path: path, Reason: "not a regular file"})
				return nil
			}
			if reason := skipByName(name); reason != "" {
				skipped = append(skipped, Skipped{Path: path, Reason: reason})
				return nil
			}
			here = append(here, path)
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%w: walk %s: %w", ErrInput, p, err)
		}
		sort.Strings(here)
		out = append(out, here...)
	}
	return out, skipped, nil
}

// skipByName says why a file found in a folder is not read, from its name alone.
func skipByName(name string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(name, ".gz"), ".zst")
	ext := strings.ToLower(filepath.Ext(base))
	if logExts[ext] {
		return ""
	}
	// Rotated logs: nccl.log.1, out.log.2; and Flight Recorder dumps whose prefix ends in a
	// dot (TORCH_FR_DUMP_TEMP_FILE=/tmp/fr. writes fr.0, fr.1, ...).
	if isNumber(ext[1:]) {
		return ""
	}
	switch ext {
	case ".csv":
		return "a .csv file (NVML samples, metrics), not a log"
	case ".xz", ".bz2", ".zip", ".tar", ".tgz", ".7z":
		return "a " + ext + " archive: extract it first (gzip and zstd are read directly)"
	}
	return "its extension " + ext + " is not one of .log .txt .out .err .json .pkl, a number or none (name the file to read it anyway)"
}

func isNumber(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// content is what the start of a file says it is.
type content int

const (
	contentText content = iota
	contentBinary
	contentRASText
	contentRASJSON
	contentFRPickle // a PyTorch Flight Recorder dump, pickled
	contentFRJSON   // its JSON form
)

// sniffLen is how much of a file decides what it is: enough for a RAS report's header and
// a binary file's first blocks.
const sniffLen = 16 << 10

// input is one opened file: decompressed, with its kind decided.
type input struct {
	r       *bufio.Reader
	gaps    *gapReader // what r reads: the content without its gaps
	closers []io.Closer
	kind    content
	why     string // for binary content: what it looks like
	codec   string // "gzip", "zstd" or ""
	pooled  []*bufio.Reader
	sniffer *bufio.Reader // r, when it is a sniffer
}

// readers keeps the 1 MiB buffers in front of decompressors and dumps, sniffers the small
// ones a text file's start is sniffed through (its lines are then read past them, straight
// into the line cutter's blocks): a 300-file job would otherwise allocate and clear them
// per file.
var (
	readers  = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, maxLine) }}
	sniffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, sniffLen) }}
)

func pooledReader(r io.Reader) *bufio.Reader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func (in *input) Close() error {
	for _, br := range in.pooled {
		br.Reset(nil)
		readers.Put(br)
	}
	in.pooled = nil
	if in.sniffer != nil {
		in.sniffer.Reset(nil)
		sniffers.Put(in.sniffer)
		in.sniffer = nil
	}
	var errs []error
	for i := len(in.closers) - 1; i >= 0; i-- {
		errs = append(errs, in.closers[i].Close())
	}
	return errors.Join(errs...)
}

// openInput opens a path (or standard input), undoes gzip and zstd, and sniffs what it holds.
// Lines are read through a gapReader (the holes of bounded logs are skipped).
func openInput(path string, stdin io.Reader) (*input, error) {
	in := &input{}
	var raw io.Reader
	var file *os.File
	magic := make([]byte, 4)
	if path == Stdin {
		if stdin == nil {
			stdin = os.Stdin
		}
		br := pooledReader(stdin)
		in.pooled = append(in.pooled, br)
		m, _ := br.Peek(4)
		magic, raw = m, br
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		in.closers = append(in.closers, f)
		n, _ := f.ReadAt(magic, 0)
		magic, raw, file = magic[:n], f, f
	}
	var content io.Reader = raw
	if isPickle(magic) {
		// A Flight Recorder dump: binary, read whole and byte for byte (NULs included).
		in.kind = contentFRPickle
		in.r = pooledReader(raw)
		in.pooled = append(in.pooled, in.r)
		return in, nil
	}
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(in.buffered(raw, file))
		if err != nil {
			in.Close()
			return nil, fmt.Errorf("gzip: %w", err)
		}
		in.closers = append(in.closers, zr)
		content, in.codec, file = zr, "gzip", nil
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		zr, err := zstd.NewReader(in.buffered(raw, file), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			in.Close()
			return nil, fmt.Errorf("zstd: %w", err)
		}
		in.closers = append(in.closers, zr.IOReadCloser())
		content, in.codec, file = zr, "zstd", nil
	}
	if in.codec != "" {
		// What was compressed may be a dump.
		br := pooledReader(content)
		in.pooled = append(in.pooled, br)
		if head, _ := br.Peek(2); isPickle(head) {
			in.kind, in.r = contentFRPickle, br
			return in, nil
		}
		content = br
	}
	in.gaps = newGapReader(content, file)
	in.r = sniffers.Get().(*bufio.Reader)
	in.r.Reset(in.gaps)
	in.sniffer = in.r
	head, err := in.r.Peek(sniffLen)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		in.Close()
		return nil, fmt.Errorf("read: %w", err)
	}
	in.kind, in.why = sniff(head[:min(len(head), sniffLen)])
	return in, nil
}

// isPickle reports a pickle's start (protocol 2 to 5), as torch writes Flight Recorder dumps.
func isPickle(head []byte) bool {
	form, ok := frdump.Sniff(head)
	return ok && form == frdump.FormPickle
}

// buffered gives a decompressor a buffered source: a plain file gets a pooled buffer,
// standard input already has one.
func (in *input) buffered(raw io.Reader, file *os.File) io.Reader {
	if file == nil {
		return raw
	}
	br := pooledReader(file)
	in.pooled = append(in.pooled, br)
	return br
}

// sniff decides from a file's start whether it is text, a RAS report or binary data.
func sniff(head []byte) (content, string) {
	if form, ok := frdump.Sniff(head); ok && form == frdump.FormJSON && !bytes.Contains(head, []byte(`"communicators"`)) {
		return contentFRJSON, ""
	}
	// The first 4 KiB tell text from binary; the RAS markers may come later in the head.
	if why := binaryKind(head[:min(len(head), 4<<10)]); why != "" {
		return contentBinary, why
	}
	t := bytes.TrimLeft(head, " \t\r\n")
	// Our captures and some users put a comment line before the reply; posted reports
	// start with a markdown fence or the shell prompt that ran ncclras.
	for bytes.HasPrefix(t, []byte("#")) || bytes.HasPrefix(t, []byte("```")) || bytes.HasPrefix(t, []byte("$ ")) {
		i := bytes.IndexByte(t, '\n')
		if i < 0 {
			break
		}
		t = bytes.TrimLeft(t[i+1:], " \t\r\n")
	}
	switch {
	case bytes.HasPrefix(t, []byte("{")) && bytes.Contains(head, []byte(`"communicators"`)) && bytes.Contains(head, []byte(`"nccl_version"`)):
		return contentRASJSON, ""
	case bytes.HasPrefix(t, []byte("NCCL version ")) && bytes.Contains(head, []byte("compiled with CUDA")) &&
		(bytes.Contains(head, []byte("\nJob summary")) || bytes.Contains(head, []byte("\nCommunicators"))):
		return contentRASText, ""
	}
	return contentText, ""
}

// highBits and controlBytes test eight bytes at once: a byte's high bit set, a byte below
// 0x20 (subtracting 0x20 from it borrows into its high bit).
const (
	highBits     = 0x8080808080808080
	controlBytes = 0x2020202020202020
)

// binaryKind names what a non-text start looks like, or "" for text.
func binaryKind(head []byte) string {
	if len(head) == 0 {
		return ""
	}
	switch {
	case len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5:
		return "a Python pickle (a PyTorch flight-recorder dump?), not a text log"
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "an executable (ELF), not a log"
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		return "a zip archive: extract it first"
	case bytes.HasPrefix(head, []byte("\xfd7zXZ")):
		return "xz-compressed: decompress it first (gzip and zstd are read directly)"
	case bytes.HasPrefix(head, []byte("BZh")):
		return "bzip2-compressed: decompress it first (gzip and zstd are read directly)"
	case len(head) > 262 && string(head[257:262]) == "ustar":
		return "a tar archive: extract it first"
	}
	// Text has no NUL and is mostly printable; invalid UTF-8 is tolerated (Latin-1 hosts).
	// Eight bytes of printable ASCII, most of a log, are passed in one test.
	bad := 0
	for i := 0; i < len(head); {
		if i+8 <= len(head) {
			if x := binary.LittleEndian.Uint64(head[i:]); x&highBits == 0 && (x-controlBytes)&^x&highBits == 0 {
				i += 8
				continue
			}
		}
		c := head[i]
		if c == 0 {
			return "binary data (it holds NUL bytes), not a text log"
		}
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != 0x1b && c != '\f' && c != '\b' {
			bad++
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(head[i:])
		if r == utf8.RuneError && n == 1 {
			bad++
		}
		i += n
	}
	if bad*10 > len(head) {
		return "binary data (mostly unprintable bytes), not a text log"
	}
	return ""
}
