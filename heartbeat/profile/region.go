// Package profile reads the shared-memory regions that the NCCL watchdog profiler plugin
// (profiler/, a C library NCCL loads into every rank process) writes: one file per process,
// ncclwatch-prof.<host>.<pid>.bin, holding the process's identity and, per communicator,
// the collectives issued, started on the GPU and completed, the oldest operation still in
// flight and, per peer, p2p counts and network proxy progress. This is what NCCL's log lines
// cannot say: whether an issued operation finished.
//
// The plugin writes and this package only reads, without locks: each communicator slot is
// guarded by a seqlock, and Read copies a slot between two loads of its sequence number,
// retrying while a writer is inside. Decode is the pure half, over bytes already copied, and
// never panics on any input (see FuzzDecode).
package profile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/snapshot"
)

var (
	// ErrNotRegion: the file does not start with Magic.
	ErrNotRegion = errors.New("not an ncclwatch profiler region")
	// ErrVersion: a region of a layout version this reader does not know (see VersionError).
	ErrVersion = errors.New("unsupported profiler region layout version")
	// ErrTruncated: the file is shorter than its header says.
	ErrTruncated = errors.New("truncated profiler region")
	// ErrCorrupt: sizes or counts in the region contradict the layout.
	ErrCorrupt = errors.New("corrupt profiler region")
)

// VersionError reports a region written with another layout version; only its magic and
// version number were read.
type VersionError struct{ Version uint32 }

func (e *VersionError) Error() string {
	return fmt.Sprintf("%v: %d (this reader knows %d)", ErrVersion, e.Version, LayoutVersion)
}

// Unwrap makes errors.Is(err, ErrVersion) hold.
func (e *VersionError) Unwrap() error { return ErrVersion }

// ProcState says whether the process that writes the region has exited.
type ProcState uint32

const (
	ProcUnknown ProcState = 0
	ProcRunning ProcState = 1
	// ProcExited: the process ended through exit() (a crash or a kill leaves ProcRunning:
	// check the pid and ProcStartTicks).
	ProcExited ProcState = 2
)

func (s ProcState) String() string {
	switch s {
	case ProcRunning:
		return "running"
	case ProcExited:
		return "exited"
	}
	return "unknown"
}

// MarshalText writes the state's name in JSON.
func (s ProcState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// OpKind is what an Op is.
type OpKind uint8

const (
	OpNone OpKind = 0
	OpColl OpKind = 1
	OpP2P  OpKind = 2
)

func (k OpKind) String() string {
	switch k {
	case OpColl:
		return "coll"
	case OpP2P:
		return "p2p"
	}
	return "none"
}

// MarshalText writes the kind's name in JSON.
func (k OpKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ProxyState is the last state NCCL reported for a network proxy op or step with a peer
// (ncclProfilerEventState_t). The waits tell who is holding a transfer up.
type ProxyState uint8

const (
	StateNone          ProxyState = 0
	StateSendGPUWait   ProxyState = 8  // the send waits for this rank's GPU to fill the buffer
	StateSendWait      ProxyState = 9  // the send is on the network, waiting for completion
	StateRecvWait      ProxyState = 10 // the receive waits for the peer's data
	StateRecvFlushWait ProxyState = 11
	StateRecvGPUWait   ProxyState = 12 // the receive waits for this rank's GPU to consume data
	StateInProgress    ProxyState = 19 // a proxy op started progressing (v4+)
	StateSendPeerWait  ProxyState = 20 // the send waits for the peer to post a receive (v4+)
)

var proxyStateNames = map[ProxyState]string{
	StateNone: "", StateSendGPUWait: "SendGPUWait", StateSendWait: "SendWait", StateRecvWait: "RecvWait",
	StateRecvFlushWait: "RecvFlushWait", StateRecvGPUWait: "RecvGPUWait", StateInProgress: "InProgress",
	StateSendPeerWait: "SendPeerWait",
}

func (s ProxyState) String() string {
	if n, ok := proxyStateNames[s]; ok {
		return n
	}
	return "state" + strconv.Itoa(int(s))
}

// MarshalText writes the state's name in JSON.
func (s ProxyState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

const (
	slotFree = 0
	slotLive = 1
	dirSend  = 0
	dirRecv  = 1
)

// Region is one process's region as read at one moment.
type Region struct {
	Path    string  `json:"path,omitempty"`
	Process Process `json:"process"`
	Comms   []Comm  `json:"comms"`
	// Busy lists the comm slots left out because a writer was inside them (an odd sequence
	// number in a copied image, or one that kept changing while Read retried).
	Busy []int `json:"busy,omitempty"`
}

// Process is the region header: who writes it and what the plugin could not record.
type Process struct {
	PID            int             `json:"pid"`
	ProcStartTicks uint64          `json:"proc_start_ticks"` // /proc/<pid>/stat field 22, tells a reused pid apart
	Host           string          `json:"host"`
	JobID          string          `json:"job_id,omitempty"`
	Rank           int             `json:"rank"` // RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE; -1 unset
	LocalRank      int             `json:"local_rank"`
	WorldSize      int             `json:"world_size"`
	LocalWorldSize int             `json:"local_world_size"`
	Started        snapshot.Micros `json:"started"`
	StartedMono    uint64          `json:"started_mono_us"`
	// ABI is the ncclProfiler_vN NCCL picked (3..6); 0 before the first communicator.
	ABI int `json:"abi"`
	// NCCLVersion is what ncclGetVersion said, e.g. "2.28.9"; empty when it could not be
	// asked (NCCLRange then names the releases that use ABI).
	NCCLVersion    string          `json:"nccl_version,omitempty"`
	State          ProcState       `json:"state"`
	Exited         snapshot.Micros `json:"exited,omitempty"`
	Disabled       bool            `json:"disabled,omitempty"`
	DisabledReason string          `json:"disabled_reason,omitempty"`
	EventMask      uint64          `json:"event_mask"`
	DroppedComms   uint64          `json:"dropped_comms,omitempty"` // communicators past the slots
	DroppedEvents  uint64          `json:"dropped_events,omitempty"`
	DroppedPeers   uint64          `json:"dropped_peers,omitempty"`
	CommsInited    uint64          `json:"comms_inited"`
	CommsFinalized uint64          `json:"comms_finalized"`
	Plugin         string          `json:"plugin"`
	// A second profiler plugin NCCLWATCH_PROFILER_CHAIN named, called beside this one: its
	// state, the ABI version it is called with, its name, why it failed, and the events it did
	// not get.
	Chain        ChainState `json:"chain,omitempty"`
	ChainABI     int        `json:"chain_abi,omitempty"`
	ChainName    string     `json:"chain_name,omitempty"`
	ChainError   string     `json:"chain_error,omitempty"`
	ChainDropped uint64     `json:"chain_dropped,omitempty"`
}

// ChainState says whether a second profiler plugin is chained beside this one.
type ChainState uint32

const (
	ChainNone   ChainState = 0
	ChainActive ChainState = 1
	// ChainFailed: NCCLWATCH_PROFILER_CHAIN named a plugin that could not be used (ChainError
	// says why); this one went on alone.
	ChainFailed ChainState = 2
)

func (s ChainState) String() string {
	switch s {
	case ChainNone:
		return "none"
	case ChainActive:
		return "active"
	case ChainFailed:
		return "failed"
	}
	return "state" + strconv.Itoa(int(s))
}

// MarshalText writes the state's name in JSON.
func (s ChainState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// NCCLRange names the NCCL releases that pick the profiler ABI the process used.
func (p Process) NCCLRange() string {
	switch p.ABI {
	case 3:
		return "2.26"
	case 4:
		return "2.27"
	case 5:
		return "2.28"
	case 6:
		return "2.29+"
	}
	return ""
}

// Comm is one live communicator of the process.
type Comm struct {
	Slot   int             `json:"slot"`
	Gen    uint32          `json:"gen"`
	ID     CommID          `json:"id"` // NCCL's commId (commHash): equal on every rank, split comms included
	Rank   int             `json:"rank"`
	NRanks int             `json:"nranks"` // -1 under ABI v3, whose init says nothing of the comm
	NNodes int             `json:"nnodes"`
	Init   snapshot.Micros `json:"init"`
	// CollIssued counts collectives issued; CollStarted is the newest one whose kernel ran on
	// the GPU, CollDone the newest up to which all completed (kernel channels and network proxy
	// ops stopped). Positions are 1-based, per communicator, across collective functions.
	CollIssued  uint64 `json:"coll_issued"`
	CollStarted uint64 `json:"coll_started"`
	CollDone    uint64 `json:"coll_done"`
	// NCCLSeq is NCCL's own seqNumber of the newest collective: per comm and per function.
	NCCLSeq       uint64          `json:"nccl_seq"`
	P2PIssued     uint64          `json:"p2p_issued"`
	P2PDone       uint64          `json:"p2p_done"`
	LastEvent     snapshot.Micros `json:"last_event"`
	LastDone      snapshot.Micros `json:"last_done,omitempty"`
	DroppedEvents uint64          `json:"dropped_events,omitempty"`
	DroppedPeers  uint64          `json:"dropped_peers,omitempty"`
	// MergedOps counts ops issued while the plugin's ring of tracked ops was full: each
	// shares the newest tracked op's completion, so the counters stay exact.
	MergedOps uint64 `json:"merged_ops,omitempty"`
	// TimedColls counts completed collectives whose kernel start was seen; QueueUs sums
	// their µs from issue to the kernel's start, BusyUs from that start to completion. A rank
	// that arrives late at its collectives waits least: its busy time per op is the shortest.
	TimedColls uint64 `json:"timed_colls,omitempty"`
	QueueUs    uint64 `json:"queue_us,omitempty"`
	BusyUs     uint64 `json:"busy_us,omitempty"`
	Pending    int    `json:"pending"` // operations tracked and not complete
	// InFlight is the oldest operation not complete (nil when none); Last the newest issued.
	InFlight *Op    `json:"in_flight,omitempty"`
	Last     *Op    `json:"last,omitempty"`
	Peers    []Peer `json:"peers,omitempty"`
	// Sigs are the newest collectives' signatures (up to 64, oldest first): what this rank
	// called at each position, to compare with its peers. Marks are the digest of every
	// signature up to positions that are multiples of 16, 256 and 4096; Digest is the digest
	// up to CollIssued. Equal digests at one position mean the ranks called the same things.
	Sigs   []Sig  `json:"sigs,omitempty"`
	Marks  []Mark `json:"marks,omitempty"`
	Digest uint64 `json:"digest,omitempty"`
	// Timings are the completed ops timed, per function and message size bucket (cells with
	// none left out), cumulative since the communicator's init.
	Timings []OpTiming `json:"timings,omitempty"`
}

// BWFunc is what an OpTiming times: a collective function, or a Send or Recv.
type BWFunc uint8

const (
	BWAllReduce     BWFunc = 0
	BWAllGather     BWFunc = 1
	BWReduceScatter BWFunc = 2
	BWBroadcast     BWFunc = 3
	BWReduce        BWFunc = 4
	BWSend          BWFunc = 5
	BWRecv          BWFunc = 6
	// BWOther: any other collective (AllToAll, Gather, Scatter, ...), whose bus bandwidth
	// NCCL does not define.
	BWOther BWFunc = 7

	// NumBWFuncs and NumBWBuckets are the region's timing table: functions x size buckets.
	NumBWFuncs   = 8
	NumBWBuckets = 6
)

var bwFuncNames = [NumBWFuncs]string{"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "Send", "Recv", "other"}

func (f BWFunc) String() string {
	if int(f) < NumBWFuncs {
		return bwFuncNames[f]
	}
	return "func" + strconv.Itoa(int(f))
}

// MarshalText writes the function's name in JSON.
func (f BWFunc) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// BucketLow is the smallest message (bytes per rank: count x datatype size) of size bucket b:
// 0, 4 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB. Bucket b holds messages below BucketLow(b+1).
func BucketLow(b int) uint64 {
	if b <= 0 {
		return 0
	}
	return 4096 << (4 * (b - 1))
}

// BucketName names size bucket b by its bounds: "0-4KiB", ..., "256MiB+".
func BucketName(b int) string {
	if b >= NumBWBuckets-1 {
		return iec(BucketLow(NumBWBuckets-1)) + "+"
	}
	return iec(BucketLow(b)) + "-" + iec(BucketLow(b+1))
}

func iec(n uint64) string {
	for _, u := range []string{"", "Ki", "Mi", "Gi"} {
		if n < 1024 || n%1024 != 0 {
			return strconv.FormatUint(n, 10) + u + "B"
		}
		n /= 1024
	}
	return strconv.FormatUint(n, 10) + "TiB"
}

// OpTiming is the completed ops of one function and size bucket that the plugin timed.
type OpTiming struct {
	Func   BWFunc `json:"func"`
	Bucket int    `json:"bucket"`
	Ops    uint64 `json:"ops"`
	// Bytes sums the ops' messages: count x datatype size each, as the rank passed them
	// (an AllGather's input, a ReduceScatter's output).
	Bytes uint64 `json:"bytes"`
	// ExecNs sums their execution times: from the first kernel channel's start to the last
	// one's stop; GPUTimed of them measured by the GPU's own clock, the others by the host's.
	ExecNs   uint64 `json:"exec_ns"`
	GPUTimed uint64 `json:"gpu_timed,omitempty"`
}

// Sig is what a collective was called with.
type Sig struct {
	Seq      uint64          `json:"seq"`
	Func     string          `json:"func"`
	Count    uint64          `json:"count"`
	Datatype string          `json:"datatype"`
	Root     int             `json:"root"`
	Issued   snapshot.Micros `json:"issued"`
	ProcSeq  uint32          `json:"proc_seq,omitempty"`
}

// Mark is the digest of a communicator's call history up to Seq.
type Mark struct {
	Seq    uint64          `json:"seq"`
	Digest uint64          `json:"digest"`
	T      snapshot.Micros `json:"t"`
}

// CommID is NCCL's commId of a communicator (its commHash, 2.26+).
type CommID uint64

// String formats the id as NCCL's Init line prints commId (and logparse keys comms).
func (id CommID) String() string { return "0x" + strconv.FormatUint(uint64(id), 16) }

// MarshalText writes the id in hex in JSON, as NCCL prints it.
func (id CommID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// Op is one collective or point-to-point operation.
type Op struct {
	Kind OpKind `json:"kind"`
	// Seq: a collective's position (as Comm.CollIssued counts); a p2p's position among the
	// p2p operations with its peer in its direction.
	Seq             uint64          `json:"seq"`
	NCCLSeq         uint64          `json:"nccl_seq,omitempty"`
	Func            string          `json:"func"`
	Count           uint64          `json:"count"`
	Datatype        string          `json:"datatype"`
	Algo            string          `json:"algo,omitempty"`
	Proto           string          `json:"proto,omitempty"`
	Root            int             `json:"root"` // collective root, or a p2p's peer
	NChannels       int             `json:"nchannels"`
	KernelChStarted int             `json:"kch_started"`
	KernelChDone    int             `json:"kch_done"`
	ProxyOpen       int             `json:"proxy_open"`
	Issued          snapshot.Micros `json:"issued"`
	GPUStarted      snapshot.Micros `json:"gpu_started,omitempty"` // host time its first kernel channel was seen running
	GPUTimer        uint64          `json:"gpu_timer,omitempty"`   // GPU globaltimer (ns) at that start, ABI v4+
	// ProcSeq is the op's place in the issue order of the whole process, across its
	// communicators (the low 32 bits of a counter; 0 unknown): which of two ops on two
	// communicators this process called first.
	ProcSeq uint32 `json:"proc_seq,omitempty"`
}

// Peer is what a communicator did with one other rank.
type Peer struct {
	Rank int     `json:"rank"`
	Send PeerDir `json:"send"`
	Recv PeerDir `json:"recv"`
}

// PeerDir is one direction with a peer. Proxy figures cover the network (NET transport)
// only: ranks that talk through NVLink or shared memory have no proxy ops.
type PeerDir struct {
	P2PIssued    uint64          `json:"p2p_issued,omitempty"`
	P2PDone      uint64          `json:"p2p_done,omitempty"`
	LastP2P      snapshot.Micros `json:"last_p2p,omitempty"`
	ProxyOps     uint64          `json:"proxy_ops,omitempty"` // started
	ProxyOpsDone uint64          `json:"proxy_ops_done,omitempty"`
	Steps        uint64          `json:"steps,omitempty"` // of every proxy op started
	StepsDone    uint64          `json:"steps_done,omitempty"`
	LastStep     snapshot.Micros `json:"last_step,omitempty"`
	State        ProxyState      `json:"state,omitempty"`
	StateAt      snapshot.Micros `json:"state_at,omitempty"`
	// NetUs and NetSteps (send only) sum the time network steps took from being handed to
	// the network (SendWait) to their end, and those steps: the link's own time per step,
	// whatever the ranks around it do.
	NetUs    uint64 `json:"net_us,omitempty"`
	NetSteps uint64 `json:"net_steps,omitempty"`
	Channel  int    `json:"channel"`
}

// OpenProxyOps is how many proxy ops with the peer in this direction are still running.
func (d PeerDir) OpenProxyOps() uint64 {
	if d.ProxyOpsDone > d.ProxyOps {
		return 0
	}
	return d.ProxyOps - d.ProxyOpsDone
}

var le = binary.LittleEndian

func u32(b []byte, off int) uint32 { return le.Uint32(b[off:]) }
func u64(b []byte, off int) uint64 { return le.Uint64(b[off:]) }
func i32(b []byte, off int) int    { return int(int32(le.Uint32(b[off:]))) }

// cstr reads a NUL-padded string field; bytes that are not UTF-8 become U+FFFD.
func cstr(b []byte, off, n int) string {
	s := b[off : off+n]
	if i := strings.IndexByte(string(s), 0); i >= 0 {
		s = s[:i]
	}
	return strings.ToValidUTF8(string(s), "\uFFFD")
}

// geometry is where a region keeps its slots, from its header.
type geometry struct {
	size     int
	maxComms int
	commSize int
	maxPeers int
}

// checkHeader validates magic, version and geometry; b holds at least the header fields.
func checkHeader(b []byte) (geometry, error) {
	var g geometry
	if len(b) < hdrLayoutVersion+4 {
		return g, fmt.Errorf("%w: %d bytes, the header alone is %d", ErrTruncated, len(b), headerSize)
	}
	if m := u64(b, hdrMagic); m != Magic {
		return g, fmt.Errorf("%w: magic %#x", ErrNotRegion, m)
	}
	if v := u32(b, hdrLayoutVersion); v != LayoutVersion {
		return g, &VersionError{Version: v}
	}
	if len(b) < headerSize {
		return g, fmt.Errorf("%w: %d bytes, the header alone is %d", ErrTruncated, len(b), headerSize)
	}
	hs, rs := u32(b, hdrHeaderSize), u64(b, hdrRegionSize)
	mc, cs, mp := u32(b, hdrMaxComms), u32(b, hdrCommSize), u32(b, hdrMaxPeers)
	ps, ops := u32(b, hdrPeerSize), u32(b, hdrOpSize)
	// The struct sizes are fixed by the layout version; only the table bounds may differ
	// between builds, and the sizes must then add up.
	switch {
	case hs != headerSize || ps != peerSize || ops != opSize:
		return g, fmt.Errorf("%w: header %d, peer %d, op %d bytes (layout %d has %d, %d, %d)",
			ErrCorrupt, hs, ps, ops, LayoutVersion, headerSize, peerSize, opSize)
	case mc == 0 || mc > 4096 || mp == 0 || mp > 65536:
		return g, fmt.Errorf("%w: %d comm slots of %d peers", ErrCorrupt, mc, mp)
	case uint64(cs) != commFixedSize+uint64(mp)*peerSize:
		return g, fmt.Errorf("%w: comm slot of %d bytes for %d peers", ErrCorrupt, cs, mp)
	case rs != headerSize+uint64(mc)*uint64(cs):
		return g, fmt.Errorf("%w: region of %d bytes for %d slots of %d", ErrCorrupt, rs, mc, cs)
	case uint64(len(b)) < rs:
		return g, fmt.Errorf("%w: %d bytes of %d", ErrTruncated, len(b), rs)
	}
	g = geometry{size: int(rs), maxComms: int(mc), commSize: int(cs), maxPeers: int(mp)}
	return g, nil
}

func (g geometry) slot(i int) (off int) { return headerSize + i*g.commSize }

// Decode parses a region image (a file's bytes, or what Read copied). Slots whose seqlock is
// odd in the image are listed in Busy and left out.
func Decode(b []byte) (*Region, error) {
	g, err := checkHeader(b)
	if err != nil {
		return nil, err
	}
	return decode(b, g, nil)
}

func decode(b []byte, g geometry, busy []bool) (*Region, error) {
	r := &Region{Process: decodeProcess(b)}
	for i := range g.maxComms {
		s := b[g.slot(i) : g.slot(i)+g.commSize]
		if (busy != nil && busy[i]) || u64(s, chSeq)%2 == 1 {
			r.Busy = append(r.Busy, i)
			continue
		}
		switch st := u32(s, chState); st {
		case slotFree:
			continue
		case slotLive:
		default:
			return nil, fmt.Errorf("%w: comm slot %d has state %d", ErrCorrupt, i, st)
		}
		c, err := decodeComm(s, i, g.maxPeers)
		if err != nil {
			return nil, err
		}
		r.Comms = append(r.Comms, c)
	}
	return r, nil
}

func decodeProcess(b []byte) Process {
	p := Process{
		PID:            i32(b, hdrPID),
		ProcStartTicks: u64(b, hdrProcStartTicks),
		Host:           cstr(b, hdrHost, 64),
		JobID:          cstr(b, hdrJobID, 64),
		Rank:           i32(b, hdrRank),
		LocalRank:      i32(b, hdrLocalRank),
		WorldSize:      i32(b, hdrWorldSize),
		LocalWorldSize: i32(b, hdrLocalWorldSize),
		Started:        snapshot.Micros(u64(b, hdrStartUs)),
		StartedMono:    u64(b, hdrStartMonoUs),
		ABI:            int(u32(b, hdrProfilerABI)),
		NCCLVersion:    ncclVersion(u32(b, hdrNCCLVersion)),
		State:          ProcState(u32(b, hdrState)),
		Exited:         snapshot.Micros(u64(b, hdrExitUs)),
		Disabled:       u32(b, hdrDisabled) != 0,
		EventMask:      u64(b, hdrEventMask),
		DroppedComms:   u64(b, hdrDroppedComms),
		DroppedEvents:  u64(b, hdrDroppedEvents),
		DroppedPeers:   u64(b, hdrDroppedPeers),
		CommsInited:    u64(b, hdrCommsInited),
		CommsFinalized: u64(b, hdrCommsFinalized),
		Plugin:         cstr(b, hdrPluginVersion, 32),
		ChainABI:       int(u32(b, hdrChainABI)),
		Chain:          ChainState(u32(b, hdrChainState)),
		ChainDropped:   u64(b, hdrChainDropped),
		ChainName:      cstr(b, hdrChainName, 32),
		ChainError:     cstr(b, hdrChainError, 96),
	}
	if p.Disabled {
		p.DisabledReason = cstr(b, hdrDisabledReason, 128)
	}
	return p
}

// ncclVersion spells NCCL_VERSION_CODE: X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before.
func ncclVersion(code uint32) string {
	if code == 0 {
		return ""
	}
	x, y, z := code/1000, code%1000/100, code%100
	if code >= 10000 {
		x, y = code/10000, code%10000/100
	}
	return fmt.Sprintf("%d.%d.%d", x, y, z)
}

func decodeComm(s []byte, slot, maxPeers int) (Comm, error) {
	n := int(u32(s, chNPeers))
	if n > maxPeers {
		return Comm{}, fmt.Errorf("%w: comm slot %d uses %d peer rows of %d", ErrCorrupt, slot, n, maxPeers)
	}
	c := Comm{
		Slot:          slot,
		Gen:           u32(s, chGen),
		ID:            CommID(u64(s, chCommID)),
		Rank:          i32(s, chRank),
		NRanks:        i32(s, chNRanks),
		NNodes:        i32(s, chNNodes),
		Init:          snapshot.Micros(u64(s, chInitUs)),
		CollIssued:    u64(s, chCollIssued),
		CollStarted:   u64(s, chCollStarted),
		CollDone:      u64(s, chCollDone),
		NCCLSeq:       u64(s, chNCCLSeq),
		P2PIssued:     u64(s, chP2PIssued),
		P2PDone:       u64(s, chP2PDone),
		LastEvent:     snapshot.Micros(u64(s, chLastEventUs)),
		LastDone:      snapshot.Micros(u64(s, chLastDoneUs)),
		DroppedEvents: u64(s, chDroppedEvents),
		DroppedPeers:  u64(s, chDroppedPeers),
		MergedOps:     u64(s, chMergedOps),
		TimedColls:    u64(s, chTimedColls),
		QueueUs:       u64(s, chQueueUs),
		BusyUs:        u64(s, chBusyUs),
		Pending:       int(u32(s, chPending)),
		InFlight:      decodeOp(s[chInflight : chInflight+opSize]),
		Last:          decodeOp(s[chLast : chLast+opSize]),
	}
	c.Sigs, c.Marks, c.Digest = decodeHistory(s[len(s)-tailSize:], c.CollIssued)
	c.Timings = decodeTimings(s[len(s)-bwSize:])
	for i := range n {
		p := s[commHdrSize+i*peerSize : commHdrSize+(i+1)*peerSize]
		c.Peers = append(c.Peers, Peer{
			Rank: i32(p, peerRank),
			Send: decodePeerDir(p[peerDirs : peerDirs+peerDirSize]),
			Recv: decodePeerDir(p[peerDirs+peerDirSize : peerDirs+2*peerDirSize]),
		})
	}
	return c, nil
}

// decodeHistory reads a comm's newest signatures (those of positions still in the ring,
// oldest first) and its marks (oldest first).
func decodeHistory(h []byte, issued uint64) (sigs []Sig, marks []Mark, digest uint64) {
	for i := range numSigs {
		b := h[histSigs+i*sigSize : histSigs+(i+1)*sigSize]
		seq := u64(b, sigSeq)
		if seq == 0 || seq > issued || issued-seq >= numSigs || (seq-1)%numSigs != uint64(i) {
			continue
		}
		sigs = append(sigs, Sig{Seq: seq, Func: cstr(b, sigFunc, strLen), Count: u64(b, sigCount),
			Datatype: cstr(b, sigDtype, strLen), Root: i32(b, sigRoot), Issued: snapshot.Micros(u64(b, sigIssueUs)),
			ProcSeq: u32(b, sigProcSeq)})
	}
	sort.Slice(sigs, func(a, b int) bool { return sigs[a].Seq < sigs[b].Seq })
	for i := range numMarkLevels * marksPerLevel {
		b := h[histMarks+i*markSize : histMarks+(i+1)*markSize]
		if seq := u64(b, markSeq); seq != 0 && seq <= issued {
			marks = append(marks, Mark{Seq: seq, Digest: u64(b, markDigest), T: snapshot.Micros(u64(b, markTUs))})
		}
	}
	sort.Slice(marks, func(a, b int) bool { return marks[a].Seq < marks[b].Seq })
	// A mark of a higher level repeats one of a lower level at the same position.
	marks = slices.CompactFunc(marks, func(a, b Mark) bool { return a.Seq == b.Seq })
	return sigs, marks, u64(h, histDigest)
}

func decodeTimings(b []byte) []OpTiming {
	var out []OpTiming
	for f := range NumBWFuncs {
		for k := range NumBWBuckets {
			c := b[(f*NumBWBuckets+k)*bwCellSize:]
			if ops := u64(c, bwOps); ops > 0 {
				out = append(out, OpTiming{Func: BWFunc(f), Bucket: k, Ops: ops, Bytes: u64(c, bwBytes),
					ExecNs: u64(c, bwExecNs), GPUTimed: u64(c, bwGPUTimed)})
			}
		}
	}
	return out
}

func decodeOp(b []byte) *Op {
	k := OpKind(b[opKind])
	if k == OpNone {
		return nil
	}
	return &Op{
		Kind:            k,
		Seq:             u64(b, opSeq),
		NCCLSeq:         u64(b, opNCCLSeq),
		Func:            cstr(b, opFunc, strLen),
		Count:           u64(b, opCount),
		Datatype:        cstr(b, opDtype, strLen),
		Algo:            cstr(b, opAlgo, strLen),
		Proto:           cstr(b, opProto, strLen),
		Root:            i32(b, opRoot),
		NChannels:       int(b[opNChannels]),
		KernelChStarted: int(b[opKchStarted]),
		KernelChDone:    int(b[opKchDone]),
		ProxyOpen:       int(u32(b, opProxyOpen)),
		Issued:          snapshot.Micros(u64(b, opIssueUs)),
		GPUStarted:      snapshot.Micros(u64(b, opGPUStartUs)),
		GPUTimer:        u64(b, opGPUTimer),
		ProcSeq:         u32(b, opProcSeq),
	}
}

func decodePeerDir(b []byte) PeerDir {
	return PeerDir{
		P2PIssued:    u64(b, pdP2PIssued),
		P2PDone:      u64(b, pdP2PDone),
		LastP2P:      snapshot.Micros(u64(b, pdP2PLastUs)),
		ProxyOps:     u64(b, pdOpsStarted),
		ProxyOpsDone: u64(b, pdOpsDone),
		Steps:        u64(b, pdStepsTotal),
		StepsDone:    u64(b, pdStepsDone),
		LastStep:     snapshot.Micros(u64(b, pdLastStepUs)),
		State:        ProxyState(b[pdLastState]),
		StateAt:      snapshot.Micros(u64(b, pdStateUs)),
		NetUs:        u64(b, pdNetUs),
		NetSteps:     u64(b, pdNetSteps),
		Channel:      int(le.Uint16(b[pdChannel:])),
	}
}
