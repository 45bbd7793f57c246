package ras

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/snapshot"
)

// ErrTruncated marks a text report that ended before its Warnings section.
var ErrTruncated = errors.New("ras text report truncated")

// Line shapes of the text STATUS report (client_support.cc, 2.24 to 2.30). Indented body
// lines are matched after trimming; which block they belong to decides what they mean.
var (
	reVersion   = regexp.MustCompile(`^NCCL version (\S+)`)
	reTableRow  = regexp.MustCompile(`^(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)$`)
	reCommHdr   = regexp.MustCompile(`^#(\d+)-(\d+) \(([0-9a-fA-F]{1,16})\) ([A-Z,]+)$`)
	reJobMiss   = regexp.MustCompile(`^Missing communicator data from (\d+) job process`)
	reCommMiss  = regexp.MustCompile(`^Missing communicator data from (\d+) rank`)
	reDead      = regexp.MustCompile(`^(\d+) job process(?:es)? (?:is|are) considered dead`)
	reTimeout   = regexp.MustCompile(`^Encountered (\d+) communication timeout`)
	reInitErr   = regexp.MustCompile(`^Initialization errors? on \d+ rank`)
	reAsyncErr  = regexp.MustCompile(`^Asynchronous errors? on \d+ rank`)
	reDiffState = regexp.MustCompile(`^Communicator ranks have different status`)
	reDiffCount = regexp.MustCompile(`^Communicator ranks have different (\S+) operation counts`)
	reGrpUpTo   = regexp.MustCompile(`^(\d+) ranks have launched up to operation (\d+)`)
	reGrpNone   = regexp.MustCompile(`^(\d+) ranks have not launched any operations`)
	reGrpStatus = regexp.MustCompile(`^(\d+) ranks have status ([A-Z]+)`)
	reGrpErr    = regexp.MustCompile(`^(\d+) ranks reported (.+)$`)
	reRankUpTo  = regexp.MustCompile(`^Rank (\d+) has launched up to operation (\d+)`)
	reRankNone  = regexp.MustCompile(`^Rank (\d+) has not launched any operations`)
	reRankState = regexp.MustCompile(`^Rank (\d+) has status ([A-Z]+)`)
	reRankErr   = regexp.MustCompile(`^Rank (\d+) reported (.+?)(?: -- .*)?$`)
	reRankPlain = regexp.MustCompile(`^Rank (\d+) -- `)
)

// What the indented lines under a header are about.
type textBlock int

const (
	blkNone textBlock = iota
	blkTable
	blkJobMissing
	blkDead
	blkTimeout
	blkComm
)

// What the "Rank N -- ..." lines inside a communicator block are about.
type commSub int

const (
	subNone commSub = iota
	subMissing
	subInitErr
	subAsyncErr
	subStatus
	subCounts
)

type textParser struct {
	out      *snapshot.RAS
	byHash   map[string]int // index in out.Comms
	groups   map[int]tableRow
	block    textBlock
	comm     *snapshot.RASComm
	sub      commSub
	fn       string // function of the current counts block
	grpCount int64  // launched count of the current "N ranks" group
	grpValue string // status or error of the current "N ranks" group
	inGroup  bool
	warnings bool // the Warnings header was seen
	known    bool // something only a RAS report has was seen
}

type tableRow struct {
	size   int
	status string
}

// ParseText parses the default (text) reply to STATUS. The text report gives less than
// JSON: it names only communicators NCCL flags (OK ones are absent, hashes included), per
// rank it gives only the counts of functions that differ and only for outlier ranks (the
// majority appears as a RASGroup), no totals, no per-communicator dead ranks, and hosts and
// pids only in prose. Sizes and states come from the summary table row of the
// communicator's group. Unknown lines are skipped. A report without its Warnings section is
// returned as parsed so far, with an error wrapping ErrTruncated.
func ParseText(b []byte) (*snapshot.RAS, error) {
	p := &textParser{
		out:    &snapshot.RAS{Format: "text"},
		byHash: map[string]int{},
		groups: map[int]tableRow{},
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		p.line(sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ras text: %w", err)
	}
	if !p.known {
		return nil, errors.New("ras text: no NCCL version line or report section: not a RAS STATUS reply")
	}
	for i := range p.out.Comms {
		c := &p.out.Comms[i]
		sortUniq(&c.Missing)
		sortUniq(&c.Unresp)
	}
	if !p.warnings {
		return p.out, fmt.Errorf("ras text: %w: no Warnings section", ErrTruncated)
	}
	return p.out, nil
}

func (p *textParser) line(raw string) {
	raw = strings.TrimRight(raw, "\r")
	indented := strings.HasPrefix(raw, " ")
	s := strings.TrimSpace(raw)
	if s == "" || strings.Trim(s, "=") == "" {
		return
	}
	if !indented && p.header(s) {
		return
	}
	switch p.block {
	case blkTable:
		if m := reTableRow.FindStringSubmatch(s); m != nil {
			g, _ := strconv.Atoi(m[1])
			size, _ := strconv.Atoi(m[5])
			p.groups[g] = tableRow{size: size, status: m[7]}
		}
	case blkJobMissing:
		if m := reJobMiss.FindStringSubmatch(s); m != nil {
			p.out.Unresp = atoiNonNeg(m[1])
		}
	case blkDead:
		if m := reDead.FindStringSubmatch(s); m != nil {
			p.out.Dead = atoiNonNeg(m[1])
		}
	case blkTimeout:
		if m := reTimeout.FindStringSubmatch(s); m != nil {
			p.out.Timeouts = atoiNonNeg(m[1])
		}
	case blkComm:
		p.commLine(s)
	}
}

// header handles an unindented line; it reports whether the line was one.
func (p *textParser) header(s string) bool {
	switch {
	case reVersion.MatchString(s):
		p.out.Version = reVersion.FindStringSubmatch(s)[1]
		p.known = true
		p.block = blkNone
	case strings.HasPrefix(s, "Group ") && strings.Contains(s, "Comms"):
		p.block = blkTable
		p.known = true
	case s == "Errors":
		p.block = blkNone
		p.known = true
	case s == "Warnings":
		p.block = blkNone
		p.known = true
		p.warnings = true
	case s == "INCOMPLETE":
		p.block = blkJobMissing
	case s == "DEAD":
		p.block = blkDead
	case s == "TIMEOUT":
		p.block = blkTimeout
	case reCommHdr.MatchString(s):
		m := reCommHdr.FindStringSubmatch(s)
		g, _ := strconv.Atoi(m[1])
		p.openComm(g, normHash(m[3]))
		p.known = true
	case p.block == blkTable:
		// Rows of groups numbered 10000 and up are not indented.
		return false
	default:
		// A header we do not know: what follows is not ours to read.
		p.block = blkNone
	}
	return true
}

func (p *textParser) openComm(group int, hash string) {
	i, ok := p.byHash[hash]
	if !ok {
		i = len(p.out.Comms)
		p.byHash[hash] = i
		c := snapshot.RASComm{Hash: hash, Partial: true}
		if row, ok := p.groups[group]; ok {
			c.Size = row.size
			c.Status = row.status
		}
		p.out.Comms = append(p.out.Comms, c)
	}
	p.comm = &p.out.Comms[i]
	p.block = blkComm
	p.sub = subNone
	p.inGroup = false
}

func (p *textParser) commLine(s string) {
	c := p.comm
	switch {
	case reCommMiss.MatchString(s):
		p.enter(subMissing)
	case reInitErr.MatchString(s):
		p.enter(subInitErr)
	case reAsyncErr.MatchString(s):
		p.enter(subAsyncErr)
	case reDiffState.MatchString(s):
		p.enter(subStatus)
	case reDiffCount.MatchString(s):
		p.enter(subCounts)
		p.fn = reDiffCount.FindStringSubmatch(s)[1]
	case reGrpUpTo.MatchString(s):
		m := reGrpUpTo.FindStringSubmatch(s)
		p.group(atoiNonNeg(m[1]), atoi64(m[2]))
	case reGrpNone.MatchString(s):
		p.group(atoiNonNeg(reGrpNone.FindStringSubmatch(s)[1]), 0)
	case reGrpStatus.MatchString(s):
		p.inGroup = true
		p.grpValue = reGrpStatus.FindStringSubmatch(s)[2]
	case reGrpErr.MatchString(s):
		p.inGroup = true
		p.grpValue = errName(reGrpErr.FindStringSubmatch(s)[2])
	case reRankUpTo.MatchString(s):
		m := reRankUpTo.FindStringSubmatch(s)
		p.setCount(m[1], atoi64(m[2]))
	case reRankNone.MatchString(s):
		p.setCount(reRankNone.FindStringSubmatch(s)[1], 0)
	case reRankState.MatchString(s):
		m := reRankState.FindStringSubmatch(s)
		if m[2] == "NOCOMM" {
			addRank(&c.Missing, m[1])
		}
	case reRankErr.MatchString(s):
		m := reRankErr.FindStringSubmatch(s)
		p.setErr(m[1], errName(m[2]))
	case reRankPlain.MatchString(s):
		r := reRankPlain.FindStringSubmatch(s)[1]
		switch p.sub {
		case subMissing:
			addRank(&c.Missing, r)
			addRank(&c.Unresp, r)
		case subStatus:
			if p.inGroup && p.grpValue == "NOCOMM" {
				addRank(&c.Missing, r)
			}
		case subCounts:
			if p.inGroup {
				p.setCount(r, p.grpCount)
			}
		case subInitErr, subAsyncErr:
			if p.inGroup {
				p.setErr(r, p.grpValue)
			}
		}
	}
}

func (p *textParser) enter(sub commSub) {
	p.sub = sub
	p.inGroup = false
}

func (p *textParser) group(n int, count int64) {
	p.inGroup = true
	p.grpCount = count
	if p.sub == subCounts {
		p.comm.Groups = append(p.comm.Groups, snapshot.RASGroup{Func: p.fn, Ranks: n, Count: count})
	}
}

func (p *textParser) setCount(rank string, v int64) {
	r, err := strconv.Atoi(rank)
	if err != nil || p.sub != subCounts {
		return
	}
	c := p.comm
	if c.Funcs == nil {
		c.Funcs = map[string]map[int]int64{}
	}
	if c.Funcs[p.fn] == nil {
		c.Funcs[p.fn] = map[int]int64{}
	}
	c.Funcs[p.fn][r] = v
}

func (p *textParser) setErr(rank, name string) {
	r, err := strconv.Atoi(rank)
	if err != nil {
		return
	}
	switch p.sub {
	case subInitErr:
		p.comm.Errors = setErr(p.comm.Errors, r, "init:"+name)
	case subAsyncErr:
		p.comm.Errors = setErr(p.comm.Errors, r, "async:"+name)
	}
}

// errName maps ncclErrorToString's text (client_support.cc) to the ncclResult_t name the
// JSON parser reports; other text is kept, cut short.
func errName(s string) string {
	switch s {
	case "Unhandled CUDA error":
		return "ncclUnhandledCudaError"
	case "System error":
		return "ncclSystemError"
	case "Internal error":
		return "ncclInternalError"
	case "Invalid argument":
		return "ncclInvalidArgument"
	case "Invalid usage":
		return "ncclInvalidUsage"
	case "Remote process error":
		return "ncclRemoteError"
	case "NCCL operation in progress":
		return "ncclInProgress"
	}
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

func addRank(dst *[]int, rank string) {
	if r, err := strconv.Atoi(rank); err == nil {
		*dst = append(*dst, r)
	}
}

func atoiNonNeg(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func atoi64(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// normHash renders a communicator hash the way NCCL's Init line prints commId: "0x" and
// unpadded lower-case hex. The text report pads to 16 digits; JSON does not. A value that
// is not hex of at most 64 bits is kept, lower-cased, so nothing is silently merged.
func normHash(s string) string {
	h := strings.TrimSpace(s)
	if len(h) > 1 && h[0] == '0' && (h[1] == 'x' || h[1] == 'X') {
		h = h[2:]
	}
	v, err := strconv.ParseUint(h, 16, 64)
	if err != nil || h == "" || h[0] == '+' || h[0] == '-' {
		return strings.ToLower(strings.TrimSpace(s))
	}
	return "0x" + strconv.FormatUint(v, 16)
}
