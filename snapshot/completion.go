package snapshot

// Completion state comes from the NCCL profiler plugin (profiler/), never from logs: an
// NCCL line says an op was issued, only the plugin says it started on the GPU and finished,
// and how far each peer's network transfers got.

// Source says where a process's state comes from.
type Source string

const (
	// SourceLog: its NCCL debug log only (also what an empty Source means).
	SourceLog Source = "log"
	// SourcePlugin: the profiler plugin's region only: a job logging at NCCL_DEBUG=WARN,
	// whose log holds no per-op lines.
	SourcePlugin Source = "plugin"
	// SourceBoth: the log and the region of one process.
	SourceBoth Source = "both"
)

// HasPlugin reports whether the plugin's completion state is part of the process.
func (s Source) HasPlugin() bool { return s == SourcePlugin || s == SourceBoth }

// HasLog reports whether the process's ops come from its NCCL log.
func (s Source) HasLog() bool { return s != SourcePlugin && s != SourceFR }

// Plugin is what the profiler plugin says about itself in one process.
type Plugin struct {
	// ABI is the ncclProfiler_vN NCCL loaded (3-6); Version the plugin's own.
	ABI     int    `json:"abi,omitempty"`
	Version string `json:"v,omitempty"`
	// Dropped counts events the plugin could not record (past its bounds); Disabled says
	// why it stopped recording ("" while it records).
	Dropped  int64  `json:"drop,omitempty"`
	Disabled string `json:"off,omitempty"`
	// Read is when the sidecar last read the region.
	Read Micros `json:"read,omitempty"`
	// Finalized: every communicator the process created was finalized, as a job that ends
	// cleanly does; with NCCL_DEBUG=WARN no Destroy line says so.
	Finalized bool `json:"fin,omitempty"`
}

// Completion is one communicator's progress on one rank, from the plugin. Positions count
// collectives from 1, as Comm.Count does.
type Completion struct {
	// Issued collectives; Started: the newest whose kernel ran on the GPU; Done: every one
	// up to it completed.
	Issued  int64 `json:"i"`
	Started int64 `json:"s"`
	Done    int64 `json:"d"`
	// P2P sends and receives issued and completed.
	P2PIssued int64 `json:"pi,omitempty"`
	P2PDone   int64 `json:"pd,omitempty"`
	// LastDone is when an op last completed; LastEvent when the plugin last heard of the
	// communicator at all.
	LastDone  Micros `json:"ld,omitempty"`
	LastEvent Micros `json:"le,omitempty"`
	// InFlight is the oldest op not complete (nil: nothing pending).
	InFlight *Flight `json:"f,omitempty"`
	// Timing is measured over the sidecar's recent window of completed collectives.
	Timing *Timing `json:"tm,omitempty"`
	// Peers are the peers with network or p2p activity worth showing (MaxPeers at most),
	// those with open transfers first.
	Peers []PeerProgress `json:"peers,omitempty"`
	// Dropped counts this communicator's events the plugin could not record.
	Dropped int64 `json:"drop,omitempty"`
}

// Flight is an op the plugin tracks until complete. Op's Seq is a collective's position or
// a p2p's position with its peer in its direction, Root a collective's root or a p2p's peer,
// T the issue time, Idx its place in the process's issue order.
type Flight struct {
	Op
	P2P   bool   `json:"p2p,omitempty"`
	Algo  string `json:"algo,omitempty"`
	Proto string `json:"proto,omitempty"`
	// GPUStart is when its first kernel channel ran (0: not on the GPU yet).
	GPUStart Micros `json:"gs,omitempty"`
	// Channels NCCL announced, those started and done; ProxyOpen: network ops running.
	Channels        int `json:"ch,omitempty"`
	ChannelsStarted int `json:"chs,omitempty"`
	ChannelsDone    int `json:"chd,omitempty"`
	ProxyOpen       int `json:"px,omitempty"`
}

// Timing is this rank's completed collectives on a communicator over a recent window.
type Timing struct {
	// N collectives completed in the window, over Window µs.
	N      int64 `json:"n"`
	Window int64 `json:"w"`
	// Busy is their mean µs from the kernel's start on the GPU to completion: the op's own
	// time plus the wait for the last rank to arrive, so a late rank has the shortest.
	// Queue is their mean µs from issue to the kernel's start.
	Busy  int64 `json:"busy"`
	Queue int64 `json:"queue"`
}

// Dir is a direction of traffic with a peer.
type Dir string

const (
	DirSend Dir = "send"
	DirRecv Dir = "recv"
)

// ProxyState is the last state NCCL's network proxy reported for a direction with a peer:
// who holds a transfer up.
type ProxyState string

const (
	ProxyNone ProxyState = ""
	// ProxySendGPUWait: the send waits for this rank's GPU to fill its buffer.
	ProxySendGPUWait ProxyState = "SendGPUWait"
	// ProxySendPeerWait: the send waits for the peer to post its receive.
	ProxySendPeerWait ProxyState = "SendPeerWait"
	// ProxySendWait: the data is on the network, waiting for the transfer to complete.
	ProxySendWait ProxyState = "SendWait"
	// ProxyRecvWait: the receive waits for the peer's data.
	ProxyRecvWait ProxyState = "RecvWait"
	// ProxyRecvFlushWait, ProxyRecvGPUWait: the data came; this rank flushes or its GPU
	// has yet to consume it.
	ProxyRecvFlushWait ProxyState = "RecvFlushWait"
	ProxyRecvGPUWait   ProxyState = "RecvGPUWait"
	// ProxyInProgress: a network op started moving.
	ProxyInProgress ProxyState = "InProgress"
)

// WaitsOnPeer says whether the state is this rank waiting for its peer (its receive posted
// or its data), rather than for its own GPU or the network.
func (s ProxyState) WaitsOnPeer() bool { return s == ProxyRecvWait || s == ProxySendPeerWait }

// WaitsOnNetwork says whether data is on the wire, waiting for the transfer to complete.
func (s ProxyState) WaitsOnNetwork() bool { return s == ProxySendWait }

// MaxPeers bounds the peer rows one communicator publishes.
const MaxPeers = 16

// PeerProgress is one direction of traffic with one peer of the communicator.
type PeerProgress struct {
	Peer    int `json:"p"`
	Dir     Dir `json:"d"`
	Channel int `json:"ch,omitempty"`
	// Steps of every network op with the peer in this direction, and those done; Open is
	// how many of those ops are still running.
	Steps     int64 `json:"st,omitempty"`
	StepsDone int64 `json:"sd,omitempty"`
	Open      int64 `json:"open,omitempty"`
	// LastStep is when a step last ended; State the last state and StateAt its time.
	LastStep Micros     `json:"ls,omitempty"`
	State    ProxyState `json:"state,omitempty"`
	StateAt  Micros     `json:"sa,omitempty"`
	// P2P sends or receives with the peer issued and completed.
	P2PIssued int64 `json:"pi,omitempty"`
	P2PDone   int64 `json:"pd,omitempty"`
	// NetUs is the mean µs a send step spent on the network (handed over until done) over
	// the sidecar's recent window, NetSteps the steps it covers: the link's own speed.
	NetUs    int64 `json:"net,omitempty"`
	NetSteps int64 `json:"nets,omitempty"`
}
