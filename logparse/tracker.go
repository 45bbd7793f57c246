package logparse

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// TrackerOptions bound what a Tracker keeps.
type TrackerOptions struct {
	// RingSize is how many recent ops each communicator keeps (default 64).
	RingSize int
	// Times is how many of each communicator's positions keep their issue time beyond the
	// ring (0: none): offline, the time accounting judges a whole log, not its tail.
	Times int
	// MaxComms caps communicators kept per process; destroyed ones are dropped first
	// (default 1024).
	MaxComms int
	// MaxEvents caps the WARN-class events kept (default 32).
	MaxEvents int
	// KeepFirst of them are the process's first events, kept for good: a post-mortem needs
	// the first error, which a flood of consequences (flushed IB requests, teardown) would
	// otherwise push out of the ring. 0 keeps the newest only (the sidecar).
	KeepFirst int
	// Location is the zone of NCCL timestamps, which NCCL prints in its host's local time
	// (default time.Local).
	Location *time.Location
}

func (o *TrackerOptions) defaults() {
	if o.RingSize <= 0 {
		o.RingSize = 64
	}
	// A power of two, so positions map to slots with a mask.
	for n := 1; ; n <<= 1 {
		if n >= o.RingSize {
			o.RingSize = n
			break
		}
	}
	if o.MaxComms <= 0 {
		o.MaxComms = 1024
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = 32
	}
	o.KeepFirst = min(max(o.KeepFirst, 0), o.MaxEvents-1)
	if o.Location == nil {
		o.Location = time.Local
	}
}

// maxTransports bounds the distinct channel paths kept per process.
const maxTransports = 16

// maxPeers bounds the point-to-point peers tracked per communicator.
const maxPeers = 4096

// Tracker follows one NCCL process through its log: what it says about communicators,
// sequence positions, recent ops and trouble. Not safe for concurrent use.
type Tracker struct {
	opts TrackerOptions

	Host    string
	PID     int
	Version string
	// TimestampDigits is the largest sub-second precision seen on NCCL timestamps; -1 when
	// no line carried one.
	TimestampDigits int
	LocalRank       int // from the comm info line, -1 when unknown
	NNodes          int
	Network         string   // Using network X
	NetDevs         []string // IB devices ("mlx5_0:1/IB") or socket interfaces ("eth0")
	IBNone          bool     // NET/IB : No device found
	BootstrapAddr   string   // e.g. eth0:10.0.0.7<0>
	Transports      []string // distinct channel paths, e.g. "P2P/CUMEM", "NET/IB/0/GDRDMA"
	Addrs           []string // IP addresses of bootstrap and socket interfaces
	LauncherRank    int      // rank in the job from a launcher prefix ("[rankN]:", Open MPI), -1 when none
	localFrom       int      // nranks of the communicator LocalRank came from

	comms    map[uint64]*Comm // live communicators by pointer
	all      []*Comm          // every communicator kept, creation order
	splitSeq map[splitKey]int // split occurrences when NCCL does not print splitCount

	first     []snapshot.Event // the first KeepFirst events
	events    []snapshot.Event // ring of the newest MaxEvents-KeepFirst
	eventHead int
	ops       int64 // per-op lines seen
	readyEver bool  // a communicator completed its init
	// lineDev is the "[dev]" every line of the process carried (-1: none yet); devMixed
	// once two differed (a process that drives several GPUs).
	lineDev  int
	devMixed bool
	// ownRank is the rank the lines that carry one gave (OwnRank; -1: none yet);
	// ownRankMixed once two differed: the process is in several communicators and no one
	// of those ranks is its own.
	ownRank      int
	ownRankMixed bool
	// launcher holds what each kind of launcher prefix said of the process's rank.
	launcher [numRankFrom]claim
	// crumbTID is the thread whose error breadcrumbs are the newest event (0: none): if
	// that thread goes on with ordinary INFO lines, NCCL handled the error.
	crumbTID   int
	eventTotal int64
	lastWarn   bool
	warnTask   int // the launcher's label on the line lastWarn is about (-1: none)

	Lines int64
	// Issued counts the process's op lines, collectives and p2p on every communicator: an
	// op's Idx is its place in this count, its process's issue order (one process's lines
	// are in the order its calls were made, timestamps or not).
	Issued    int64
	Kinds     [NumKinds]int64
	FirstTime int64 // µs of the first timed line
	LastTime  int64 // µs of the newest line

	// lastComms are the communicators of the last ops, the newer first: a rank's ops
	// mostly alternate between two (data and tensor parallel), and a map lookup on each
	// switch cost more than the rest of recording the op.
	lastComms [2]*Comm
	hourKey   [4]int // the hour of the previous timestamp and its µs, to skip time.Date
	hourUS    int64
	line      Line     // scratch, so Observe allocates nothing
	scratch   [96]byte // scratch for keys

	lastTransport    [64]byte // the previous channel line's path, to skip the runs
	lastTransportLen int
}

type splitKey struct {
	parent string
	color  int
}

// Comm is one communicator in one process.
type Comm struct {
	Ptr        uint64
	ID         string // cross-rank identity (see snapshot.Comm.ID)
	Rank       int
	NRanks     int
	CudaDev    int
	NvmlDev    int
	BusID      uint64
	API        string
	Parent     uint64
	SplitCount int
	Color      int
	State      snapshot.CommState
	Created    int64

	Count  int64 // collectives issued: the sequence position of the newest
	LastT  int64
	Digest uint64 // chained digest of all signatures up to Count
	ring   []OpRecord
	marks  [len(markLevels)][marksPerLevel]Mark
	marksN [len(markLevels)]int
	P2P    map[int]*P2PCount
	// times are the issue times (µs) of positions timesFrom, timesFrom+1, ... when the
	// tracker keeps them (TrackerOptions.Times), the oldest half dropped when full.
	times     []snapshot.Micros
	timesFrom int64
}

// OpRecord is one collective at its sequence position.
type OpRecord struct {
	Seq   int64
	T     int64 // µs
	Idx   int64 // place in the process's issue order (Tracker.Issued)
	Count uint64
	RedOp int64
	Root  int32
	Op    OpCode
	Dtype Datatype
}

// Mark is the digest at an aligned sequence position.
type Mark struct {
	Seq    int64
	Digest uint64
	T      int64
}

// P2PCount counts Send/Recv with one peer.
type P2PCount struct {
	Sends, Recvs       int64
	LastSend, LastRecv int64
	LastSendOp         OpRecord
	LastRecvOp         OpRecord
}

var markLevels = [...]int64{16, 256, 4096}

const marksPerLevel = 4

// NewTracker returns a tracker for one process's log.
func NewTracker(opts TrackerOptions) *Tracker {
	opts.defaults()
	return &Tracker{
		opts:            opts,
		TimestampDigits: -1,
		LocalRank:       -1,
		LauncherRank:    -1,
		lineDev:         -1,
		ownRank:         -1,
		warnTask:        -1,
		comms:           make(map[uint64]*Comm),
		splitSeq:        make(map[splitKey]int),
		events:          make([]snapshot.Event, 0, opts.MaxEvents-opts.KeepFirst),
	}
}

// Observe parses one line and applies it. readAt times lines that carry no NCCL timestamp.
// It returns the parsed line, valid until the next call.
func (t *Tracker) Observe(raw []byte, readAt time.Time) *Line {
	Parse(raw, &t.line)
	return t.Apply(&t.line, raw, readAt)
}

// Apply applies a line parsed by the caller (who routed it to this process).
func (t *Tracker) Apply(l *Line, raw []byte, readAt time.Time) *Line {
	t.Lines++
	if l.Kind == KindUnknown && t.lastWarn && l.Task == t.warnTask && !l.Glog && !otherOutput(Unprefixed(raw)) && !pythonException(l.Label) {
		// Unprefixed text right after a WARN goes on with it, unless a launcher's label
		// says another task printed it, or it is plainly another program's (a traceback).
		l.Kind = KindContinuation
	}
	t.Kinds[l.Kind]++
	if l.Kind == KindBlank {
		return l // NCCL's blank line before a WARN does not end a WARN run
	}
	ts := t.timeOf(l, readAt)
	if ts != 0 {
		if t.FirstTime == 0 {
			t.FirstTime = ts
		}
		if ts > t.LastTime {
			t.LastTime = ts
		}
	}
	if l.Host != nil && t.Host == "" {
		t.Host = string(l.Host)
		t.PID = l.PID
	}
	switch l.LauncherFrom {
	case RankFromJob:
		t.launcher[RankFromJob].note(l.LauncherRank)
		t.LauncherRank = l.LauncherRank
	case RankFromNode:
		t.launcher[RankFromNode].note(l.LauncherRank)
	}
	if l.Task >= 0 {
		t.launcher[RankFromTask].note(l.Task)
	}
	if l.Dev != t.lineDev && !t.devMixed && l.Dev >= 0 {
		t.noteLineDev(l.Dev)
	}
	if (l.Kind == KindChannel || l.Kind == KindProxyError) && !t.ownRankMixed {
		if r := OwnRank(l); r >= 0 && r != t.ownRank {
			t.ownRankMixed = t.ownRank >= 0
			t.ownRank = r
		}
	}
	wasWarn := t.lastWarn
	t.lastWarn = false
	if l.Kind != KindContinuation {
		t.warnTask = l.Task
	}
	if t.crumbTID != 0 && l.Kind != KindBreadcrumb {
		t.crumbHandled(l)
	}
	switch l.Kind {
	case KindColl:
		t.observeColl(l, ts)
	case KindInit:
		t.observeInit(l, ts)
	case KindCommInfo:
		// Split children print their own localRank (a data-parallel group of one rank per
		// node says 0 everywhere): the process's local rank is the one in its largest root
		// communicator.
		if c := t.comms[l.Comm]; c == nil || (c.Parent == 0 && c.NRanks >= t.localFrom) {
			t.LocalRank, t.NNodes = l.LocalRk, l.NNodes
			if c != nil {
				t.localFrom = c.NRanks
			}
		}
	case KindDestroy:
		t.observeDestroy(l, ts)
	case KindChannel:
		t.observeChannel(l)
	case KindVersion:
		if t.Version == "" {
			t.Version = VersionNumber(string(l.Text))
		}
	case KindUsingNetwork:
		t.Network = string(l.Text)
	case KindNetIBDevices:
		if devs := parseDeviceList(string(l.Text)); len(devs) > 0 {
			t.NetDevs = devs
		}
		// "; OOB ib0:10.0.12.7<0>": the address peers name this process by in their IB
		// errors.
		if i := bytes.Index(l.Msg, []byte("OOB ")); i >= 0 {
			t.addAddrs(string(l.Msg[i+len("OOB "):]))
		}
	case KindNetIBNone:
		t.IBNone = true
	case KindNetSocketDevices:
		if t.Network == "" || t.Network == "Socket" || len(t.NetDevs) == 0 {
			t.NetDevs = parseDeviceList(string(l.Text))
		}
		t.addAddrs(string(l.Text))
	case KindBootstrap:
		t.BootstrapAddr = string(l.Text)
		t.addAddrs(t.BootstrapAddr)
	case KindContinuation:
		t.lastWarn = true
		if e := t.newest(); e != nil {
			if len(e.Msg) < snapshot.MaxMsg {
				e.Msg = snapshot.CutMsg(e.Msg + " | " + string(trimSpace(raw)))
			}
		}
	case KindBreadcrumb:
		// A run of "-> N" lines marks one failure path: keep its first line only.
		if !wasWarn && l.Code != 0 && t.addEvent(l, ts) {
			t.crumbTID = l.TID
		}
		if l.ProgressThread() && t.ops == 0 {
			// The run ended on the progress thread: the process was past init even though
			// no op line says so (COLL not logged), and so was the error this run carries.
			t.readyEver = true
			if e := t.newest(); e != nil && e.Stage == snapshot.StageInit && (wasWarn || e.Kind == snapshot.EventBreadcrumb) {
				e.Stage = t.stage()
			}
		}
		t.lastWarn = true
	default:
		if t.addEvent(l, ts) {
			t.lastWarn = l.Level == LevelWarn
		}
	}
	return l
}

func (t *Tracker) timeOf(l *Line, readAt time.Time) int64 {
	if l.HasTime {
		ts := &l.Time
		if ts.Digits > t.TimestampDigits {
			t.TimestampDigits = ts.Digits
		} else if t.TimestampDigits < 0 {
			t.TimestampDigits = 0
		}
		if ts.Zoned {
			return time.Date(ts.Year, time.Month(ts.Month), ts.Day, ts.Hour, ts.Min, ts.Sec, ts.Nanos,
				time.FixedZone("", int(ts.Offset))).UnixMicro()
		}
		if ts.Yearless() {
			// glog's month and day: the year of the process's other lines, else of the
			// time the line was read; with neither, the line is as undated as before.
			ref := t.LastTime
			if ref == 0 && !readAt.IsZero() {
				ref = readAt.UnixMicro()
			}
			return ts.UnixMicro(t.opts.Location, ref)
		}
		if k := &t.hourKey; ts.Hour != k[3] || ts.Day != k[2] || ts.Month != k[1] || ts.Year != k[0] || t.hourUS == 0 {
			*k = [4]int{ts.Year, ts.Month, ts.Day, ts.Hour}
			t.hourUS = time.Date(ts.Year, time.Month(ts.Month), ts.Day, ts.Hour, 0, 0, 0, t.opts.Location).UnixMicro()
		}
		return t.hourUS + int64(ts.Min*60+ts.Sec)*1e6 + int64(ts.Nanos/1000)
	}
	if readAt.IsZero() {
		return 0
	}
	return readAt.UnixMicro()
}

func (t *Tracker) observeColl(l *Line, ts int64) {
	t.ops++
	c := t.lastComms[0]
	if c == nil || c.Ptr != l.Coll.Comm {
		if c = t.lastComms[1]; c == nil || c.Ptr != l.Coll.Comm {
			c = t.comms[l.Coll.Comm]
			if c == nil {
				c = t.placeholder(l.Coll.Comm, l.Coll.NRanks, ts)
			}
		}
		t.lastComms[0], t.lastComms[1] = c, t.lastComms[0]
	}
	c.LastT = ts
	t.Issued++
	if !l.Coll.Op.Collective() {
		t.observeP2P(c, l, OpRecord{T: ts, Idx: t.Issued, Count: l.Coll.Count, RedOp: l.Coll.RedOp,
			Root: int32(l.Coll.Root), Op: l.Coll.Op, Dtype: l.Coll.Datatype})
		return
	}
	c.Count++
	// The record is written in its ring slot field by field: built aside and copied, its
	// 48 bytes were read back in 16-byte loads from 8-byte stores just made, which the CPU
	// cannot forward (a stall on every per-op line).
	rec := &c.ring[int(c.Count-1)&(len(c.ring)-1)]
	rec.Seq, rec.T, rec.Idx, rec.Count, rec.RedOp = c.Count, ts, t.Issued, l.Coll.Count, l.Coll.RedOp
	rec.Root, rec.Op, rec.Dtype = int32(l.Coll.Root), l.Coll.Op, l.Coll.Datatype
	if n := t.opts.Times; n > 0 {
		if len(c.times) >= n {
			half := len(c.times) / 2
			c.times = append(c.times[:0], c.times[half:]...)
			c.timesFrom += int64(half)
		}
		if len(c.times) == 0 {
			c.timesFrom = c.Count
		}
		if len(c.times) == cap(c.times) {
			// Straight to the bound after a first step: growing by doubling copied and
			// cleared a tenth of a post-mortem's time.
			grown := make([]snapshot.Micros, len(c.times), min(n, max(2048, 8*cap(c.times))))
			copy(grown, c.times)
			c.times = grown
		}
		c.times = append(c.times, snapshot.Micros(ts))
	}
	c.Digest = chainDigest(c.Digest, rec)
	for i, every := range markLevels {
		if c.Count&(every-1) != 0 { // levels are powers of two
			break
		}
		c.marks[i][c.marksN[i]%marksPerLevel] = Mark{Seq: c.Count, Digest: c.Digest, T: ts}
		c.marksN[i]++
	}
}

func (t *Tracker) observeP2P(c *Comm, l *Line, rec OpRecord) {
	peer := l.Coll.Root
	p := c.P2P[peer]
	if p == nil {
		if len(c.P2P) >= maxPeers {
			return
		}
		if c.P2P == nil {
			c.P2P = make(map[int]*P2PCount)
		}
		p = &P2PCount{}
		c.P2P[peer] = p
	}
	switch l.Coll.Op {
	case OpSend, OpPutSignal, OpSignal:
		p.Sends++
		rec.Seq = p.Sends
		p.LastSend, p.LastSendOp = rec.T, rec
	default:
		p.Recvs++
		rec.Seq = p.Recvs
		p.LastRecv, p.LastRecvOp = rec.T, rec
	}
}

// chainDigest folds one signature into the running digest (a multiply-xorshift mix per
// field: cheap, and stable across ranks and versions). User reduction ops are mangled per
// communicator, so they are folded as one value.
func chainDigest(d uint64, r *OpRecord) uint64 {
	red := r.RedOp
	if red >= 5 {
		red = 5
	}
	if !r.Op.Reduces() {
		red = 0
	}
	root := int64(r.Root)
	if !r.Op.Rooted() {
		root = 0
	}
	d = mix(d, uint64(r.Op)|uint64(uint8(r.Dtype))<<8|uint64(red)<<16|uint64(root)<<24)
	return mix(d, r.Count)
}

func mix(d, v uint64) uint64 {
	d ^= v + 0x9e3779b97f4a7c15
	d *= 0xbf58476d1ce4e5b9
	return d ^ d>>31
}

func (t *Tracker) placeholder(ptr uint64, nranks int, ts int64) *Comm {
	c := t.newComm(ptr, ts)
	c.NRanks = nranks
	c.Rank = -1
	c.State = snapshot.CommUnknown
	c.ID = fmt.Sprintf("unjoined:%s:%d:0x%x", t.Host, t.PID, ptr)
	return c
}

func (t *Tracker) newComm(ptr uint64, ts int64) *Comm {
	if len(t.all) >= t.opts.MaxComms {
		t.evictOne()
	}
	t.lastComms = [2]*Comm{}
	c := &Comm{Ptr: ptr, Created: ts, SplitCount: -1, ring: newRing(t.opts.RingSize)}
	t.comms[ptr] = c
	t.all = append(t.all, c)
	return c
}

// rings keeps the rings of released trackers (Release) for new communicators: a folder of
// hundreds of logs is read one file after another, and each file's rings are garbage once
// it is rendered, which a process that does not collect (analyze) never reuses.
var rings sync.Pool // of *[]OpRecord

// newRing is a cleared ring of n records, one given back if there is one of that size.
func newRing(n int) []OpRecord {
	if p, _ := rings.Get().(*[]OpRecord); p != nil && len(*p) == n {
		clear(*p)
		return *p
	}
	return make([]OpRecord, n)
}

// Release gives the tracker's rings back for other trackers' communicators. The tracker is
// not used again: a snapshot taken before keeps copies of the ops, not the rings.
func (t *Tracker) Release() {
	for _, c := range t.all {
		if c.ring != nil {
			r := c.ring
			c.ring = nil
			rings.Put(&r)
		}
	}
	t.lastComms = [2]*Comm{}
}

// evictOne drops the oldest destroyed communicator, else the oldest one.
func (t *Tracker) evictOne() {
	victim := 0
	for i, c := range t.all {
		if c.State.Ended() {
			victim = i
			break
		}
	}
	c := t.all[victim]
	t.lastComms = [2]*Comm{}
	if t.comms[c.Ptr] == c {
		delete(t.comms, c.Ptr)
	}
	t.all = append(t.all[:victim], t.all[victim+1:]...)
}

func (t *Tracker) observeInit(l *Line, ts int64) {
	in := &l.Init
	c := t.comms[in.Comm]
	switch {
	case c != nil && c.State == snapshot.CommInit && l.Phase == PhaseInitComplete:
		c.State = snapshot.CommReady
		t.readyEver = true
		return
	case c != nil && c.State == snapshot.CommUnknown:
		// Ops were seen before the Init line (a log joined late): adopt the communicator.
	default:
		c = t.newComm(in.Comm, ts) // a new communicator, or a reused pointer
	}
	c.Rank, c.NRanks, c.CudaDev, c.NvmlDev, c.BusID = in.Rank, in.NRanks, in.CudaDev, in.NvmlDev, in.BusID
	c.API = string(in.API)
	c.Parent, c.SplitCount, c.Color = in.Parent, in.SplitCount, in.Color
	c.State = snapshot.CommInit
	if l.Phase == PhaseInitComplete {
		c.State = snapshot.CommReady
		t.readyEver = true
	}
	c.ID = t.commID(in)
}

// commID is the cross-rank identity of a communicator: its commId, or for split children
// the parent's identity plus splitCount (or the occurrence of its color) and color.
func (t *Tracker) commID(in *Init) string {
	if in.HasCommID {
		return "0x" + strconv.FormatUint(in.CommID, 16)
	}
	if !in.IsSplit {
		// NCCL before 2.18's commId: unique to this process until a reader joins it.
		return "unjoined:" + t.Host + ":" + strconv.Itoa(t.PID) + ":0x" + strconv.FormatUint(in.Comm, 16)
	}
	parent := "unjoined:" + t.Host + ":" + strconv.Itoa(t.PID) + ":0x" + strconv.FormatUint(in.Parent, 16)
	if p := t.comms[in.Parent]; p != nil {
		parent = p.ID
	}
	n := in.SplitCount
	if n < 0 {
		k := splitKey{parent: parent, color: in.Color}
		t.splitSeq[k]++
		n = t.splitSeq[k]
		if len(t.splitSeq) > 4*t.opts.MaxComms {
			clear(t.splitSeq)
		}
		return parent + "/c" + strconv.Itoa(in.Color) + "#" + strconv.Itoa(n)
	}
	return parent + "/s" + strconv.Itoa(n) + "c" + strconv.Itoa(in.Color)
}

func (t *Tracker) observeDestroy(l *Line, ts int64) {
	c := t.comms[l.Comm]
	if c == nil {
		return
	}
	switch l.Phase {
	case PhaseDestroy:
		c.State = snapshot.CommDestroyed
	case PhaseAbortStart, PhaseAbort:
		c.State = snapshot.CommAborted
		t.addEvent(l, ts)
	case PhaseRevoke, PhaseRevokeStart:
		c.State = snapshot.CommRevoked
	}
}

func (t *Tracker) observeChannel(l *Line) {
	// Channel lines carry no communicator pointer, and lazy connections print them long
	// after Init: keep them per process.
	// A communicator prints its channels in a run of identical paths.
	tr := l.Channel.Transport
	if len(tr) <= len(t.lastTransport) && string(tr) == string(t.lastTransport[:t.lastTransportLen]) {
		return
	}
	if len(tr) <= len(t.lastTransport) {
		t.lastTransportLen = copy(t.lastTransport[:], tr)
	}
	key := appendTransportKey(t.scratch[:0], l.Channel)
	for _, have := range t.Transports {
		if have == string(key) {
			return
		}
	}
	if len(t.Transports) < maxTransports {
		t.Transports = append(t.Transports, string(key))
	}
}

// appendTransportKey names a channel's path without the per-channel detail, e.g.
// "P2P/CUMEM/read" or "NET/IB/3/GDRDMA".
func appendTransportKey(b []byte, ch Channel) []byte {
	if len(ch.Net) > 0 {
		b = append(b, "NET/"...)
		b = append(b, ch.Net...)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(ch.NetDev), 10)
		if ch.GDR {
			b = append(b, "/GDRDMA"...)
		}
		return b
	}
	tr := ch.Transport
	if i := bytes.IndexByte(tr, ' '); i >= 0 {
		tr = tr[:i]
	}
	return append(b, tr...)
}

// otherOutput reports a line that is not the rest of a WARN though it follows one: a
// markdown fence, the application's or PyTorch's own output (tracebacks; its glog lines
// are known by their prefix, Line.Glog).
func otherOutput(raw []byte) bool {
	b := trimSpace(raw)
	for _, p := range [...]string{"```", "[E", "[W", "[I", "Traceback", "terminate called", "File \"", "what():", "#",
		"During handling of", "The above exception"} {
		if hasPrefix(b, p) {
			return true
		}
	}
	return pythonException(b)
}

// pythonException reports a Python exception's last traceback line: a dotted class name
// ending in Error, Exception or Interrupt, then a colon or the line's end.
func pythonException(b []byte) bool {
	end := 0
	for end < len(b) && end < 128 && (b[end] == '.' || b[end] == '_' || isDigit(b[end]) || b[end]|0x20 >= 'a' && b[end]|0x20 <= 'z') {
		end++
	}
	if end == 0 || end < len(b) && b[end] != ':' {
		return false
	}
	name := b[:end]
	return hasSuffix(name, "Error") || hasSuffix(name, "Exception") || hasSuffix(name, "Interrupt")
}

// crumbHandled drops the newest event, error breadcrumbs without a WARN, when their thread
// goes on with an ordinary INFO line: NCCL handled that error itself (2.4's topology
// search, "Could not find real path of /sys/class/net/veth0/device", then "include/net.h:19
// -> 2" and init carrying on). A failure ends its thread's lines, or prints a WARN.
func (t *Tracker) crumbHandled(l *Line) {
	if l.TID != t.crumbTID || l.Level != LevelInfo || l.Kind == KindContinuation || eventKinds[l.Kind] != "" {
		return
	}
	t.crumbTID = 0
	if e := t.newest(); e == nil || e.Kind != snapshot.EventBreadcrumb {
		return
	}
	t.eventTotal--
	n := len(t.events)
	switch {
	case n == 0:
		t.first = t.first[:len(t.first)-1]
	case n < cap(t.events):
		t.events = t.events[:n-1]
	default:
		// A full ring: lay it out oldest first without its newest, no longer full.
		ordered := t.Events()[len(t.first):]
		t.events = append(t.events[:0], ordered[:n-1]...)
		t.eventHead = 0
	}
}

// addEvent keeps the event the line reports, if any, in the bounded ring.
func (t *Tracker) addEvent(l *Line, ts int64) bool {
	e, ok := EventOf(l, ts)
	if !ok {
		return false
	}
	t.crumbTID = 0
	e.Stage = t.stage()
	t.keep(e)
	return true
}

// keep stores an event: among the first KeepFirst, else in the ring of the newest.
func (t *Tracker) keep(e snapshot.Event) {
	t.eventTotal++
	if len(t.first) < t.opts.KeepFirst {
		t.first = append(t.first, e)
		return
	}
	if len(t.events) < cap(t.events) {
		t.events = append(t.events, e)
		return
	}
	t.events[t.eventHead] = e
	t.eventHead = (t.eventHead + 1) % len(t.events)
}

// newest is the last event kept, nil when none.
func (t *Tracker) newest() *snapshot.Event {
	if n := len(t.events); n > 0 {
		return &t.events[(t.eventHead+n-1)%n]
	}
	if n := len(t.first); n > 0 {
		return &t.first[n-1]
	}
	return nil
}

// stage says where the process is: it has issued ops (run), a communicator of it is being
// set up or none ever was (init), or its communicators are ready and no op was logged.
func (t *Tracker) stage() snapshot.Stage {
	if t.ops > snapshot.FirstOps {
		return snapshot.StageRun
	}
	if t.ops > 0 {
		return snapshot.StageFirst
	}
	if !t.readyEver {
		return snapshot.StageInit
	}
	for _, c := range t.all {
		if c.State == snapshot.CommInit {
			return snapshot.StageInit
		}
	}
	return snapshot.StageReady
}

// VersionNumber turns "2.28.9+cuda13.0" (or RCCL's "2.27.7-HEAD:29e1567") into "2.28.9".
func VersionNumber(v string) string {
	if i := strings.IndexFunc(v, func(r rune) bool { return r != '.' && (r < '0' || r > '9') }); i >= 0 {
		return v[:i]
	}
	return v
}

// parseDeviceList reads " [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]" (also merged "{...}" forms and
// socket "[0]eth0:10.0.0.7<0>") into device names.
func parseDeviceList(s string) []string {
	var out []string
	for _, f := range strings.Fields(s) {
		if f == "[RO]" || !strings.HasPrefix(f, "[") {
			if strings.HasPrefix(f, "mlx") || strings.Contains(f, "/IB") || strings.Contains(f, "/RoCE") {
				out = append(out, strings.TrimRight(strings.TrimPrefix(f, "{"), ",}"))
			}
			continue
		}
		if i := strings.IndexByte(f, ']'); i >= 0 {
			f = f[i+1:]
		}
		f = strings.TrimRight(strings.TrimPrefix(f, "={"), ",}")
		if f == "" || f == "={" {
			continue
		}
		// Socket form "eth0:10.1.0.7<0>": keep the interface.
		if j := strings.IndexByte(f, '<'); j >= 0 {
			if k := strings.IndexByte(f, ':'); k >= 0 && k < j {
				f = f[:k]
			}
		}
		out = append(out, f)
		if len(out) >= 64 {
			break
		}
	}
	return out
}

// addAddrs collects the IPs of "[0]eth0:10.1.0.7<0> eth1:10.2.0.7<0>" style lists.
func (t *Tracker) addAddrs(list string) {
	for _, f := range strings.Fields(list) {
		lt := strings.IndexByte(f, '<')
		colon := strings.IndexByte(f, ':')
		if lt < 0 || colon < 0 || colon > lt {
			continue
		}
		ip := f[colon+1 : lt]
		dup := false
		for _, a := range t.Addrs {
			dup = dup || a == ip
		}
		if !dup && len(t.Addrs) < 8 {
			t.Addrs = append(t.Addrs, ip)
		}
	}
}

// Comms returns the communicators kept, in creation order.
func (t *Tracker) Comms() []*Comm { return t.all }

// Events returns the kept events, oldest first.
func (t *Tracker) Events() []snapshot.Event {
	out := make([]snapshot.Event, 0, len(t.first)+len(t.events))
	out = append(out, t.first...)
	for i := range t.events {
		out = append(out, t.events[(t.eventHead+i)%len(t.events)])
	}
	return out
}

// Recent returns the kept ops, oldest first.
func (c *Comm) Recent() []OpRecord {
	n := min(c.Count, int64(len(c.ring)))
	out := make([]OpRecord, 0, n)
	for s := c.Count - n + 1; s <= c.Count; s++ {
		// A slot not yet refilled after a restore holds another position: skip it.
		if r := c.ring[int(s-1)&(len(c.ring)-1)]; r.Seq == s {
			out = append(out, r)
		}
	}
	return out
}

// Last returns the newest op, if any.
func (c *Comm) Last() (OpRecord, bool) {
	if c.Count == 0 {
		return OpRecord{}, false
	}
	r := c.ring[int(c.Count-1)&(len(c.ring)-1)]
	return r, r.Seq == c.Count
}

// Marks returns the kept marks, ordered by position, without duplicates.
func (c *Comm) Marks() []Mark {
	var out []Mark
	for lvl := range markLevels {
		n := min(c.marksN[lvl], marksPerLevel)
		for i := 0; i < n; i++ {
			out = append(out, c.marks[lvl][i])
		}
	}
	sortMarks(out)
	dedup := out[:0]
	for i, m := range out {
		if i > 0 && m.Seq == dedup[len(dedup)-1].Seq {
			continue
		}
		dedup = append(dedup, m)
	}
	return dedup
}

func sortMarks(m []Mark) {
	for i := 1; i < len(m); i++ {
		for j := i; j > 0 && m[j].Seq < m[j-1].Seq; j-- {
			m[j], m[j-1] = m[j-1], m[j]
		}
	}
}

// claim is what one source said of a number, line after line: the number (-1: nothing
// yet), and whether two lines said different ones.
type claim struct {
	v     int
	mixed bool
	set   bool
}

func (c *claim) note(v int) {
	switch {
	case !c.set:
		c.v, c.set = v, true
	case c.v != v:
		c.mixed = true
	}
}

// value is the number the source said, -1 when it said none or two.
func (c claim) value() int {
	if !c.set || c.mixed {
		return -1
	}
	return c.v
}

const numRankFrom = RankFromTask + 1

// RankClaims are what one process's own lines say its rank is, source by source, for a
// reader that sees more than one process (analyze) to tie to pids and hosts. -1: the
// source said nothing, or two different things (then its Mixed is set).
type RankClaims struct {
	// Init is its rank in its largest root communicator, InitRanks that one's size.
	Init, InitRanks int
	// Own is the rank its channel and proxy lines carry, read only without Init lines.
	Own int
	// Job, Node and Task are the launcher prefixes' numbers (RankFrom): the rank in the
	// job, the rank on the node, the launcher's task.
	Job, Node, Task                int
	JobMixed, NodeMixed, TaskMixed bool
}

// RankClaims returns what the process's lines said of its rank.
func (t *Tracker) RankClaims() RankClaims {
	c := RankClaims{Init: -1, Own: -1}
	for _, cm := range t.all {
		if cm.Parent == 0 && cm.Rank >= 0 && cm.NRanks > c.InitRanks {
			c.InitRanks, c.Init = cm.NRanks, cm.Rank
		}
	}
	if len(t.all) == 0 && !t.ownRankMixed {
		c.Own = t.ownRank
	}
	j, n, k := t.launcher[RankFromJob], t.launcher[RankFromNode], t.launcher[RankFromTask]
	c.Job, c.Node, c.Task = j.value(), n.value(), k.value()
	c.JobMixed, c.NodeMixed, c.TaskMixed = j.mixed, n.mixed, k.mixed
	return c
}

// GlobalRank is the process's rank in the job: the rank a launcher prefix of the job's
// ranks ("[rankN]:", Open MPI's) gave all its lines, else its rank in the largest root
// communicator, else the rank its channel and proxy lines carry (no Init line), else -1.
// Labels of the launcher's tasks and ranks on a node are not ranks in the job (RankClaims
// has them).
func (t *Tracker) GlobalRank() int {
	c := t.RankClaims()
	switch {
	case c.Job >= 0:
		return c.Job
	case c.Init >= 0:
		return c.Init
	}
	return c.Own
}

// CudaDev and BusID of the process: from its first communicator.
func (t *Tracker) Device() (cudaDev int, busID uint64) {
	for _, c := range t.all {
		if c.Rank >= 0 {
			return c.CudaDev, c.BusID
		}
	}
	if !t.devMixed {
		// No Init line (a log joined late, a posted excerpt): the "[dev]" its lines carry.
		return t.lineDev, 0
	}
	return -1, 0
}

// noteLineDev records a line's "[dev]"; NCCL's proxy threads of older releases print
// garbage there, which reads as a second device and leaves the process's unknown.
func (t *Tracker) noteLineDev(dev int) {
	if t.lineDev < 0 && dev < 1024 {
		t.lineDev = dev
		return
	}
	t.devMixed = true
}
