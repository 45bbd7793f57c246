package gpu

import (
	"errors"
	"time"
)

// Library is the slice of NVML the sampler uses, and nothing more. The real one wraps
// go-nvml (cgo builds only); Fake is a scriptable one for tests and the job simulator.
// Every method may be called from several goroutines at once.
type Library interface {
	// Init loads and initialises NVML. An error means NVML is unavailable on this node.
	Init() error
	// Shutdown releases NVML; called once, and only after a successful Init.
	Shutdown() error
	DeviceCount() (int, error)
	// Device returns the handle of the GPU with this NVML index.
	Device(index int) (Device, error)
	// NewEventSet creates an empty event set to register devices with.
	NewEventSet() (EventSet, error)
}

// Device is one GPU's handle. A call the GPU or driver does not support returns an
// error matching ErrNotSupported; the sampler then leaves that field unset.
type Device interface {
	// PCIBusID is the bus id as NVML prints it, e.g. "00000000:1B:00.0".
	PCIBusID() (string, error)
	UUID() (string, error)
	Name() (string, error)
	// Utilization is the percentage of the last sample period in which a kernel ran
	// (gpu) and in which device memory was read or written (mem).
	Utilization() (gpu, mem uint32, err error)
	// PowerUsage is the board power draw in milliwatts.
	PowerUsage() (uint32, error)
	// EnforcedPowerLimit is the power limit in force, in milliwatts.
	EnforcedPowerLimit() (uint32, error)
	// SMClock and MaxSMClock are the current and maximum SM clocks in MHz.
	SMClock() (uint32, error)
	MaxSMClock() (uint32, error)
	// Temperature is the GPU core temperature in °C.
	Temperature() (uint32, error)
	// ClockEventReasons is the bit mask of nvmlDeviceGetCurrentClocksEventReasons (the
	// throttle-reasons call on drivers that predate it). Reasons names the bits.
	ClockEventReasons() (uint64, error)
	// ECCErrors is the total volatile ECC error count since the last driver load:
	// corrected (single bit) when uncorrected is false, else uncorrected (double bit).
	ECCErrors(uncorrected bool) (uint64, error)
	// NVLinkActive reports whether the link exists and is up; a link index the GPU does
	// not have returns ErrNotSupported or ErrInvalidArgument.
	NVLinkActive(link int) (bool, error)
	// NVLinkErrorCounter reads one data-link error counter of one link.
	NVLinkErrorCounter(link int, counter NVLinkCounter) (uint64, error)
	// PCIeReplays is the PCIe replay counter.
	PCIeReplays() (uint64, error)
	// SupportedEvents is the mask of event types this GPU can deliver.
	SupportedEvents() (uint64, error)
	// RegisterEvents adds this GPU to set for the event types in mask. Events from it
	// carry index as Event.Index.
	RegisterEvents(set EventSet, index int, mask uint64) error
	// ComputeProcesses lists the processes with a compute context on this GPU
	// (nvmlDeviceGetComputeRunningProcesses). An error means the list is unknown, never
	// that it is empty: a driver without the call, or no permission to ask.
	ComputeProcesses() ([]ComputeProcess, error)
}

// ComputeProcess is one process with a compute context on a GPU, as NVML lists it.
type ComputeProcess struct {
	// PID is the driver's: the host's pid namespace, whatever namespace asks.
	PID int
	// UsedMemory is the GPU memory it holds in bytes, or MemoryUnknown.
	UsedMemory uint64
}

// MemoryUnknown is NVML's NVML_VALUE_NOT_AVAILABLE for a process's memory (under MIG, or
// without the permission to see it).
const MemoryUnknown = ^uint64(0)

// EventSet delivers events of the GPUs registered with it.
type EventSet interface {
	// Wait blocks up to timeout for the next event; on timeout it returns an error
	// matching ErrTimeout. It cannot be interrupted, so callers keep timeouts short.
	Wait(timeout time.Duration) (Event, error)
	// Free releases the set; never called while a Wait is in progress.
	Free() error
}

// Event is one NVML event.
type Event struct {
	Index int    // NVML index of the GPU, as given to RegisterEvents; -1 when unknown
	Type  uint64 // one of the EventXxx bits
	Data  uint64 // the XID code for EventXID
}

// Event type bits, equal to NVML's nvmlEventType values.
const (
	EventSingleBitECC uint64 = 0x1 // nvmlEventTypeSingleBitEccError
	EventDoubleBitECC uint64 = 0x2 // nvmlEventTypeDoubleBitEccError
	EventXID          uint64 = 0x8 // nvmlEventTypeXidCriticalError
)

// NVLinkCounter selects a data-link error counter, with NVML's nvmlNvLinkErrorCounter_t values.
type NVLinkCounter int

// The counters the sampler sums into snapshot.GPU.NVLinkErrors.
const (
	NVLinkReplay   NVLinkCounter = 0 // NVML_NVLINK_ERROR_DL_REPLAY
	NVLinkRecovery NVLinkCounter = 1 // NVML_NVLINK_ERROR_DL_RECOVERY
	NVLinkCRCFlit  NVLinkCounter = 2 // NVML_NVLINK_ERROR_DL_CRC_FLIT
)

// MaxNVLinks is NVML's NVML_NVLINK_MAX_LINKS: link indices probed per GPU.
const MaxNVLinks = 36

// Errors a Library returns, matched with errors.Is.
var (
	// ErrNoNVML means NVML cannot be used on this node: no driver, no library, a build
	// without cgo, or an Init failure. The sidecar logs it once and runs without GPU data.
	ErrNoNVML = errors.New("nvml unavailable")
	// ErrLibraryNotFound is Init's error when libnvidia-ml cannot be loaded.
	ErrLibraryNotFound = errors.New("libnvidia-ml not found")
	// ErrNotSupported means the GPU or driver does not offer that reading.
	ErrNotSupported = errors.New("not supported")
	// ErrInvalidArgument is NVML's answer for, among others, a link index out of range.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTimeout is EventSet.Wait's error when no event came in time.
	ErrTimeout = errors.New("timeout")
	// ErrGPULost means the GPU stopped answering (fell off the bus).
	ErrGPULost = errors.New("gpu is lost")
	// ErrClosed is returned by Sample after Close.
	ErrClosed = errors.New("gpu sampler closed")
)

// unsupported reports whether err only says that a reading does not exist on this GPU.
func unsupported(err error) bool {
	return errors.Is(err, ErrNotSupported) || errors.Is(err, ErrInvalidArgument)
}
