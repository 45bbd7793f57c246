package snapshot

// RAS is the local NCCL RAS view of the job (produced by heartbeat/ras).
//
// NCCL serves the same job-wide view on every node. A JSON report lists every communicator
// and every rank that answered; a text report (NCCL before 2.28.7) names only communicators
// that NCCL flagged (MISMATCH, INCOMPLETE, ERROR) and only the ranks it calls outliers, so
// Format tells a reader how complete the report is.
type RAS struct {
	T        Micros    `json:"t"`
	Version  string    `json:"nccl,omitempty"`
	Format   string    `json:"fmt,omitempty"` // "json" or "text" (partial, see RASComm.Partial)
	Comms    []RASComm `json:"comms,omitempty"`
	Dead     int       `json:"dead,omitempty"`     // job processes considered dead
	Unresp   int       `json:"unresp,omitempty"`   // job processes that did not answer (not dead)
	Timeouts int       `json:"timeouts,omitempty"` // collection timeouts
	Err      string    `json:"err,omitempty"`
}

// RASComm is one communicator in a RAS STATUS reply.
type RASComm struct {
	Hash string `json:"hash"` // "0x..." as in Init commId
	Size int    `json:"size"` // 0 when the report does not say
	// Missing lists the ranks with no data: unresponsive processes and processes that
	// answered without this communicator (destroyed it, or not created yet).
	Missing []int `json:"missing,omitempty"`
	Unresp  []int `json:"unresp,omitempty"` // the Missing ranks whose process did not answer
	Dead    []int `json:"dead,omitempty"`   // the Missing ranks whose process is considered dead
	// Counts is per rank the total collectives launched (sum over functions). JSON only.
	Counts map[int]int64 `json:"counts,omitempty"`
	// Funcs is per NCCL function name ("AllReduce", ...) the launched count per rank.
	// JSON: every reporting rank, functions that are zero on all ranks left out.
	// Text: only functions whose counts differ, and only the ranks the report names.
	Funcs map[string]map[int]int64 `json:"fn,omitempty"`
	// Groups (text only) are the "N ranks have launched up to operation V" lines, whose
	// ranks the report may not name.
	Groups []RASGroup `json:"grp,omitempty"`
	// Status is NCCL's summary state over the ranks: INIT, RUNNING, FINALIZE or ABORT.
	Status string `json:"st,omitempty"`
	// Errors maps a rank to its reported error, "init:<ncclResult name>" or "async:<name>".
	Errors map[int]string `json:"errs,omitempty"`
	// Partial is set when the report (text) leaves out counts or ranks.
	Partial bool `json:"part,omitempty"`
}

// RASGroup is a set of ranks of one communicator at the same launched count of one function.
type RASGroup struct {
	Func  string `json:"f"`
	Ranks int    `json:"n"` // how many ranks
	Count int64  `json:"c"` // their launched count; 0 for "not launched any operations"
}
