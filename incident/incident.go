// Package incident holds the unit of alerting: one root cause (a culprit rank, node,
// GPU or port) with its evidence and lifecycle. Rules produce findings, the detector turns
// them into incidents, notifiers deliver their state changes.
package incident

import "time"

// Kind names the root cause.
type Kind string

const (
	KindMismatch      Kind = "mismatch"
	KindHang          Kind = "hang"
	KindP2PMismatch   Kind = "p2p_mismatch"
	KindCrash         Kind = "crash"
	KindStraggler     Kind = "straggler"
	KindLink          Kind = "link"
	KindGPU           Kind = "gpu"
	KindLostNode      Kind = "lost_node"
	KindStuckInFlight Kind = "stuck_in_flight"
	KindMonitoring    Kind = "monitoring"
	// KindConfig: the job's setup keeps NCCL from working (two ranks on one GPU, different
	// NCCL versions, a /dev/shm too small, no usable network interface).
	KindConfig Kind = "config"
	// KindOrderInversion: a rank called collectives of two communicators in the other order
	// than its peers did, so each communicator waits for the other (a deadlock once the GPU
	// runs them one after the other, as with CUDA_DEVICE_MAX_CONNECTIONS=1).
	KindOrderInversion Kind = "order_inversion"
	// KindNCCLWarning: NCCL (or its network plugin) warned of something no row of the
	// detector's knowledge table explains; the finding quotes it, and any known cause
	// outranks it.
	KindNCCLWarning Kind = "nccl_warning"
	// KindNode: a part of a node (host, GPU, NIC, link) was the root in several jobs, or
	// again and again in one, far above its share of the fleet's exposure (detect/fleet).
	KindNode Kind = "node"
)

// Kinds lists every kind, for renderers and documentation that must name each one.
var Kinds = []Kind{KindMismatch, KindHang, KindP2PMismatch, KindCrash, KindStraggler, KindLink, KindGPU,
	KindLostNode, KindStuckInFlight, KindMonitoring, KindConfig, KindOrderInversion, KindNCCLWarning, KindNode}

// Cause is the class of a root cause, named from the root's own evidence: what an on-call
// engineer acts on (restart a node, drain a GPU, fix the input pipeline, fix the code).
type Cause string

const (
	CauseUnknown Cause = ""
	// CauseDied: the process ended (a signal, an exit code, an exception such as CUDA out
	// of memory) while its peers still needed it.
	CauseDied Cause = "died"
	// CauseHostStalled: alive but not issuing (sleeping, in I/O, stopped, burning CPU).
	CauseHostStalled Cause = "host_stalled"
	// CauseHostSlow: issuing late at every step (input pipeline, CPU contention).
	CauseHostSlow Cause = "host_slow"
	// CauseGPUBusy: issued on time but its GPU started the op late: another process on the
	// GPU, or the rank's own long kernels.
	CauseGPUBusy Cause = "gpu_busy"
	// CauseGPUThrottled: its GPU runs at reduced clocks (thermal, power, HW slowdown).
	CauseGPUThrottled Cause = "gpu_throttled"
	// CauseGPUFault: an XID, an ECC error, a CUDA error that kills the context, a GPU hang.
	CauseGPUFault Cause = "gpu_fault"
	// CauseLink: its transfers to a peer lag while it is in the op: a link or a NIC.
	CauseLink Cause = "link"
	// CauseNetwork: the network set-up or fabric (connections refused, IB errors).
	CauseNetwork Cause = "network"
	// CauseMismatch: ranks called different ops at one position, or one skipped an op.
	CauseMismatch Cause = "mismatch"
	// CauseOrder: ranks called two communicators' ops in different orders (a cycle).
	CauseOrder Cause = "order_inversion"
	// CauseInit: an initialization that never completed.
	CauseInit Cause = "init"
	// CauseSetup: the job's configuration keeps NCCL from working.
	CauseSetup Cause = "setup"
	// CauseApplication: the application called NCCL wrongly or failed by itself.
	CauseApplication Cause = "application"
	// CauseNCCL: NCCL reported an internal error.
	CauseNCCL Cause = "nccl"
)

// Episode is the span of a condition that began and may have ended: a slowdown, a stall
// that resolved. LostShare is the share of the job's wall time it cost (0-1) over the
// window it was judged on.
type Episode struct {
	Onset     time.Time `json:"onset"`
	End       time.Time `json:"end,omitzero"`
	LostShare float64   `json:"lost_share,omitempty"`
	// Lost is the job time it cost in all, Steps the training steps it spanned.
	Lost  time.Duration `json:"lost_ns,omitempty"`
	Steps int           `json:"steps,omitempty"`
}

// KeyEtcdUnreachable is the key of the incident that says the detector lost etcd. While
// etcd is gone nothing that needs it can deliver, so alert.Outage delivers this one
// directly to the notifiers (once, resolved when etcd returns).
const KeyEtcdUnreachable = "monitoring:etcd"

// KeyAlertsUndelivered is the key of the dead-man's incident: open incidents that no
// notifier delivered in time (alert.Dispatcher.Undelivered). It is left out of its own
// count.
const KeyAlertsUndelivered = "monitoring:alerts-undelivered"

// Monitoring says whether k is about the watchdog rather than the job: it cannot see (a
// sidecar silent or lagging, etcd slow or unreachable, a detector starved or late) or cannot
// page. Such incidents go to the operators' route (alert.Config.Operators) at
// MonitoringSeverity, never as a critical page about a training job.
func (k Kind) Monitoring() bool { return k == KindMonitoring }

// MonitoringSeverity is the severity of every monitoring incident.
const MonitoringSeverity = SeverityWarning

// Severity orders incidents for routing and display.
type Severity string

const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
	SeverityInfo     Severity = "info"
)

// Rank returns a sort key: lower is more severe.
func (s Severity) Rank() int {
	switch s {
	case SeverityCritical:
		return 0
	case SeverityWarning:
		return 1
	default:
		return 2
	}
}

// State is where an incident is in its lifecycle.
type State string

const (
	StateOpen     State = "open"
	StateResolved State = "resolved"
)

// Culprit names what caused the incident. Rank is -1 for node- or port-level culprits.
type Culprit struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	PID  int    `json:"pid,omitempty"`
	GPU  string `json:"gpu,omitempty"`  // GPU index or PCI bus id
	Port string `json:"port,omitempty"` // e.g. "mlx5_1:1" or "eth0"
}

// Op is a collective's signature as one rank issued it.
type Op struct {
	Op       string `json:"op"`
	Count    uint64 `json:"count"`
	Datatype string `json:"datatype"`
	RedOp    string `json:"redop,omitempty"`
	Root     int    `json:"root,omitempty"`
}

// Incident is one root cause, open or resolved.
type Incident struct {
	ID string `json:"id"`
	// Key names the root cause (e.g. "rank:node7:4123", "link:node7:mlx5_1:1"): findings
	// with the same key are this incident.
	Key      string    `json:"key"`
	Kind     Kind      `json:"kind"`
	State    State     `json:"state"`
	Severity Severity  `json:"severity"`
	Job      string    `json:"job"`
	Comm     string    `json:"comm,omitempty"`
	Seq      int64     `json:"seq,omitempty"`
	Culprits []Culprit `json:"culprits"`
	// Victims counts ranks that were only waiting on the culprits.
	Victims  int           `json:"victims,omitempty"`
	Summary  string        `json:"summary"`
	Evidence []string      `json:"evidence"`
	Ops      map[string]Op `json:"ops,omitempty"`
	// OpGroups summarise the ops of a large job by signature (Bound): then Ops is nil.
	OpGroups []OpGroup `json:"op_groups,omitempty"`
	// Omitted counts what Bound left out to keep the incident's size independent of the job's.
	Omitted *Omitted `json:"omitted,omitempty"`
	// LagSeconds is the median arrival lag for stragglers.
	LagSeconds float64    `json:"lag_seconds,omitempty"`
	OpenedAt   time.Time  `json:"opened_at"`
	LastSeen   time.Time  `json:"last_seen"`
	ResolvedAt *time.Time `json:"resolved_at"`
	// FaultAt is the best estimate of when the condition began (the culprit's last
	// progress, the straggler's onset); OpenedAt-FaultAt is the detection latency.
	FaultAt time.Time `json:"fault_at,omitzero"`
	// Revision increases with every change a notifier should see (open, update, resolve).
	Revision int `json:"revision"`
	// Cause is the class of the root cause; Episode its span, for slowdowns and stalls
	// that resolved.
	Cause   Cause    `json:"cause,omitempty"`
	Episode *Episode `json:"episode,omitempty"`
	// Episodes are the earlier spans of a root that recurred (a flapping link, a rank that
	// pauses again): one incident, reopened, with what came before, oldest first.
	Episodes []Episode `json:"episodes,omitempty"`
}

// MaxEpisodes bounds the earlier episodes an incident lists.
const MaxEpisodes = 16
