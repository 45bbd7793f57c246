package snapshot

import "fmt"

// PyTorch's Flight Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE / TORCH_FR_BUFFER_SIZE) keeps, per
// rank, the last entries of every process group's collectives and point-to-point ops with
// their state; TORCH_NCCL_DUMP_ON_TIMEOUT writes them to <TORCH_FR_DUMP_TEMP_FILE><rank>.
// A dump becomes a Process like any other source: each process group is a Comm whose ID is
// "fr:<group name>#<hash of its ranks>" (FRCommID), the same on every rank of the group.
//
// On such a Comm:
//   - Rank, NRanks: the rank's place in the group and the group's size (pg_config);
//   - Count: the newest collective_seq_id the rank issued on the group;
//   - Recent: its collectives in the dump (Seq = collective_seq_id, Op the NCCL name,
//     Count NCCL's element count, Dtype NCCL's type, T the entry's creation time, Idx the
//     entry's record_id + 1: the process's issue order across its groups);
//   - P2P: its sends and receives in the dump, per peer (the peer's rank in the group);
//   - Done: a Completion from the entry states (Issued/Started/Done positions, LastDone,
//     InFlight = the oldest entry not completed, GPUStart = when it was seen started);
//   - FR: what the Comm has no field for: the group's name, description and ranks, and the
//     entries that were not completed, each with its state.
//
// PyTorch's sequence numbers count the group's works, not NCCL's calls (an all_to_all or a
// coalesced group is one work and several NCCL calls), so an "fr:" Comm is never the same
// communicator as one read from an NCCL log, even when both are one rank's.

// SourceFR: the process is known from a Flight Recorder dump only.
const SourceFR Source = "fr"

// HasCompletion reports whether the process's Comms may carry a Completion (Comm.Done):
// from the profiler plugin or from a Flight Recorder dump.
func (s Source) HasCompletion() bool { return s.HasPlugin() || s == SourceFR }

// FRCommPrefix starts the ID of every Comm read from a Flight Recorder dump.
const FRCommPrefix = "fr:"

// MaxFROps bounds FRGroup.Ops: a group whose ranks hang holds a few pending entries, a
// dump of 2000 scheduled ones says no more than its first.
const MaxFROps = 64

// MaxFRGroupRanks bounds FRGroup.Ranks; Comm.NRanks keeps the group's size.
const MaxFRGroupRanks = 1024

// OpState is where a Flight Recorder entry was when the dump was written.
type OpState string

const (
	// OpScheduled: enqueued by the rank; its kernel was not seen running.
	OpScheduled OpState = "scheduled"
	// OpStarted: its kernel was seen running, not complete: the rank waits in it (for a
	// peer, usually).
	OpStarted OpState = "started"
	// OpCompleted: PyTorch saw the work complete.
	OpCompleted OpState = "completed"
)

// FRGroup is a PyTorch process group as one rank's Flight Recorder dump shows it.
type FRGroup struct {
	// Name is the group's name (its "uid": "0" for the default group), Desc what the
	// program called it ("default_pg", "dp_replicate", "undefined" when unnamed).
	Name string `json:"name"`
	Desc string `json:"desc,omitempty"`
	// Ranks are the group's global ranks in group-rank order (Comm.Rank indexes them); the
	// first MaxFRGroupRanks.
	Ranks []int `json:"ranks,omitempty"`
	// Ops are the group's entries that were not completed, oldest first (the first
	// MaxFROps; Pending counts them all), then the newest completed one when there is one.
	Ops     []FROp `json:"ops,omitempty"`
	Pending int    `json:"pending,omitempty"`
}

// FROp is one Flight Recorder entry. Its Op is as in Comm.Recent; for a point-to-point entry
// (P2P) Seq is its p2p_seq_id and Root the peer's rank in the group.
type FROp struct {
	Op
	P2P   bool    `json:"p2p,omitempty"`
	State OpState `json:"st"`
	// Name is PyTorch's own name for it ("nccl:_allgather_base", "nccl:send 0->1").
	Name string `json:"name,omitempty"`
	// Started and Ended are when PyTorch saw its kernel start and complete (0: not seen).
	Started Micros `json:"ts,omitempty"`
	Ended   Micros `json:"te,omitempty"`
	// TimeoutMs is the work's timeout; Retired is set once PyTorch's watchdog let go of it:
	// retired and not completed means it timed out.
	TimeoutMs int64 `json:"to,omitempty"`
	Retired   bool  `json:"ret,omitempty"`
	// Where is the first frame of its Python stack outside torch: "step (train.py:88)".
	Where string `json:"where,omitempty"`
}

// TorchWork is a PyTorch work (one collective call of a process group) as PyTorch's own
// messages print it: the watchdog's "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=..,
// NumelOut=.., Timeout(ms)=..)" and TORCH_DISTRIBUTED_DEBUG=DETAIL's
// "CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE, TensorShape=[20, 10],
// TensorDtypes=Float, ...)". Two ranks' works at the same Seq of one group with another Op,
// sizes or dtypes are a desync.
type TorchWork struct {
	// Seq is the work's sequence number in its group (-1: not printed); the numbers below
	// are 0 when not printed.
	Seq int64 `json:"s,omitempty"`
	// Op is PyTorch's OpType as printed: "ALLREDUCE", "_ALLGATHER_BASE", "BROADCAST", ...
	Op       string `json:"op,omitempty"`
	NumelIn  int64  `json:"in,omitempty"`
	NumelOut int64  `json:"out,omitempty"`
	// Shape is the first tensor's shape as the fingerprint prints it ("20, 10"), Dtypes its
	// dtypes ("Float").
	Shape     string `json:"shape,omitempty"`
	Dtypes    string `json:"dt,omitempty"`
	TimeoutMs int64  `json:"to,omitempty"`
}

// FRCommID is the cross-rank identity of a process group read from Flight Recorder dumps:
// its name and a hash of its ranks (torch's split_group may give two groups one name).
// Without ranks it is the name alone.
func FRCommID(name string, ranks []int) string {
	if len(ranks) == 0 {
		return FRCommPrefix + name
	}
	h := uint32(2166136261)
	for _, r := range ranks {
		for v := uint32(r); ; v >>= 8 {
			h = (h ^ (v & 0xff)) * 16777619
			if v < 0x100 {
				break
			}
		}
		h = (h ^ ',') * 16777619
	}
	return fmt.Sprintf("%s%s#%08x", FRCommPrefix, name, h)
}
