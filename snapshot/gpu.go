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
	State          GPUState `json:"state,omitempty"` // derived from utilisation and power
	// Procs are the compute processes NVML lists on the GPU (16 at most, the largest by
	// memory). In a container NVML reports host PIDs, which may not be the ranks' own: compare
	// counts (more processes than ranks using the GPU: it is shared), not PIDs. "procs" in
	// Missing means NVML could not list them, so an empty list never reads as "nobody".
	Procs []GPUProc `json:"procs,omitempty"`
	// Missing lists, by JSON name, the readings NVML could not give this time (not
	// supported on this GPU, or failed), so a zero is never taken for a measurement.
	Missing []string `json:"na,omitempty"`
	// Err says why the GPU could not be read at all (e.g. "gpu is lost"); empty when read.
	Err string `json:"err,omitempty"`
}

// Has reports whether the sample holds the reading with this JSON name, e.g. "util".
func (g *GPU) Has(field string) bool {
	if g.T == 0 || g.Err != "" {
		return false
	}
	for _, m := range g.Missing {
		if m == field {
			return false
		}
	}
	return true
}

// XID is one XID error event.
type XID struct {
	Code int    `json:"code"`
	T    Micros `json:"t"`
}

// GPUProc is one compute process on a GPU.
type GPUProc struct {
	PID    int    `json:"pid"`
	MemMiB int    `json:"mem,omitempty"`
	Name   string `json:"name,omitempty"`
}
