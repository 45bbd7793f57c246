// Package logparse turns NCCL (2.4-2.30, RCCL) and PyTorch ProcessGroupNCCL log lines into typed
// events, and tracks per process what they say: communicators, sequence positions, recent
// ops, point-to-point counters and warnings.
//
// Parse is the hot path: it allocates nothing, and the byte slices in a Line point into the
// caller's buffer, valid until that buffer changes. Formats follow NCCL's own format strings
// release by release (src/debug.cc for the prefix, the callers of INFO/WARN for messages), the
// real captures under testdata/ and the field cases under analyze/testdata/field.
package logparse

import (
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Kind classifies a line.
type Kind uint8

const (
	KindUnknown          Kind = iota // not an NCCL or PyTorch line we know: counted, never fatal
	KindBlank                        // empty line (NCCL prints one before every WARN)
	KindContinuation                 // unprefixed text right after a WARN (plugin multi-line WARN)
	KindInfo                         // an NCCL INFO/TRACE line with no meaning for us
	KindVersion                      // NCCL version X.Y.Z+cudaA.B
	KindInit                         // Init START / COMPLETE
	KindCommInfo                     // comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d
	KindColl                         // per-op line (collective, Send/Recv, one-sided)
	KindTuning                       // rank-0 algorithm/protocol choice
	KindChannel                      // channel transport line (P2P, SHM, NET, CollNet)
	KindRing                         // rank-0 ring dump (Channel NN/NN : r r r)
	KindUsingNetwork                 // Using network IB|Socket|<plugin>
	KindNetIBDevices                 // NET/IB : Using [0]mlx5_0:1/IB ...
	KindNetIBNone                    // NET/IB : No device found.
	KindNetSocketDevices             // NET/Socket : Using [0]eth0:10.1.0.7<0>
	KindBootstrap                    // Bootstrap: Using eth0:10.1.0.7<0>
	KindDestroy                      // Destroy/Abort/Revoke START/COMPLETE
	KindIBCompletion                 // NET/IB Got completion from peer ... with error/status
	KindIBAsync                      // NET/IB : dev:port async event
	KindSocketError                  // socket progress/connect errors
	KindConnClosedRemote             // Connection closed by remote peer X
	KindConnClosedLocal              // [Service thread] Connection closed by localRank N
	KindProxyError                   // proxy thread / service errors
	KindCudaError                    // Cuda failure '...'
	KindSystemError                  // Call to X failed, config errors (duplicate GPU, version mismatch)
	KindBreadcrumb                   // file:line -> N error propagation
	KindRASPeerDead                  // RAS declaring peer X as DEAD
	KindWarn                         // any other WARN
	KindTorchTimeout                 // Watchdog caught collective operation timeout
	KindTorchWorkStatus              // last enqueued/completed work
	KindTorchTerminate               // the process is being taken down / watchdog thread terminated
	KindTorchNCCLError               // NCCL error surfaced by torch
	KindTorchCommCreated             // ProcessGroupNCCL created ncclComm_ 0x...
	KindLauncherExit                 // torchrun: failed (exitcode: N) local_rank: R (pid: P)
	// Kinds added after the first release stay at the end: checkpoints store counters by kind.
	KindCollMismatch    // NCCL's device-side check: "Mismatched collective detected ... around rank N"
	KindNetSizeMismatch // NET/IB "collective mismatch error, local size X remote size Y"
	KindSocketConnect   // a connection NCCL could not open (or retries, at INFO)
	KindNoInterface     // no usable socket interface (NCCL_SOCKET_IFNAME)
	KindShmError        // /dev/shm segment could not be created, grown or attached
	KindDuplicateGPU    // Duplicate GPU detected : rank A and rank B both on CUDA device X
	KindVersionMismatch // Mismatched NCCL version detected : rank A version X rank B version Y
	KindIBSetup         // an ibv_* call failed outside the data path, a device could not be opened
	KindTorchStore      // PyTorch could not get NCCL's unique id from a rank through its store
	KindRankConflict    // Bootstrap Root : rank R of N ranks has already checked in
	KindTorchStuck      // PyTorch's heartbeat monitor: the watchdog thread made no progress
	KindP2PError        // GPU peer-to-peer (CUDA/HIP IPC) between two GPUs of one host failed
	KindNetError        // a network plugin (AWS OFI / libfabric) failed a transfer or a call
	KindFRCollective    // Flight Recorder analyzer: the header of a collective it found wrong
	KindFRCulprit       // Flight Recorder analyzer: "error msg: Culprit rank R; Error type: T, ..."
	KindFRMissing       // Flight Recorder analyzer: "missing ranks: {..}"
	KindSignal          // UCX's "[host:pid:thread:tid] Caught signal N (reason)", or an NCCL frame of its backtrace
	KindTorchDesync     // TORCH_DISTRIBUTED_DEBUG=DETAIL: "Detected mismatch between collectives on ranks"
	KindTorchBarrier    // "Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms"
	KindRankExit        // why a rank ended: a Python exception, torchrun's exit code or signal
	KindExitRecord      // a field of torchrun's failure record that names whose failure follows ("rank : 2 (local_rank: 2)", "host : n3")
	KindInvalidRank     // NCCL's "Invalid rank requested : R/N"
	KindNetFallback     // a network plugin or network NCCL could not load or initialize
	KindTorchLagging    // PyTorch's desync report: the ranks that caused a timeout
	NumKinds
)

// kindNames label lines in metrics; the kinds that report trouble share their event's name.
var kindNames = [NumKinds]string{
	KindUnknown: "unknown", KindBlank: "blank", KindContinuation: "continuation", KindInfo: "info",
	KindVersion: "version", KindInit: "init", KindCommInfo: "comm_info", KindColl: "coll", KindTuning: "tuning",
	KindChannel: "channel", KindRing: "ring", KindUsingNetwork: "using_network", KindNetIBDevices: "net_ib_devices",
	KindNetIBNone: "net_ib_none", KindNetSocketDevices: "net_socket_devices", KindBootstrap: "bootstrap",
	KindDestroy:          "destroy",
	KindIBCompletion:     string(snapshot.EventIBCompletion),
	KindIBAsync:          string(snapshot.EventIBAsync),
	KindSocketError:      string(snapshot.EventSocketError),
	KindConnClosedRemote: string(snapshot.EventConnClosedRemote),
	KindConnClosedLocal:  string(snapshot.EventConnClosedLocal),
	KindProxyError:       string(snapshot.EventProxyError),
	KindCudaError:        string(snapshot.EventCudaError),
	KindSystemError:      string(snapshot.EventSystemError),
	KindBreadcrumb:       string(snapshot.EventBreadcrumb),
	KindRASPeerDead:      string(snapshot.EventRASPeerDead),
	KindWarn:             string(snapshot.EventWarn),
	KindTorchTimeout:     string(snapshot.EventTorchTimeout),
	KindTorchWorkStatus:  string(snapshot.EventTorchWorkStatus),
	KindTorchTerminate:   string(snapshot.EventTorchTerminate),
	KindTorchNCCLError:   string(snapshot.EventTorchNCCLError),
	KindTorchCommCreated: "torch_comm_created",
	KindLauncherExit:     string(snapshot.EventLauncherExit),
	KindCollMismatch:     string(snapshot.EventCollMismatch),
	KindNetSizeMismatch:  string(snapshot.EventNetSizeMismatch),
	KindSocketConnect:    string(snapshot.EventSocketConnect),
	KindNoInterface:      string(snapshot.EventNoInterface),
	KindShmError:         string(snapshot.EventShmError),
	KindDuplicateGPU:     string(snapshot.EventDuplicateGPU),
	KindVersionMismatch:  string(snapshot.EventVersionMismatch),
	KindIBSetup:          string(snapshot.EventIBSetup),
	KindTorchStore:       string(snapshot.EventTorchStore),
	KindRankConflict:     string(snapshot.EventRankConflict),
	KindTorchStuck:       string(snapshot.EventTorchStuck),
	KindP2PError:         string(snapshot.EventP2PError),
	KindNetError:         string(snapshot.EventNetError),
	KindFRCollective:     string(snapshot.EventFRCollective),
	KindFRCulprit:        string(snapshot.EventFRCulprit),
	KindFRMissing:        string(snapshot.EventFRMissing),
	KindSignal:           string(snapshot.EventSignal),
	KindTorchDesync:      string(snapshot.EventTorchDesync),
	KindTorchBarrier:     string(snapshot.EventTorchBarrier),
	KindRankExit:         string(snapshot.EventRankExit),
	KindExitRecord:       "exit_record",
	KindInvalidRank:      string(snapshot.EventInvalidRank),
	KindNetFallback:      string(snapshot.EventNetFallback),
	KindTorchLagging:     string(snapshot.EventTorchLagging),
}

func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return "invalid"
}

// RankFrom says which console prefix named a line's LauncherRank: how far the number is the
// process's rank in the job.
type RankFrom uint8

const (
	RankFromNone RankFrom = iota
	// RankFromJob: PyTorch's "[rankN]:", Open MPI's "[job,vpid]": the rank in the job.
	RankFromJob
	// RankFromNode: torchrun --tee's "[defaultN]:" (role and local rank): the rank on its
	// node, not in the job.
	RankFromNode
	// RankFromTask: srun --label's "N: ", a "[N] " tag: the launcher's task, which is one
	// rank only where the task runs one process (not torchrun's several).
	RankFromTask
)

// Level is the NCCL log level of a line.
type Level uint8

const (
	LevelNone Level = iota
	LevelInfo
	LevelWarn
	LevelTrace
	LevelCall
)

// Line is one parsed line. Byte slices alias the input.
type Line struct {
	Fields
	// cache keeps the previous line's prefix and timestamp second, which repeat on nearly
	// every line of one process's log; reset keeps it.
	cache prefixCache
	// shared is a Parser's cache, set only while that Parser parses into this line.
	shared *prefixCache
}

// prefixes is the cache this parse reads and updates.
func (l *Line) prefixes() *prefixCache {
	if l.shared != nil {
		return l.shared
	}
	return &l.cache
}

// Parser parses a stream of lines into separate Lines (a batch read ahead of its use) with
// the one cache of prefixes that Parse keeps in a Line reused line after line. Its zero
// value is ready; one Parser is used by one goroutine at a time.
type Parser struct {
	cache prefixCache
}

// Parse is Parse into l with the parser's cache.
func (p *Parser) Parse(line []byte, l *Line) {
	l.shared = &p.cache
	Parse(line, l)
	l.shared = nil
}

// Fields are what Parse sets on every line.
type Fields struct {
	Header
	Body
}

// Header is what every line has: its kind and the NCCL prefix.
type Header struct {
	Kind  Kind
	Level Level

	// LauncherRank is the rank from a launcher prefix ([rank3]:, [default3]:, "3: "), or -1;
	// LauncherFrom says which (the innermost of a stack). Task is srun's label or a rank
	// tag ("3: ", "[3] "), -1 when none, kept even where an inner prefix names the rank.
	LauncherRank int
	LauncherFrom RankFrom
	Task         int
	// Quoted is set for NCCL's last WARN as PyTorch quotes it ("Last error: ..."): the
	// message is NCCL's, the line is PyTorch's, and no NCCL prefix says whose it is.
	Quoted bool
	// Label is the last "word: " taken off the line's start as a pdsh host label; a
	// Python exception's class looks the same ("ValueError: ").
	Label []byte
	// Glog is set when a glog prefix was taken off the line (prefix.go): PyTorch's or its
	// launcher's line, never NCCL's own.
	Glog bool

	// Prefix fields (NCCL lines).
	HasTime bool
	// Time is NCCL's timestamp, when the default layout [%F %T(.%Nf)] is used, else a
	// console prefix's (prefix.go); a glog prefix's has no year (Yearless).
	Time   Timestamp
	Host   []byte
	PID    int
	TID    int
	Dev    int    // cudaDev in [..], -1 when absent
	File   []byte // WARN file:line
	FileLn int
	Msg    []byte // the message after "NCCL <LEVEL> "
}

// Body holds the per-kind fields; only those of the line's Kind are set.
type Body struct {
	Coll    Coll
	Init    Init
	Comm    uint64 // communicator pointer (KindCommInfo, KindDestroy, KindTorchCommCreated)
	Rank    int    // KindCommInfo, KindDestroy; KindProxyError: the proxy's own rank, -1 for none
	NRanks  int
	NNodes  int
	LocalRk int // KindCommInfo localRank; KindConnClosedLocal the closed local rank
	Phase   Phase
	Channel Channel
	Text    []byte // free text: network name, device list, peer, event string, version
	Dev2    []byte // HCA or interface (IB completion hca, async event dev)
	// Detail is what went wrong in NCCL's words: a system error's reason ("Connection
	// refused"), a CUDA error's text, the verb that failed, an IB request type.
	Detail []byte
	// Ranks are the ranks a line names besides its own (duplicate GPU, version mismatch,
	// proxy calls), -1 when absent.
	Ranks [2]int
	Port  int
	Code  int // status / result / exit code
	Fatal bool
	Torch Torch
}

type prefixCache struct {
	rest     [96]byte // "host:pid:tid [dev] NCCL INFO " of the previous fast-path line
	restLen  int
	hostLen  int
	pid, tid int
	dev      int
	tsEnd    int       // index of the ']' closing the previous line's timestamp
	sec      [3]uint64 // "[YYYY-MM-DD HH:MM:SS" as three overlapping words
	secOK    bool
	ts       Timestamp    // that second, parsed
	tails    [2]tailCache // the last two per-op lines' "<comm> [nranks=<n>]"
	newer    uint8        // the index in tails of the newer
	channel  channelCache // the previous channel line
}

// Phase of a lifecycle line.
type Phase uint8

const (
	PhaseNone Phase = iota
	PhaseInitStart
	PhaseInitComplete
	PhaseDestroy
	PhaseAbortStart
	PhaseAbort
	PhaseRevokeStart
	PhaseRevoke
)

// Coll is a per-op line.
type Coll struct {
	Op       OpCode
	OpName   []byte
	OpCount  uint64 // hex in the log; a hint only, never a sequence number
	Count    uint64
	Datatype Datatype
	RedOp    int64
	Root     int // the peer for Send/Recv
	Comm     uint64
	NRanks   int
	// End is where, in the message, the fields read end (after "[nranks=N]"), when the
	// line took the per-op fast path; 0 otherwise. No second line starts before it.
	End int
}

// Init is an Init START/COMPLETE line.
type Init struct {
	API        []byte // ncclCommInitRank, ncclCommSplit, ... (2.21+)
	JobRank    int    // [Rank N] prefix (2.29+), -1 otherwise
	Comm       uint64
	Rank       int
	NRanks     int
	CudaDev    int
	NvmlDev    int
	BusID      uint64
	IsSplit    bool // has a parent
	Parent     uint64
	SplitCount int // splitCount / childCount, -1 when not printed
	Color      int
	Key        int
	HasCommID  bool
	CommID     uint64
}

// Channel is a transport line: one channel between two ranks.
type Channel struct {
	Channel   int
	From, To  int
	Transport []byte // everything after "via ", e.g. "P2P/CUMEM/read", "NET/IB/0/GDRDMA"
	Net       []byte // NET plugin name ("IB", "Socket", "AWS Libfabric"), empty for P2P/SHM
	NetDev    int
	ProxyRank int // PXN proxy rank, -1 when absent
	Send      bool
	Recv      bool
	GDR       bool
}

// Torch holds PyTorch ProcessGroupNCCL fields.
type Torch struct {
	Rank      int // [Rank N] or PG prefix rank, -1 when absent
	SeqNum    int64
	OpType    []byte
	NumelIn   int64
	NumelOut  int64
	TimeoutMs int64
	RanForMs  int64
	Enqueued  int64
	Completed int64
	PGDesc    []byte // default_pg, ...
	PG        []byte // the process group's id: "0" of "[PG ID 0 PG GUID ...]", "1" of "[PG 1 Rank 0]"
	PID       int    // launcher exit: the failed child's pid; nccl-tests' failure: its pid
	// Host is the host nccl-tests' failure lines name ("host: Test NCCL failure ...",
	// " .. host pid 77: Test failure ..."): whose failure it is, with PID when printed.
	Host []byte
	// Watchdog is set on a CUDA error that ProcessGroupNCCL's watchdog thread raised
	// (KindCudaError): PyTorch's check of the GPU's work failed, not a call inside NCCL.
	Watchdog bool
	// Launcher is set on a KindRankExit line of torchrun's (its failure record, "Signal N
	// received by PID"), unset on a Python exception's.
	Launcher bool
	// Bytes is the allocation a CUDA out-of-memory error names (KindRankExit).
	Bytes int64
}

// Timestamp is a calendar time without a zone, as NCCL prints it (local time of its host).
type Timestamp struct {
	Year, Month, Day, Hour, Min, Sec int
	Nanos                            int
	Digits                           int // sub-second digits printed (0: whole seconds)
	// Zoned is set for times that carry their zone (a collector's RFC 3339 stamp): Offset
	// seconds east of UTC. NCCL's own are in its host's local time, unzoned.
	Zoned  bool
	Offset int32
}

// Yearless reports a stamp printed without its year: glog's "E1129 03:11:35.586230" (month
// and day), as torchrun's agent and PyTorch's C++ logging print it.
func (ts Timestamp) Yearless() bool { return ts.Year == 0 }

// UnixMicro is the stamp's time, in loc unless the stamp carries its zone. A yearless stamp
// takes the year that puts it nearest ref (a time of the same job: a job may run across a
// new year's night, never for half a year); without ref (0) it has no time, and UnixMicro
// is 0.
func (ts Timestamp) UnixMicro(loc *time.Location, ref int64) int64 {
	if ts.Zoned {
		loc = time.FixedZone("", int(ts.Offset))
	}
	at := func(year int) int64 {
		return time.Date(year, time.Month(ts.Month), ts.Day, ts.Hour, ts.Min, ts.Sec, ts.Nanos, loc).UnixMicro()
	}
	if !ts.Yearless() {
		return at(ts.Year)
	}
	if ref == 0 {
		return 0
	}
	year := time.UnixMicro(ref).In(loc).Year()
	best := at(year)
	for _, y := range [...]int{year - 1, year + 1} {
		if t := at(y); absMicros(t-ref) < absMicros(best-ref) {
			best = t
		}
	}
	return best
}

func absMicros(d int64) int64 {
	if d < 0 {
		return -d
	}
	return d
}

func (l *Line) reset() {
	l.Fields = Fields{Header: Header{LauncherRank: -1, Task: -1, Dev: -1}}
}
