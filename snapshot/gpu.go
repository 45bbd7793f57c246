package snapshot

// GPU is one GPU's latest NVML sample (produced by heartbeat/gpu).
type GPU struct {
	Index       int     `json:"i"`
	BusID       string  `json:"bus"` // NCCL's packed form, e.g. "1b000", to join with Init lines
	UUID        string  `json:"uuid,omitempty"`
	Name        string  `json:"name,omitempty"`
	T           Micros  `json:"t"`
	Util        int     `json:"util"`    // percent
	MemUtil     int     `json:"memutil"` // percent
	PowerW      float64 `json:"pw"`
	PowerLimitW float64 `json:"pwmax,omitempty"`
	SMClockMHz  int     `json:"sm"`
	SMMaxMHz    int     `json:"smmax,omitempty"`
	TempC       int     `json:"temp"`
	// ClockEvents is NVML's clock-event (throttle) reason bit mask; Reasons names the bits.
	ClockEvents    uint64   `json:"ce,omitempty"`
	Reasons        []string `json:"reasons,omitempty"`
	XIDs           []XID    `json:"xids,omitempty"` // recent, newest last
	ECCVolatileSBE uint64   `json:"sbe,omitempty"`
	ECCVolatileDBE uint64   `json:"dbe,omitempty"`
	NVLinkErrors   uint64   `json:"nvlerr,omitempty"` // CRC + replay + recovery, summed over links
	PCIeReplays    uint64   `json:"pcierep,omitempty"`
	// State is derived: "computing", "waiting" (NCCL kernel spinning: high util, low power), "idle".
	State string `json:"state,omitempty"`
}

// XID is one XID error event.
type XID struct {
	Code int    `json:"code"`
	T    Micros `json:"t"`
}
