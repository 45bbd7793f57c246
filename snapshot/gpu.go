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
	// Procs are the processes with a compute context on this GPU, as NVML lists them, the
	// largest by memory first, at most MaxGPUProcs. Empty with "procs" not in Missing means
	// NVML listed none; "procs" in Missing means the list is unknown (not supported, no
	// permission). The pids are the driver's, i.e. the host's pid namespace: in a container
	// they need not match the ranks' pids, so compare counts (more processes on a GPU than
	// ranks using it: the GPU is shared), not pids.
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

// MaxGPUProcs bounds GPU.Procs; the largest by memory are kept.
const MaxGPUProcs = 16

// GPUProc is one process with a compute context on a GPU.
type GPUProc struct {
	PID int `json:"pid"` // as NVML reports it: the host's pid namespace
	// MemMiB is the GPU memory it holds, in MiB (0: NVML could not tell, as under MIG
	// or without permission).
	MemMiB int `json:"mem,omitempty"`
	// Name is /proc/<pid>/comm as the sidecar sees it, empty where the pid is not
	// visible. In another pid namespace the pid may name an unrelated process there:
	// Name is a hint for humans, not an identity.
	Name string `json:"name,omitempty"`
}

// XID is one XID error event.
type XID struct {
	Code int    `json:"code"`
	T    Micros `json:"t"`
}
