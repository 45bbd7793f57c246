package jobsim

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ncclwatch/watchdog/logparse"
)

// Thread ids of a rank process besides its main thread (tid = pid), as NCCL's own threads
// show in the prefix.
const (
	tidService  = 9  // proxy service thread: "[Service thread] Connection closed by localRank N"
	tidProgress = 10 // proxy progress thread: NET connections
	tidIBAsync  = 12 // IB async event thread
)

// rankOut writes one rank's log file and holds what NCCL keeps per process while it runs.
type rankOut struct {
	s     *Sim
	r     *simRank
	f     *os.File
	w     *bufio.Writer
	buf   []byte
	lastT int64
	skew  int64

	tsSec  int64
	tsDate []byte // "2006-01-02 15:04:05" of tsSec

	count     [numComms]int64
	opCount   [numComms]uint64
	connected [numComms]bool
	p2pConn   [2]bool // Send, Recv connections of the pipeline communicator
	gpu       gpuState
	gpuAt     int64
	gpuSet    bool

	lines, bytes int64
	dirty        bool
	err          error
	check        logparse.Line
}

func (s *Sim) newOut(r *simRank) (*rankOut, error) {
	f, err := os.Create(r.LogPath) // NCCL opens NCCL_DEBUG_FILE with fopen(path, "w")
	if err != nil {
		return nil, fmt.Errorf("jobsim: %w", err)
	}
	o := &rankOut{s: s, r: r, f: f, w: bufio.NewWriterSize(f, 64<<10), buf: make([]byte, 0, 512), tsSec: -1 << 62}
	if s.cfg.ClockSkew > 0 {
		o.skew = int64(float64(s.cfg.ClockSkew) * (2*s.unit(purposeSkew, uint64(r.node.Index)) - 1))
	}
	return o, nil
}

func (o *rankOut) close() error {
	err := o.flush()
	if cerr := o.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("jobsim: %w", cerr)
	}
	return err
}

func (o *rankOut) flush() error {
	if o.err == nil && o.dirty {
		if err := o.w.Flush(); err != nil {
			o.err = fmt.Errorf("jobsim: %w", err)
		}
	}
	o.dirty = false
	return o.err
}

// head starts a line at offset t: the blank line of a WARN, the timestamp, the prefix.
// site is a WARN's "file:line" (and "(func)" on 2.30.7).
func (o *rankOut) head(t int64, warn bool, tid int, site string) {
	s := o.s
	t = max(t, o.lastT) // one thread's lines are in time order
	o.lastT = t
	b := o.buf[:0]
	if warn {
		b = append(b, '\n')
	}
	switch {
	case s.cfg.Timestamps:
		b = o.appendTime(b, s.sched.base+t+o.skew, true)
	case warn && s.d.warnTimestamp():
		b = o.appendTime(b, s.sched.base+t+o.skew, false)
	}
	b = append(b, o.r.prefix...)
	b = strconv.AppendInt(b, int64(o.r.PID+tid), 10)
	if warn {
		b = append(b, " ["...)
		b = strconv.AppendInt(b, int64(o.r.LocalRank), 10)
		b = append(b, "] "...)
		b = append(b, site...)
		b = append(b, " NCCL WARN "...)
	} else {
		b = append(b, o.r.infoTail...)
	}
	o.buf = b
}

// appendTime renders "[%F %T.%6f] " (micro) or NCCL's default WARN stamp "[%F %T] ".
func (o *rankOut) appendTime(b []byte, ns int64, micro bool) []byte {
	sec := ns / 1e9
	if ns < 0 && ns%1e9 != 0 {
		sec--
	}
	if sec != o.tsSec {
		o.tsSec = sec
		o.tsDate = time.Unix(sec, 0).In(o.s.cfg.Location).AppendFormat(o.tsDate[:0], "2006-01-02 15:04:05")
	}
	b = append(b, '[')
	b = append(b, o.tsDate...)
	if micro {
		us := (ns - sec*1e9) / 1000
		b = append(b, '.')
		for d := int64(100000); d > 0; d /= 10 {
			b = append(b, byte('0'+us/d%10))
		}
	}
	return append(b, "] "...)
}

// end finishes the line and writes it; want is the kind logparse must give it.
func (o *rankOut) end(want logparse.Kind) {
	o.buf = append(o.buf, '\n')
	if o.err != nil {
		return
	}
	if o.s.verify {
		o.verifyLine(want)
	}
	n, err := o.w.Write(o.buf)
	if err != nil {
		o.err = fmt.Errorf("jobsim: %w", err)
		return
	}
	o.bytes += int64(n)
	o.lines++
	if o.buf[0] == '\n' {
		o.lines++
	}
	o.dirty = true
}

func (o *rankOut) verifyLine(want logparse.Kind) {
	text := o.buf[:len(o.buf)-1]
	if text[0] == '\n' {
		logparse.Parse(text[:0], &o.check)
		if o.check.Kind != logparse.KindBlank {
			o.s.verifyFailed(fmt.Sprintf("blank line before a WARN parsed as %s", o.check.Kind))
		}
		text = text[1:]
	}
	if bytes.IndexByte(text, '\n') >= 0 {
		o.s.verifyFailed(fmt.Sprintf("line holds a newline: %q", text))
	}
	logparse.Parse(text, &o.check)
	l := &o.check
	switch {
	case l.Kind != want:
		o.s.verifyFailed(fmt.Sprintf("parsed as %s, written as %s: %q", l.Kind, want, text))
	case string(l.Host) != o.r.Host || l.PID != o.r.PID:
		o.s.verifyFailed(fmt.Sprintf("prefix parsed as %s:%d: %q", l.Host, l.PID, text))
	case o.s.cfg.Timestamps && (!l.HasTime || l.Time.Digits != 6):
		o.s.verifyFailed(fmt.Sprintf("no µs timestamp parsed: %q", text))
	}
}

func (s *Sim) verifyFailed(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.verifyErrs) < 50 {
		s.verifyErrs = append(s.verifyErrs, msg)
	}
}

func appendPtr(b []byte, p uint64) []byte {
	if p == 0 {
		return append(b, "(nil)"...)
	}
	b = append(b, "0x"...)
	return strconv.AppendUint(b, p, 16)
}

// writeOp writes op k of the rank's step, altered by fault f (wrong-op, -size, -dtype).
// The per-op line is by far the most written: it is built without fmt.
func (o *rankOut) writeOp(t int64, k int, f *resolvedFault) {
	r := o.r
	op := &r.plan[k]
	name, count, dt, root := op.name, op.count, op.dtype, op.root
	sendbuf, recvbuf := op.sendbuf, op.recvbuf
	if f != nil {
		switch f.Kind {
		case FaultWrongOp:
			if name == "Broadcast" {
				name = "AllReduce"
			} else {
				name = "Broadcast"
			}
			root, sendbuf = 0, recvbuf
		case FaultWrongSize:
			count = f.Count
			if count == 0 {
				count = max(op.count/2, 1)
			}
		case FaultWrongDtype:
			if dt == dtBfloat16 {
				dt = dtFloat32
			} else {
				dt = dtBfloat16
			}
		}
	}
	c := r.comms[op.comm]
	o.head(t, false, 0, "")
	b := append(o.buf, name...)
	b = append(b, ": opCount "...)
	b = strconv.AppendUint(b, o.opCount[op.comm], 16)
	b = append(b, " sendbuff "...)
	b = appendPtr(b, sendbuf)
	b = append(b, " recvbuff "...)
	b = appendPtr(b, recvbuf)
	b = append(b, " count "...)
	b = strconv.AppendUint(b, count, 10)
	b = append(b, " datatype "...)
	b = strconv.AppendInt(b, int64(dt), 10)
	b = append(b, " op 0 root "...)
	b = strconv.AppendInt(b, int64(root), 10)
	b = append(b, " comm "...)
	b = appendPtr(b, c.ptr)
	b = append(b, " [nranks="...)
	b = strconv.AppendInt(b, int64(len(c.g.members)), 10)
	b = append(b, "] stream "...)
	if op.coll {
		b = append(b, "(nil)"...) // as in the real 2.28.9 capture: collectives on the default stream
	} else {
		b = appendPtr(b, c.stream)
	}
	o.buf = b
	o.end(logparse.KindColl)
	if o.s.d.opCountAll() || c.usesNet(o.s) {
		o.opCount[op.comm]++
	}
	if op.coll {
		o.count[op.comm]++
	}
	if o.s.d.lazyConnect() {
		switch {
		case op.coll && !o.connected[op.comm]:
			o.connected[op.comm] = true
			for _, l := range o.s.ringLines(r, op.comm) {
				o.lineTid(t, l.tid, logparse.KindChannel, l.text)
			}
			o.lineTid(t, 0, logparse.KindInfo, o.s.d.connectedRings())
		case !op.coll:
			i := 0
			if name == "Recv" {
				i = 1
			}
			if !o.p2pConn[i] {
				o.p2pConn[i] = true
				for _, l := range o.s.p2pLines(r, op) {
					o.lineTid(t, l.tid, logparse.KindChannel, l.text)
				}
			}
		}
	}
}

func (o *rankOut) lineTid(t int64, tid int, want logparse.Kind, msg string) {
	o.head(t, false, tid, "")
	o.buf = append(o.buf, msg...)
	o.end(want)
}

func (o *rankOut) warn(t int64, tid int, site string, want logparse.Kind, msg string) {
	o.head(t, true, tid, site)
	o.buf = append(o.buf, msg...)
	o.end(want)
}

// usesNet: from 2.27 opCount advances only on plans with proxy (network) work, which a
// rank has when a ring neighbour in the communicator is on another node.
func (c *commRank) usesNet(s *Sim) bool {
	n := len(c.g.members)
	if n < 2 {
		return false
	}
	me := s.ranks[c.g.members[c.rank]].node
	next := s.ranks[c.g.members[(c.rank+1)%n]].node
	prev := s.ranks[c.g.members[(c.rank+n-1)%n]].node
	return next != me || prev != me
}
