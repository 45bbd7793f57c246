package snapshot

import "unicode/utf8"

// EventKind names what a Process event reports. The sidecar and `watchdog analyze` produce
// events through one function (logparse.EventOf); the detector's rules read them.
type EventKind string

// Events from NCCL's own lines (mostly WARN).
const (
	// EventIBCompletion: "NET/IB: Got completion from peer ... with error/status N"; Code is
	// the ibv_wc status, Dev the HCA, Peer the remote address.
	EventIBCompletion EventKind = "ib_completion"
	// EventIBAsync: "NET/IB : dev:port Got async event"; Dev and Port name the HCA port.
	EventIBAsync EventKind = "ib_async"
	// EventSocketError: socket progress and connect failures.
	EventSocketError EventKind = "socket_error"
	// EventConnClosedRemote: "Connection closed by remote peer X"; Peer is X.
	EventConnClosedRemote EventKind = "conn_closed_remote"
	// EventConnClosedLocal: "[Service thread] Connection closed by localRank N", printed by a
	// survivor about a process of its own host; LocalRank is N.
	EventConnClosedLocal EventKind = "conn_closed_local"
	// EventProxyError: proxy thread and service errors.
	EventProxyError EventKind = "proxy_error"
	// EventCudaError: "Cuda failure '...'" inside NCCL.
	EventCudaError EventKind = "cuda_error"
	// EventSystemError: failed system calls and configuration errors.
	EventSystemError EventKind = "system_error"
	// EventBreadcrumb: the first "file:line -> N" line of an error-propagation run; Code is N.
	EventBreadcrumb EventKind = "breadcrumb"
	// EventRASPeerDead: NCCL RAS declared a peer dead; Peer is the peer.
	EventRASPeerDead EventKind = "ras_peer_dead"
	// EventWarn: any other WARN line.
	EventWarn EventKind = "warn"
	// EventCommAbort: a communicator was aborted; Comm is its pointer in this process.
	EventCommAbort EventKind = "comm_abort"
	// EventCollMismatch: NCCL's own collective-mismatch check (2.4-2.8 device check):
	// "Mismatched collective detected ... around rank N" (Fatal) or "Your program may be
	// hanging, this may be caused by a collective mismatch around rank N"; Code is N.
	EventCollMismatch EventKind = "coll_mismatch"
	// EventSocketConnect: NCCL could not open a connection (bootstrap, proxy or NET/Socket):
	// "Connect to X failed", "connect returned ..., exceeded retry count", "Call to
	// connect returned ..."; Peer is the address it tried, Detail the system's reason
	// ("Connection refused", "No route to host", ...). Not Fatal: an INFO retry ("...,
	// retrying (5/34) after sleep for 500 msec"), whose Code is the attempt (0 when NCCL
	// does not count them); Fatal: the retries or timeouts were exhausted (Code: how many,
	// when printed) or the connect failed outright. A log whose newest event is a retry and
	// that ends there ended while NCCL was still trying.
	EventSocketConnect EventKind = "socket_connect"
	// EventNoInterface: NCCL found no usable network interface for its sockets ("no socket
	// interface found", an address of neither family): NCCL_SOCKET_IFNAME names none.
	EventNoInterface EventKind = "no_interface"
	// EventShmError: a shared-memory segment under /dev/shm could not be created or grown
	// (containers get 64 MB by default).
	EventShmError EventKind = "shm_error"
	// EventDuplicateGPU: "Duplicate GPU detected : rank A and rank B both on CUDA device X";
	// Ranks are A and B, Detail the device's bus id.
	EventDuplicateGPU EventKind = "duplicate_gpu"
	// EventVersionMismatch: "Mismatched NCCL version detected : rank A version X rank B
	// version Y"; Ranks are A and B, Detail "X Y".
	EventVersionMismatch EventKind = "version_mismatch"
	// EventIBSetup: an InfiniBand verbs call failed outside the data path ("Call to
	// ibv_modify_qp failed ...", "Unable to open device"); Detail is the verb or the device.
	EventIBSetup EventKind = "ib_setup"
	// EventRankConflict: NCCL's bootstrap root saw one rank check in twice ("Bootstrap
	// Root : rank R of N ranks has already checked in") or ranks that disagree on the
	// job's size ("mismatch in rank count from procs A : B"): the launch gave two processes
	// one rank, or another job shares the unique id (the same master address and port).
	// Ranks is [R] (empty for a size mismatch), Code N, Detail "A B" for a size mismatch.
	EventRankConflict EventKind = "rank_conflict"
	// EventNetSizeMismatch: NET/IB "collective mismatch error, local size X remote size Y" or
	// "posted incorrect receive info": the two ends of a connection disagree on a message
	// size, which NCCL's maintainers trace to transport or configuration, not to the
	// application's calls; Peer is the remote address.
	EventNetSizeMismatch EventKind = "net_size_mismatch"
	// EventP2PError: NCCL's P2P transport could not share GPU memory between two processes
	// of one host ("failed to open CUDA IPC handle : 64 peer access is not supported ...",
	// RCCL's "hipIpcGetMemHandle failed : invalid argument"); Code is the CUDA error number
	// when NCCL printed one, Detail the reason.
	EventP2PError EventKind = "p2p_error"
	// EventInvalidRank: NCCL was asked for a rank outside its communicator ("Invalid rank
	// requested : 4/4"): the launch gave a process a RANK at or past WORLD_SIZE, or two
	// launches disagree on the world's size. Code is the rank asked for, Detail "R/N".
	EventInvalidRank EventKind = "invalid_rank"
	// EventNetFallback: a network NCCL was to use could not be used, and NCCL went on with
	// another (usually its sockets) or failed: a plugin library found but not loaded, a
	// plugin named by NCCL_NET_PLUGIN not found, "Failed to initialize NET plugin IB",
	// "Error: network AWS Libfabric not found" (NCCL_NET names none: Fatal). Code is one
	// of the NetPlugin* values, Detail the plugin or network, Peer the loader's reason.
	// Process.Network says what NCCL used in the end.
	EventNetFallback EventKind = "net_fallback"
	// EventNetError: a network plugin failed a transfer or a call (AWS OFI NCCL: "NET/OFI
	// Request 0x.. completed with error. RC: 113. Error: 2 (UNDELIVERABLE)", "Unable to read
	// from fi_cq_readerr"); Code is libfabric's RC (an errno) when printed, Detail the
	// provider's reason. Fatal for a failed completion and for PyTorch's quote.
	EventNetError EventKind = "net_error"
)

// Events from PyTorch and launcher output.
const (
	// EventTorchTimeout: PyTorch's watchdog timed a collective out on this rank; Code is
	// its SeqNum, Comm the process group, Work the work as printed (its OpType, NumelIn,
	// NumelOut, Timeout(ms)). The rank that times out is usually the one left waiting; two
	// ranks timing out at one SeqNum of one group with another OpType or size are a desync.
	EventTorchTimeout EventKind = "torch_timeout"
	// EventTorchWorkStatus: "last enqueued work: N, last completed work: M"; Code is M.
	EventTorchWorkStatus EventKind = "torch_work_status"
	// EventTorchTerminate: PyTorch is taking the process down.
	EventTorchTerminate EventKind = "torch_terminate"
	// EventTorchNCCLError: an NCCL error surfaced by PyTorch.
	EventTorchNCCLError EventKind = "torch_nccl_error"
	// EventLauncherExit: torchrun's "failed (exitcode: C) local_rank: N (pid: P)"; Code is
	// C, LocalRank N, PID P.
	EventLauncherExit EventKind = "launcher_exit"
	// EventTorchStore: "[N] is setting up NCCL communicator and retrieving ncclUniqueId from
	// [R] via c10d key-value store ..., but store->get(...) got error: <reason>": PyTorch's
	// rank N never got NCCL's unique id from rank R; Ranks is [R], Detail the reason.
	EventTorchStore EventKind = "torch_store"
	// EventTorchStuck: PyTorch's heartbeat monitor found ProcessGroupNCCL's watchdog thread
	// making no progress ("Heartbeat monitor timed out! ... workMetaList_.size()=N", "watchdog
	// got stuck for S seconds"): the thread is blocked, usually inside a CUDA or NCCL call of
	// a job that hangs. Code is N, the works queued on the rank (-1 when the line does not
	// say), Comm the process group.
	EventTorchStuck EventKind = "torch_stuck"
	// EventFRCollective: PyTorch's Flight Recorder analyzer (fr_trace, torchfrtrace) heads
	// its report on a collective it found wrong ("Collective 39 at entry 38 errors", "Not
	// all ranks joining collective, sequence number: 5"); Code is the collective's sequence
	// number in its process group, -1 when the line does not say. The EventFRCulprit and
	// EventFRMissing lines after it are about that collective.
	EventFRCollective EventKind = "fr_collective"
	// EventFRCulprit: the analyzer's "error msg: Culprit rank R; Error type: T, <expected
	// vs found>, Culprit rank ...": ranks whose entry differs from the first rank's. Ranks
	// are the culprits (the first MaxFRRanks), Code how many it named, Detail the first
	// culprit's error type and what differed.
	EventFRCulprit EventKind = "fr_culprit"
	// EventFRMissing: the analyzer's "missing ranks: {1, 5}" (or, in its first releases,
	// "Missing ranks are {..}" on the header line): ranks whose dump holds no entry for the
	// collective the others issued. Ranks are the first MaxFRRanks of them, Code how many.
	EventFRMissing EventKind = "fr_missing"
	// EventTorchDesync: TORCH_DISTRIBUTED_DEBUG=DETAIL's check found two ranks of a process
	// group in different collectives ("Detected mismatch between collectives on ranks. Rank
	// A is running collective: CollectiveFingerPrint(...), but Rank B is running collective:
	// CollectiveFingerPrint(...)"). Ranks are [A, B] (A printed it; ranks of the group),
	// Work the two fingerprints in that order, Code A's sequence number (-1 when not
	// printed). Which of the two is wrong the line does not say.
	EventTorchDesync EventKind = "torch_desync"
	// EventTorchBarrier: a monitored barrier (TORCH_DISTRIBUTED_DEBUG=DETAIL runs one before
	// every collective; also monitored_barrier()) gave up on ranks that never arrived: "Ranks
	// 1, 3 failed to pass monitoredBarrier in 30000 ms", "Rank 1 failed to pass
	// monitoredBarrier". Ranks are those ranks (the first MaxFRRanks), Code how many; Work
	// the collective it guarded when the wrapper printed one.
	EventTorchBarrier EventKind = "torch_barrier"
	// EventTorchLagging: PyTorch's desync report (TORCH_NCCL_DESYNC_DEBUG=1, printed under a
	// watchdog timeout) names the ranks that caused it: "ranks [3] are the lagging ranks that
	// caused this timeout. They never joined any collectives", "[3] joined but didn't finish
	// collective #41 (count from 1)", "[3] finished collective #41, but didn't join
	// collective #42 (count from 1)". Ranks are those ranks (the first MaxFRRanks, ranks of
	// the process group), Code the collective they did not join or finish (counted from 1;
	// 0 for "never joined any"), Detail which of the three.
	EventTorchLagging EventKind = "torch_lagging"
	// EventRankExit: why a rank's process ended, in its own or its launcher's words:
	//   - the exception that ended a Python traceback ("torch.OutOfMemoryError: CUDA out of
	//     memory. Tried to allocate 2.00 GiB ...", "ValueError: ..."): Detail is the
	//     exception's class, Msg its message, Bytes the allocation CUDA could not make;
	//   - torchrun's failure record ("rank : 1 (local_rank: 1)", "exitcode : -9 (pid: 77)",
	//     "traceback : Signal 9 (SIGKILL) received by PID 77"): Code is the exit code
	//     (negative: the signal that killed it, as torchrun prints it), PID and LocalRank the
	//     process, Detail the signal's name ("SIGKILL") or the exception's class;
	//   - "Signal 9 (SIGKILL) received by PID 77" alone: Code -9, Detail the signal's name.
	// Src says which (ExitTraceback, ExitLauncher). Fatal always.
	EventRankExit EventKind = "rank_exit"
	// EventSignal: a process was killed by a signal its runtime reported (UCX's "Caught
	// signal 7 (Bus error: ...)"); Code is the signal, Detail its reason. With Code 0, Peer
	// is an NCCL function of the backtrace that followed.
	EventSignal EventKind = "signal"
)

// EventRankExit's sources (Event.Src).
const (
	// ExitTraceback: the exception line that ended a Python traceback.
	ExitTraceback = "traceback"
	// ExitLauncher: torchrun's failure record or its "Signal N (SIGX) received by PID" line.
	ExitLauncher = "launcher"
)

// EventNetFallback's codes.
const (
	// NetPluginLoad: a network plugin library could not be loaded (found but dlopen failed,
	// or a plugin NCCL_NET_PLUGIN names was not found).
	NetPluginLoad = 1
	// NetPluginInit: NCCL loaded a network (plugin or its own IB) and could not initialize
	// it ("Failed to initialize NET plugin IB": no usable device), so it went on without.
	NetPluginInit = 2
	// NetNotFound: NCCL_NET names a network no plugin provides ("Error: network X not
	// found"): NCCL fails the communicator.
	NetNotFound = 3
)

// MaxFRRanks bounds the ranks an EventFRCulprit or EventFRMissing keeps: the analyzer
// prints whole Python sets, hundreds of ranks in a large job.
const MaxFRRanks = 64

// SrcTorchWatchdog is the Src of an EventCudaError raised by PyTorch's ProcessGroupNCCL
// watchdog thread rather than by NCCL.
const SrcTorchWatchdog = "ProcessGroupNCCL"

// Completion statuses (ibv_wc_status, EventIBCompletion's Code) the rules tell apart;
// IBStatusName names every one.
const (
	IBLocProtErr  = 4  // local protection: the HCA could not access the (GPU) memory
	IBWRFlushErr  = 5  // flushed: the queue pair was already in error
	IBRemAccess   = 10 // remote access: the peer's HCA refused the access
	IBRetryExc    = 12 // transport retries exhausted: the peer did not answer
	IBRNRRetryExc = 13 // receiver not ready retries exhausted: the peer posted no receive
)

// ShmAttach is EventShmError's Code when a segment could not be attached (0: created or
// grown): a segment gone or in another IPC namespace, not a full /dev/shm.
const ShmAttach = 1

// EventSocketError's codes that tell its failures apart (0: any other).
const (
	// SocketWrongType: "socketFinalizeAccept: wrong type 4 != 3": a job's own rank connected
	// with another kind of socket than the listener expects (Detail "4 != 3", received then
	// expected: see SocketTypeName), which is what two nodes on different network transports do.
	SocketWrongType = 1
	// SocketProxyPoll: "Socket recv failed while polling for opId=0x..": the proxy lost its
	// connection to the process it served (usually its own rank's) mid-operation.
	SocketProxyPoll = 2
)

// WarnRemAllocator is EventWarn's Code for "[Rem Allocator] Allocation failed" of NCCL
// before 2.12: its bootstrap's remote-allocator service answering a connection.
const WarnRemAllocator = 1

// EventWarn's Codes for CollNet (NVIDIA SHARP) set-up, which NCCL gives up on without
// failing: WarnCollNet is a CollNet plugin's (or NCCL's own CollNet set-up's) error ("NET/IB :
// SHARP coll init error", "SHARP group create: ... lock failed"); WarnCollNetFallback is
// "Cannot initialize CollNet, using point-to-point network instead": NCCL recovered.
const (
	WarnCollNet         = 2
	WarnCollNetFallback = 3
	// WarnNVMLMissing: "nvmlDeviceGetHandleByPciBusId() failed: Not Found": NVML does not see
	// the GPU that CUDA gave NCCL (Detail is NVML's reason).
	WarnNVMLMissing = 4
)

// SocketTypeName names ncclSocketType, as "wrong type X != Y" prints it.
func SocketTypeName(t int) string {
	names := [...]string{"unknown", "bootstrap", "proxy", "NET/Socket", "NET/IB", "RAS"}
	if t >= 0 && t < len(names) {
		return names[t]
	}
	return "unknown"
}

// ncclResult_t values (EventBreadcrumb and EventTorchNCCLError codes).
const (
	NCCLUnhandledCuda = 1
	NCCLSystemError   = 2
	NCCLInternalError = 3
	NCCLInvalidArg    = 4
	NCCLInvalidUsage  = 5
	NCCLRemoteError   = 6
)

// Stage is where a process was when it logged an event.
type Stage string

const (
	StageUnknown Stage = ""
	// StageInit: the process had logged no collective or send/receive yet: it was setting
	// up (bootstrap, communicator init, first connections).
	StageInit Stage = "init"
	// StageReady: its communicators were initialized and it had logged no per-op line:
	// between init and the first op, or a log without COLL lines (then it may be mid-run).
	StageReady Stage = "ready"
	// StageFirst: the process had logged only its first few per-op lines (FirstOps): its
	// connections were being used for the first time.
	StageFirst Stage = "first"
	// StageRun: the process had issued collectives: it failed mid-run.
	StageRun Stage = "run"
)

// FirstOps is how many per-op lines a process logs while it is still in StageFirst: a
// training step's first collectives, enough to touch every connection of a ring or tree.
const FirstOps = 16

// ProcState is whether a rank's process is alive, as the sidecar sees it through /proc.
type ProcState string

const (
	ProcUnknown ProcState = "" // liveness not checked (other pid namespace, offline)
	ProcRunning ProcState = "running"
	ProcExited  ProcState = "exited"
)

// SchedState is a running process's scheduler state, the letter of /proc/<pid>/stat
// (field 3), as the sidecar last read it. It is one sample of the main thread's state
// (a few times a second), not a share of time: a rank that waits on its GPU sleeps most
// of the time, so S alone says little; S with near-zero CPU for long says more.
type SchedState string

const (
	SchedUnknown  SchedState = ""  // not read (not visible, exited, or offline)
	SchedRunning  SchedState = "R" // running or runnable: on a CPU or waiting for one
	SchedSleeping SchedState = "S" // interruptible sleep: waiting on a lock, a socket, the GPU
	SchedDiskWait SchedState = "D" // uninterruptible sleep, usually I/O (disk, NFS)
	SchedStopped  SchedState = "T" // stopped by a signal (SIGSTOP, job control)
	SchedTraced   SchedState = "t" // stopped by a debugger (ptrace)
	SchedZombie   SchedState = "Z" // exited, not yet reaped
	SchedIdle     SchedState = "I" // kernel idle thread state; not expected of a rank
)

// CommState is where a communicator is in its life, from NCCL's Init/Destroy lines.
type CommState string

const (
	// CommUnknown: ops were seen, but no Init line (a log joined late).
	CommUnknown   CommState = "unknown"
	CommInit      CommState = "init" // Init START seen
	CommReady     CommState = "ready"
	CommDestroyed CommState = "destroyed"
	CommAborted   CommState = "aborted"
	CommRevoked   CommState = "revoked"
)

// Ended reports whether the communicator is gone for good.
func (s CommState) Ended() bool {
	return s == CommDestroyed || s == CommAborted || s == CommRevoked
}

// GPUState is what a rank's GPU is doing, derived from NVML samples.
type GPUState string

const (
	GPUUnknown   GPUState = ""
	GPUComputing GPUState = "computing"
	// GPUWaiting: an NCCL kernel spinning: busy, but at near-idle power.
	GPUWaiting GPUState = "waiting"
	// GPUIdle: no kernel running: the host is not feeding the GPU.
	GPUIdle GPUState = "idle"
)

// MaxMsg caps the text of one event (Event.Msg): enough to quote a WARN line, small
// enough that 32 events per rank stay well inside MaxNodeBytes.
const MaxMsg = 240

// CutMsg cuts a message to MaxMsg bytes, never inside a UTF-8 sequence.
func CutMsg(s string) string {
	if len(s) <= MaxMsg {
		return s
	}
	n := MaxMsg
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// IBStatusName names an ibv_wc_status value (EventIBCompletion's Code) as verbs spells it,
// e.g. "IBV_WC_RETRY_EXC_ERR".
func IBStatusName(code int) string {
	names := [...]string{"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
		"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
		"REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",
		"REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR",
		"RESP_TIMEOUT_ERR", "GENERAL_ERR"}
	if code >= 0 && code < len(names) {
		return "IBV_WC_" + names[code]
	}
	return "IBV_WC_UNKNOWN"
}
