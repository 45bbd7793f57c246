// Package snapshot is the versioned JSON contract between a node's sidecar and the central
// detector: what one node publishes at /ncclwatch/v1/jobs/<job>/nodes/<node>. The same types
// describe a job reconstructed offline from log files, so the rules judge both alike.
//
// Field names are short because a 12,500-node job writes about 12,500 of these per second.
package snapshot

import (
	"encoding/json"
	"fmt"
	"time"
)

// SchemaVersion is bumped on any incompatible change; readers reject other versions.
// 3: typed events (PID, LocalRank and Comm fields instead of values packed into Port and
// Peer), abort events named comm_abort. 4: ops carry their process issue index (a fourth
// optional field of the compact ops), and completion state from the profiler plugin.
const SchemaVersion = 4

// MaxNodeBytes is the hard cap on one encoded node snapshot, far below etcd's 1.5 MiB
// request limit. Encoders shed detail (recent ops, then the plugin's peer rows, then
// warnings, marks and RAS) to stay under it; counts and ops in flight always stay.
const MaxNodeBytes = 256 << 10

// Micros is a wall-clock time in microseconds since the Unix epoch; 0 means unknown.
type Micros int64

// MicrosOf converts a time; the zero time maps to 0.
func MicrosOf(t time.Time) Micros {
	if t.IsZero() {
		return 0
	}
	return Micros(t.UnixMicro())
}

// Time converts back; 0 maps to the zero time.
func (m Micros) Time() time.Time {
	if m == 0 {
		return time.Time{}
	}
	return time.UnixMicro(int64(m))
}

// Node is one node's state: its rank processes and their GPUs, ports and RAS view.
type Node struct {
	Schema    int       `json:"v"`
	Job       string    `json:"job"`
	Node      string    `json:"node"`
	Seq       uint64    `json:"seq"`     // publish counter of this sidecar run
	Time      Micros    `json:"t"`       // sidecar clock at publish
	Started   Micros    `json:"started"` // sidecar start, to tell restarts apart
	Processes []Process `json:"procs"`   // one per NCCL process (rank)
	GPUs      []GPU     `json:"gpus,omitempty"`
	Ports     []Port    `json:"ports,omitempty"`
	RAS       *RAS      `json:"ras,omitempty"`
	Shed      string    `json:"shed,omitempty"` // what was dropped to fit MaxNodeBytes
	// LagMS is how late the sidecar's own sampling and publishing ran lately, in whole
	// seconds (0 below one): a sidecar starved of CPU reads the logs late, and the detector
	// widens its windows by this instead of blaming ranks for it.
	LagMS int64 `json:"lag_ms,omitempty"`
	// Stopping is set on the last snapshot of a sidecar that shuts down cleanly: its key
	// then disappears without meaning the node was lost.
	Stopping bool `json:"stop,omitempty"`
}

// Process is one rank's process as seen through its NCCL log, the profiler plugin's region,
// or both (Source), and /proc when visible.
type Process struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Rank is the global rank: RANK from the environment, else the rank in the largest
	// root communicator; -1 when unknown.
	Rank       int       `json:"rank"`
	LocalRank  int       `json:"lrank"`
	WorldSize  int       `json:"world,omitempty"`
	JobID      string    `json:"jobid,omitempty"` // TORCHELASTIC_RUN_ID or SLURM_JOB_ID
	File       string    `json:"file,omitempty"`
	State      ProcState `json:"state,omitempty"`
	ExitedAt   Micros    `json:"exited,omitempty"`
	NCCL       string    `json:"nccl,omitempty"` // NCCL version, e.g. "2.28.9"
	Timestamps bool      `json:"ts,omitempty"`   // lines carry NCCL's own timestamps
	TSDigits   int       `json:"tsd,omitempty"`  // their sub-second digits (0: whole seconds)
	CudaDev    int       `json:"cudadev"`
	BusID      string    `json:"bus,omitempty"`     // PCI bus id as NCCL prints it, e.g. "1b000"
	Network    string    `json:"net,omitempty"`     // "IB", "Socket", or a plugin name
	NetDevs    []string  `json:"netdevs,omitempty"` // e.g. "mlx5_0:1/IB", "eth0"
	// Addrs are the process's bootstrap and NET/Socket IP addresses, to name remote peers.
	Addrs []string `json:"addrs,omitempty"`
	// Transports lists the channel paths this rank set up, e.g. "P2P/CUMEM", "NET/IB/0/GDRDMA".
	Transports []string `json:"tr,omitempty"`
	LastLine   Micros   `json:"last,omitempty"` // time of the newest line read
	Lines      int64    `json:"lines,omitempty"`
	Comms      []Comm   `json:"comms,omitempty"`
	Events     []Event  `json:"ev,omitempty"`  // recent WARN-class events, newest last
	GPUState   GPUState `json:"gpu,omitempty"` // the state of the GPU this rank runs on
	// Source says where the state comes from ("" from older sidecars: the log); Plugin is
	// the profiler plugin's own state when its region was read.
	Source Source  `json:"src,omitempty"`
	Plugin *Plugin `json:"plug,omitempty"`

	// Stat, CPU and CPUPct are /proc's view of a running process, set together (never
	// while the process is not visible or after it exited): its scheduler state letter
	// when last read, its cumulative CPU time in seconds (utime+stime), and its CPU use over
	// the last sampling interval (about a second) in percent of one core (above 100 for a
	// process busy on several cores). With Stat set, a CPUPct of 0 is a measurement: the
	// process used no CPU.
	Stat   SchedState `json:"stat,omitempty"`
	CPU    float64    `json:"cpu,omitempty"`
	CPUPct float64    `json:"cpupct,omitempty"`
	// RunqPct is, with Stat, the time its threads waited on a run queue for a CPU over the
	// same interval, in percent of one core: a process starved of CPU (other processes on
	// its cores, a CPU limit) waits there. 0 when not measured (no schedstat).
	RunqPct float64 `json:"runq,omitempty"`
}

// Comm is one communicator as one rank sees it.
type Comm struct {
	// ID is the cross-rank identity: "0x<commId>" for root communicators; for split
	// children without a commId, "<parent ID>/s<splitCount>c<color>".
	ID      string    `json:"id"`
	Ptr     string    `json:"ptr"`
	Rank    int       `json:"rank"`
	NRanks  int       `json:"n"`
	CudaDev int       `json:"dev,omitempty"`
	BusID   string    `json:"bus,omitempty"`
	State   CommState `json:"st,omitempty"`
	// InitAt is when a communicator still initializing logged its Init START (0 when
	// unknown or once it is ready): a log that stops right after it may be cut, not hung.
	InitAt Micros `json:"init,omitempty"`
	// Count is the number of collectives issued: the last sequence position.
	Count  int64 `json:"c"`
	Last   *Op   `json:"last,omitempty"`
	Recent Ops   `json:"recent,omitempty"` // latest ops, oldest first
	Marks  Marks `json:"marks,omitempty"`  // digests at aligned positions, oldest first
	P2P    []P2P `json:"p2p,omitempty"`
	// Waiting is true when this comm holds the rank's newest op and its GPU spins.
	Waiting bool `json:"wait,omitempty"`
	// Done is the completion state the profiler plugin recorded (nil without the plugin), or,
	// on a Flight Recorder group (FR set), the one the dump's entry states give.
	Done *Completion `json:"done,omitempty"`
	// Times are the issue times of positions TimesFrom, TimesFrom+1, ... beyond Recent:
	// offline only (never on the wire), for the time accounting over a whole log.
	Times     []Micros `json:"-"`
	TimesFrom int64    `json:"-"`
	// FR is set on a PyTorch process group read from a Flight Recorder dump (see fr.go).
	FR *FRGroup `json:"fr,omitempty"`
}

// MarshalJSON leaves out Last when it is the newest of Recent (UnmarshalJSON restores it).
func (c Comm) MarshalJSON() ([]byte, error) {
	type wire Comm
	w := wire(c)
	if n := len(w.Recent); n > 0 && w.Last != nil && *w.Last == w.Recent[n-1] {
		w.Last = nil
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a communicator and restores Last from Recent.
func (c *Comm) UnmarshalJSON(b []byte) error {
	type wire Comm
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*c = Comm(w)
	if n := len(c.Recent); c.Last == nil && n > 0 {
		last := c.Recent[n-1]
		c.Last = &last
	}
	return nil
}

// Op is one collective at a sequence position.
type Op struct {
	Seq   int64  `json:"s"`
	Op    string `json:"op"`
	Count uint64 `json:"c"`
	Dtype string `json:"dt"`
	Red   string `json:"red,omitempty"` // "" when the source does not say (the plugin)
	Root  int    `json:"root,omitempty"`
	T     Micros `json:"t"`
	// Idx is the op's place in its process's issue order across all its communicators,
	// from 1 (0: unknown): the order of its log lines, or the plugin's count. Two ops of
	// one process compare only within one source.
	Idx int64 `json:"i,omitempty"`
}

// PluginDigest starts the digest of a mark the profiler plugin computed. A log's digest
// (hex) folds the reduction op in, which the plugin does not see: digests of the two kinds
// are never compared with each other.
const PluginDigest = "p"

// Mark is the chained digest of all op signatures up to Seq, and Seq's arrival time.
// Marks sit at positions that are multiples of 16, 256 and 4096, so two ranks far apart
// still share one; equal digests at equal positions mean equal histories.
type Mark struct {
	Seq    int64  `json:"s"`
	Digest string `json:"h"`
	T      Micros `json:"t"`
}

// P2P counts point-to-point operations with one peer on one communicator.
type P2P struct {
	Peer     int    `json:"peer"`
	Sends    int64  `json:"s,omitempty"`
	Recvs    int64  `json:"r,omitempty"`
	LastSend Micros `json:"ts,omitempty"`
	LastRecv Micros `json:"tr,omitempty"`
}

// Event is a WARN-class line or liveness event worth keeping. Which fields a kind sets is
// documented with its EventKind.
type Event struct {
	Kind EventKind `json:"k"`
	T    Micros    `json:"t"`
	Dev  string    `json:"dev,omitempty"`  // HCA or interface
	Port int       `json:"port,omitempty"` // HCA port
	Peer string    `json:"peer,omitempty"` // remote address as NCCL prints it
	// Detail is what NCCL says happened when it is not the message itself (EventIBAsync:
	// the async event's name, e.g. "port error").
	Detail string `json:"detail,omitempty"`
	// LocalRank is the local rank an event names (EventConnClosedLocal, EventLauncherExit);
	// meaningful only for those kinds.
	LocalRank int `json:"lrank,omitempty"`
	PID       int `json:"pid,omitempty"` // the process an event names (EventLauncherExit)
	// Comm is the communicator pointer (EventCommAbort), or the PyTorch process group
	// (EventTorchTimeout, EventTorchWorkStatus) when PyTorch names it.
	Comm  string `json:"comm,omitempty"`
	Code  int    `json:"code,omitempty"` // status, error number or sequence number
	Fatal bool   `json:"fatal,omitempty"`
	Msg   string `json:"msg,omitempty"` // the message, cut by CutMsg
	// Ranks are the ranks an event names besides its process (EventDuplicateGPU,
	// EventVersionMismatch: the two ranks NCCL compared).
	Ranks []int `json:"ranks,omitempty"`
	// Enqueued is the last work PyTorch enqueued (EventTorchWorkStatus; Code is the last
	// it completed): the gap is what the rank still waits on.
	Enqueued int64 `json:"enq,omitempty"`
	// Src is the WARN's source file, e.g. "transport/nvls.cc": which part of NCCL failed.
	Src string `json:"src,omitempty"`
	// Stage is where the process was when it logged the event: before its first per-op
	// line (initialization) or after; unknown for lines quoted by PyTorch.
	Stage Stage `json:"stage,omitempty"`
	// Work are the PyTorch works an event describes (EventTorchTimeout: the one that timed
	// out; EventTorchDesync: this rank's, then the other rank's). See TorchWork.
	Work []TorchWork `json:"work,omitempty"`
	// Bytes is a size the event names (EventRankExit: the allocation CUDA could not make).
	Bytes int64 `json:"bytes,omitempty"`
}

// Encode marshals a node snapshot, shedding detail until it fits MaxNodeBytes.
func Encode(n *Node) ([]byte, error) {
	n.Schema = SchemaVersion
	b, err := json.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("encode node snapshot: %w", err)
	}
	if len(b) <= MaxNodeBytes {
		return b, nil
	}
	shed := *n
	shed.Processes = make([]Process, len(n.Processes))
	copy(shed.Processes, n.Processes)
	for i := range shed.Processes {
		p := &shed.Processes[i]
		comms := make([]Comm, len(p.Comms))
		copy(comms, p.Comms)
		for j := range comms {
			comms[j].Recent = nil
		}
		p.Comms = comms
	}
	shed.Shed = "recent"
	if b, err = json.Marshal(&shed); err == nil && len(b) <= MaxNodeBytes {
		return b, nil
	}
	for i := range shed.Processes {
		for j, c := range shed.Processes[i].Comms {
			if c.Done != nil && len(c.Done.Peers) > 0 {
				d := *c.Done
				d.Peers = nil
				shed.Processes[i].Comms[j].Done = &d
			}
		}
	}
	shed.Shed = "recent,peers"
	if b, err = json.Marshal(&shed); err == nil && len(b) <= MaxNodeBytes {
		return b, nil
	}
	for i := range shed.Processes {
		shed.Processes[i].Events = nil
		comms := shed.Processes[i].Comms
		for j := range comms {
			comms[j].Marks = nil
		}
	}
	if shed.RAS != nil {
		r := *shed.RAS
		r.Comms = nil
		shed.RAS = &r
	}
	shed.Shed = "recent,peers,events,marks,ras"
	if b, err = json.Marshal(&shed); err != nil {
		return nil, fmt.Errorf("encode node snapshot: %w", err)
	}
	if len(b) > MaxNodeBytes {
		return nil, fmt.Errorf("node snapshot is %d bytes even without detail (cap %d)", len(b), MaxNodeBytes)
	}
	return b, nil
}

// Decode parses a node snapshot and checks its schema version.
func Decode(b []byte) (*Node, error) {
	var n Node
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("decode node snapshot: %w", err)
	}
	if n.Schema != SchemaVersion {
		return nil, fmt.Errorf("node snapshot schema %d, want %d", n.Schema, SchemaVersion)
	}
	return &n, nil
}
