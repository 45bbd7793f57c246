//go:build cgo

package gpu

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Open loads the node's NVML (libnvidia-ml.so.1) and starts a sampler over all its GPUs.
// Where there is no driver the error wraps ErrNoNVML; nothing else is started then.
func Open(ctx context.Context, opts Options) (*Sampler, error) {
	return newSampler(ctx, newNVMLLibrary(""), opts)
}

// nvmlLibrary adapts go-nvml to Library. go-nvml binds NVML's symbols lazily and calls a
// missing one as a null function, so calls that old drivers lack are guarded by a
// symbol look-up first (see has).
type nvmlLibrary struct {
	lib nvml.Interface

	mu      sync.Mutex
	symbols map[string]bool // symbol name -> present in the loaded library
}

// newNVMLLibrary returns the real NVML; path "" means the default libnvidia-ml.so.1.
func newNVMLLibrary(path string) *nvmlLibrary {
	var opts []nvml.LibraryOption
	if path != "" {
		opts = append(opts, nvml.WithLibraryPath(path))
	}
	return &nvmlLibrary{lib: nvml.New(opts...), symbols: map[string]bool{}}
}

func (l *nvmlLibrary) Init() error {
	ret := l.lib.Init()
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return fmt.Errorf("nvml init: %w", ErrLibraryNotFound)
	}
	return nvmlErr("nvml init", ret)
}

func (l *nvmlLibrary) Shutdown() error { return nvmlErr("nvml shutdown", l.lib.Shutdown()) }

func (l *nvmlLibrary) DeviceCount() (int, error) {
	n, ret := l.lib.DeviceGetCount()
	return n, nvmlErr("device count", ret)
}

func (l *nvmlLibrary) Device(index int) (Device, error) {
	d, ret := l.lib.DeviceGetHandleByIndex(index)
	if err := nvmlErr(fmt.Sprintf("device %d handle", index), ret); err != nil {
		return nil, err
	}
	return &nvmlDevice{l: l, d: d}, nil
}

func (l *nvmlLibrary) NewEventSet() (EventSet, error) {
	s, ret := l.lib.EventSetCreate()
	if err := nvmlErr("event set create", ret); err != nil {
		return nil, err
	}
	return &nvmlEventSet{set: s, index: map[nvml.Device]int{}}, nil
}

// has reports whether the loaded library exports symbol; answers are cached.
func (l *nvmlLibrary) has(symbol string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok, seen := l.symbols[symbol]
	if !seen {
		ok = l.lib.Extensions().LookupSymbol(symbol) == nil
		l.symbols[symbol] = ok
	}
	return ok
}

type nvmlDevice struct {
	l *nvmlLibrary
	d nvml.Device
}

func (d *nvmlDevice) PCIBusID() (string, error) {
	info, ret := d.d.GetPciInfo()
	if err := nvmlErr("pci info", ret); err != nil {
		return "", err
	}
	return cString(info.BusId[:]), nil
}

func (d *nvmlDevice) UUID() (string, error) {
	s, ret := d.d.GetUUID()
	return s, nvmlErr("uuid", ret)
}

func (d *nvmlDevice) Name() (string, error) {
	s, ret := d.d.GetName()
	return s, nvmlErr("name", ret)
}

func (d *nvmlDevice) Utilization() (uint32, uint32, error) {
	u, ret := d.d.GetUtilizationRates()
	return u.Gpu, u.Memory, nvmlErr("utilization", ret)
}

func (d *nvmlDevice) PowerUsage() (uint32, error) {
	v, ret := d.d.GetPowerUsage()
	return v, nvmlErr("power usage", ret)
}

func (d *nvmlDevice) EnforcedPowerLimit() (uint32, error) {
	v, ret := d.d.GetEnforcedPowerLimit()
	return v, nvmlErr("enforced power limit", ret)
}

func (d *nvmlDevice) SMClock() (uint32, error) {
	v, ret := d.d.GetClockInfo(nvml.CLOCK_SM)
	return v, nvmlErr("sm clock", ret)
}

func (d *nvmlDevice) MaxSMClock() (uint32, error) {
	v, ret := d.d.GetMaxClockInfo(nvml.CLOCK_SM)
	return v, nvmlErr("max sm clock", ret)
}

func (d *nvmlDevice) Temperature() (uint32, error) {
	v, ret := d.d.GetTemperature(nvml.TEMPERATURE_GPU)
	return v, nvmlErr("temperature", ret)
}

func (d *nvmlDevice) ClockEventReasons() (uint64, error) {
	if d.l.has("nvmlDeviceGetCurrentClocksEventReasons") {
		v, ret := d.d.GetCurrentClocksEventReasons()
		if ret != nvml.ERROR_FUNCTION_NOT_FOUND {
			return v, nvmlErr("clock event reasons", ret)
		}
	}
	// Drivers before R535 only have the older name for the same bit mask.
	if d.l.has("nvmlDeviceGetCurrentClocksThrottleReasons") {
		v, ret := d.d.GetCurrentClocksThrottleReasons()
		return v, nvmlErr("clock throttle reasons", ret)
	}
	return 0, fmt.Errorf("clock event reasons: %w", ErrNotSupported)
}

func (d *nvmlDevice) ECCErrors(uncorrected bool) (uint64, error) {
	kind := nvml.MEMORY_ERROR_TYPE_CORRECTED
	if uncorrected {
		kind = nvml.MEMORY_ERROR_TYPE_UNCORRECTED
	}
	v, ret := d.d.GetTotalEccErrors(kind, nvml.VOLATILE_ECC)
	return v, nvmlErr("ecc errors", ret)
}

func (d *nvmlDevice) NVLinkActive(link int) (bool, error) {
	if !d.l.has("nvmlDeviceGetNvLinkState") {
		return false, fmt.Errorf("nvlink state: %w", ErrNotSupported)
	}
	st, ret := d.d.GetNvLinkState(link)
	if err := nvmlErr("nvlink state", ret); err != nil {
		return false, err
	}
	return st == nvml.FEATURE_ENABLED, nil
}

func (d *nvmlDevice) NVLinkErrorCounter(link int, c NVLinkCounter) (uint64, error) {
	if !d.l.has("nvmlDeviceGetNvLinkErrorCounter") {
		return 0, fmt.Errorf("nvlink error counter: %w", ErrNotSupported)
	}
	v, ret := d.d.GetNvLinkErrorCounter(link, nvml.NvLinkErrorCounter(c))
	return v, nvmlErr("nvlink error counter", ret)
}

func (d *nvmlDevice) PCIeReplays() (uint64, error) {
	if !d.l.has("nvmlDeviceGetPcieReplayCounter") {
		return 0, fmt.Errorf("pcie replay counter: %w", ErrNotSupported)
	}
	v, ret := d.d.GetPcieReplayCounter()
	if v < 0 {
		v = 0
	}
	return uint64(v), nvmlErr("pcie replay counter", ret)
}

func (d *nvmlDevice) SupportedEvents() (uint64, error) {
	v, ret := d.d.GetSupportedEventTypes()
	return v, nvmlErr("supported event types", ret)
}

func (d *nvmlDevice) RegisterEvents(set EventSet, index int, mask uint64) error {
	s, ok := set.(*nvmlEventSet)
	if !ok {
		return fmt.Errorf("register events: event set %T is not from this library", set)
	}
	if err := nvmlErr("register events", d.d.RegisterEvents(mask, s.set)); err != nil {
		return err
	}
	s.mu.Lock()
	s.index[d.d] = index
	s.mu.Unlock()
	return nil
}

func (d *nvmlDevice) ComputeProcesses() ([]ComputeProcess, error) {
	// go-nvml calls the newest of _v3, _v2 and _v1 the driver exports.
	infos, ret := d.d.GetComputeRunningProcesses()
	if err := nvmlErr("compute running processes", ret); err != nil {
		return nil, err
	}
	out := make([]ComputeProcess, 0, len(infos))
	for _, p := range infos {
		out = append(out, ComputeProcess{PID: int(p.Pid), UsedMemory: p.UsedGpuMemory})
	}
	return out, nil
}

type nvmlEventSet struct {
	set nvml.EventSet

	mu    sync.Mutex
	index map[nvml.Device]int // handle -> NVML index, to name the GPU of an event
}

func (s *nvmlEventSet) Wait(timeout time.Duration) (Event, error) {
	ms := timeout.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	data, ret := s.set.Wait(uint32(ms))
	if err := nvmlErr("event wait", ret); err != nil {
		return Event{}, err
	}
	ev := Event{Index: -1, Type: data.EventType, Data: data.EventData}
	if data.Device != nil {
		s.mu.Lock()
		if i, ok := s.index[data.Device]; ok {
			ev.Index = i
		}
		s.mu.Unlock()
	}
	return ev, nil
}

func (s *nvmlEventSet) Free() error { return nvmlErr("event set free", s.set.Free()) }

// nvmlErr turns an NVML return code into nil or an error that matches our sentinels.
func nvmlErr(op string, ret nvml.Return) error {
	var sentinel error
	switch ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		sentinel = ErrNotSupported
	case nvml.ERROR_INVALID_ARGUMENT:
		sentinel = ErrInvalidArgument
	case nvml.ERROR_TIMEOUT:
		sentinel = ErrTimeout
	case nvml.ERROR_GPU_IS_LOST:
		sentinel = ErrGPULost
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		sentinel = ErrLibraryNotFound
	default:
		return fmt.Errorf("%s: nvml error %d (%s)", op, int(ret), ret.Error())
	}
	return fmt.Errorf("%s: %w", op, sentinel)
}

// cString cuts a NUL-terminated C char array.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
