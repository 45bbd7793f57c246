package snapshot

// RAS is the local NCCL RAS view of the job (produced by heartbeat/ras).
type RAS struct {
	T        Micros    `json:"t"`
	Version  string    `json:"nccl,omitempty"`
	Comms    []RASComm `json:"comms,omitempty"`
	Dead     int       `json:"dead,omitempty"`     // job processes considered dead
	Timeouts int       `json:"timeouts,omitempty"` // collection timeouts
	Err      string    `json:"err,omitempty"`
}

// RASComm is one communicator in a RAS STATUS reply.
type RASComm struct {
	Hash    string `json:"hash"` // "0x..." as in Init commId
	Size    int    `json:"size"`
	Missing []int  `json:"missing,omitempty"`
	Dead    []int  `json:"dead,omitempty"`
	// Counts is per rank the total collectives launched (sum over functions).
	Counts map[int]int64 `json:"counts,omitempty"`
}
