package gpu

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Fake is a scriptable in-memory Library for tests and the job simulator: set each GPU's
// readings with Update, make readings unsupported or failing with Fail, inject XID and
// ECC events, lose a GPU. Unscripted readings return plausible H200 values; nothing
// panics. Safe for concurrent use.
type Fake struct {
	mu        sync.Mutex
	initErr   error
	countErr  error
	gpus      []*FakeGPU
	sets      []*fakeEventSet
	inits     int
	shutdowns int
	misuse    []string // contract violations seen (e.g. Free during Wait)
}

// FakeGPU is one fake GPU's readings. Change them through Fake.Update.
type FakeGPU struct {
	BusID        string // as NVML prints it, e.g. "00000000:1B:00.0"
	UUID, Name   string
	Util         uint32 // percent
	MemUtil      uint32
	PowerMW      uint32
	PowerLimitMW uint32
	SMClockMHz   uint32
	SMMaxMHz     uint32
	TempC        uint32
	ClockEvents  uint64
	ECCCorrected uint64
	ECCUncorr    uint64
	PCIeReplays  uint64
	// NVLinks holds the error counters of each active link; nil means no NVLink.
	NVLinks []FakeLink
	// Procs are the processes with a compute context on the GPU (none by default).
	Procs []ComputeProcess
	// Events is the mask of supported event types.
	Events uint64
	// Errors makes a reading fail, keyed by its snapshot JSON name ("util", "pw",
	// "pwmax", "sm", "smmax", "temp", "ce", "sbe", "dbe", "nvlerr", "pcierep", "bus",
	// "uuid", "name", "events", "procs").
	Errors map[string]error
	// Lost makes every call fail with ErrGPULost, as after XID 79.
	Lost bool
}

// FakeLink is one NVLink's data-link error counters.
type FakeLink struct{ CRCFlit, Replay, Recovery uint64 }

// NewFake returns a fake node of n idle H200s with buses 0x18, 0x2a, 0x3a, ... and 18
// error-free NVLinks each.
func NewFake(n int) *Fake {
	f := &Fake{}
	buses := []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}
	for i := 0; i < n; i++ {
		bus := 0x100 + i
		if i < len(buses) {
			bus = buses[i]
		}
		f.gpus = append(f.gpus, &FakeGPU{
			BusID:        fmt.Sprintf("00000000:%02X:00.0", bus),
			UUID:         fmt.Sprintf("GPU-fa4e0000-0000-0000-0000-%012x", i),
			Name:         "NVIDIA H200",
			PowerMW:      81_000,
			PowerLimitMW: 700_000,
			SMClockMHz:   1980,
			SMMaxMHz:     1980,
			TempC:        32,
			NVLinks:      make([]FakeLink, 18),
			Events:       EventXID | EventSingleBitECC | EventDoubleBitECC,
		})
	}
	return f
}

// SetInitError makes Init (or DeviceCount, when count is true) fail with err, e.g. a
// wrapped ErrLibraryNotFound to act out a node without a driver.
func (f *Fake) SetInitError(err error, count bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if count {
		f.countErr = err
	} else {
		f.initErr = err
	}
}

// Update changes GPU i's readings under the fake's lock.
func (f *Fake) Update(i int, change func(g *FakeGPU)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f.gpus[i])
}

// Fail makes readings of GPU i fail with err (ErrNotSupported for "not supported");
// a nil err clears them.
func (f *Fake) Fail(i int, err error, readings ...string) {
	f.Update(i, func(g *FakeGPU) {
		if g.Errors == nil {
			g.Errors = map[string]error{}
		}
		for _, r := range readings {
			if err == nil {
				delete(g.Errors, r)
			} else {
				g.Errors[r] = err
			}
		}
	})
}

// SetProcesses sets the processes with a compute context on GPU i.
func (f *Fake) SetProcesses(i int, procs ...ComputeProcess) {
	f.Update(i, func(g *FakeGPU) { g.Procs = append([]ComputeProcess(nil), procs...) })
}

// InjectXID delivers an XID event of GPU i to every event set it is registered with.
func (f *Fake) InjectXID(i, code int) { f.inject(i, EventXID, uint64(code)) }

// InjectECC delivers a single- or double-bit ECC event of GPU i and counts it in the
// GPU's volatile counters, as the driver does.
func (f *Fake) InjectECC(i int, double bool) {
	typ := EventSingleBitECC
	f.Update(i, func(g *FakeGPU) {
		if double {
			g.ECCUncorr++
		} else {
			g.ECCCorrected++
		}
	})
	if double {
		typ = EventDoubleBitECC
	}
	f.inject(i, typ, 0)
}

func (f *Fake) inject(i int, typ, data uint64) {
	f.mu.Lock()
	sets := append([]*fakeEventSet(nil), f.sets...)
	f.mu.Unlock()
	for _, s := range sets {
		s.deliver(i, typ, data)
	}
}

// Calls reports how often Init and Shutdown were called.
func (f *Fake) Calls() (inits, shutdowns int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inits, f.shutdowns
}

// Misuse lists contract violations the fake saw: Shutdown without Init, Free while a
// Wait was in progress, calls after Free. Tests expect it empty.
func (f *Fake) Misuse() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.misuse...)
}

func (f *Fake) misused(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.misuse) < 100 {
		f.misuse = append(f.misuse, fmt.Sprintf(format, args...))
	}
}

func (f *Fake) Init() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.initErr != nil {
		return f.initErr
	}
	f.inits++
	return nil
}

func (f *Fake) Shutdown() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inits <= f.shutdowns {
		f.misuse = append(f.misuse, "Shutdown without Init")
	}
	f.shutdowns++
	return nil
}

func (f *Fake) DeviceCount() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.countErr != nil {
		return 0, f.countErr
	}
	return len(f.gpus), nil
}

func (f *Fake) Device(index int) (Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if index < 0 || index >= len(f.gpus) {
		return nil, fmt.Errorf("device %d handle: %w", index, ErrInvalidArgument)
	}
	if f.gpus[index].Lost {
		return nil, fmt.Errorf("device %d handle: %w", index, ErrGPULost)
	}
	return &fakeDevice{f: f, i: index}, nil
}

func (f *Fake) NewEventSet() (EventSet, error) {
	s := &fakeEventSet{f: f, ch: make(chan Event, 256), mask: map[int]uint64{}}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, s)
	return s, nil
}

type fakeDevice struct {
	f *Fake
	i int
}

// get reads GPU state under the lock, failing as scripted.
func (d *fakeDevice) get(reading string, read func(g *FakeGPU) uint64) (uint64, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	g := d.f.gpus[d.i]
	if g.Lost {
		return 0, fmt.Errorf("%s: %w", reading, ErrGPULost)
	}
	if err := g.Errors[reading]; err != nil {
		return 0, fmt.Errorf("%s: %w", reading, err)
	}
	return read(g), nil
}

func (d *fakeDevice) str(reading string, read func(g *FakeGPU) string) (string, error) {
	var s string
	_, err := d.get(reading, func(g *FakeGPU) uint64 { s = read(g); return 0 })
	return s, err
}

func (d *fakeDevice) u32(reading string, read func(g *FakeGPU) uint32) (uint32, error) {
	v, err := d.get(reading, func(g *FakeGPU) uint64 { return uint64(read(g)) })
	return uint32(v), err
}

func (d *fakeDevice) PCIBusID() (string, error) {
	return d.str("bus", func(g *FakeGPU) string { return g.BusID })
}
func (d *fakeDevice) UUID() (string, error) {
	return d.str("uuid", func(g *FakeGPU) string { return g.UUID })
}
func (d *fakeDevice) Name() (string, error) {
	return d.str("name", func(g *FakeGPU) string { return g.Name })
}
func (d *fakeDevice) Utilization() (uint32, uint32, error) {
	var mem uint32
	u, err := d.u32("util", func(g *FakeGPU) uint32 { mem = g.MemUtil; return g.Util })
	return u, mem, err
}
func (d *fakeDevice) PowerUsage() (uint32, error) {
	return d.u32("pw", func(g *FakeGPU) uint32 { return g.PowerMW })
}
func (d *fakeDevice) EnforcedPowerLimit() (uint32, error) {
	return d.u32("pwmax", func(g *FakeGPU) uint32 { return g.PowerLimitMW })
}
func (d *fakeDevice) SMClock() (uint32, error) {
	return d.u32("sm", func(g *FakeGPU) uint32 { return g.SMClockMHz })
}
func (d *fakeDevice) MaxSMClock() (uint32, error) {
	return d.u32("smmax", func(g *FakeGPU) uint32 { return g.SMMaxMHz })
}
func (d *fakeDevice) Temperature() (uint32, error) {
	return d.u32("temp", func(g *FakeGPU) uint32 { return g.TempC })
}
func (d *fakeDevice) ClockEventReasons() (uint64, error) {
	return d.get("ce", func(g *FakeGPU) uint64 { return g.ClockEvents })
}
func (d *fakeDevice) ECCErrors(uncorrected bool) (uint64, error) {
	if uncorrected {
		return d.get("dbe", func(g *FakeGPU) uint64 { return g.ECCUncorr })
	}
	return d.get("sbe", func(g *FakeGPU) uint64 { return g.ECCCorrected })
}
func (d *fakeDevice) PCIeReplays() (uint64, error) {
	return d.get("pcierep", func(g *FakeGPU) uint64 { return g.PCIeReplays })
}
func (d *fakeDevice) SupportedEvents() (uint64, error) {
	return d.get("events", func(g *FakeGPU) uint64 { return g.Events })
}

func (d *fakeDevice) ComputeProcesses() ([]ComputeProcess, error) {
	var out []ComputeProcess
	_, err := d.get("procs", func(g *FakeGPU) uint64 {
		out = append(make([]ComputeProcess, 0, len(g.Procs)), g.Procs...)
		return 0
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (d *fakeDevice) NVLinkActive(link int) (bool, error) {
	var active bool
	_, err := d.get("nvlerr", func(g *FakeGPU) uint64 { active = link < len(g.NVLinks); return 0 })
	if err == nil && link >= MaxNVLinks {
		err = fmt.Errorf("nvlink state: %w", ErrInvalidArgument)
	}
	if err == nil && !active {
		err = fmt.Errorf("nvlink state: %w", ErrNotSupported)
	}
	return active, err
}

func (d *fakeDevice) NVLinkErrorCounter(link int, c NVLinkCounter) (uint64, error) {
	valid := true
	v, err := d.get("nvlerr", func(g *FakeGPU) uint64 {
		if link < 0 || link >= len(g.NVLinks) {
			valid = false
			return 0
		}
		l := g.NVLinks[link]
		switch c {
		case NVLinkCRCFlit:
			return l.CRCFlit
		case NVLinkReplay:
			return l.Replay
		case NVLinkRecovery:
			return l.Recovery
		}
		valid = false
		return 0
	})
	if err == nil && !valid {
		err = fmt.Errorf("nvlink error counter: %w", ErrInvalidArgument)
	}
	return v, err
}

func (d *fakeDevice) RegisterEvents(set EventSet, index int, mask uint64) error {
	s, ok := set.(*fakeEventSet)
	if !ok {
		return fmt.Errorf("register events: event set %T is not from this fake", set)
	}
	supported, err := d.SupportedEvents()
	if err != nil {
		return err
	}
	if mask&^supported != 0 {
		return fmt.Errorf("register events %#x: %w", mask, ErrNotSupported)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		d.f.misused("RegisterEvents on a freed event set")
	}
	s.mask[d.i] = mask
	s.index = append(s.index, [2]int{d.i, index})
	return nil
}

type fakeEventSet struct {
	f  *Fake
	ch chan Event

	mu      sync.Mutex
	mask    map[int]uint64 // GPU -> registered event types
	index   [][2]int       // GPU -> index given at registration
	waiting int
	freed   bool
	dropped int
}

func (s *fakeEventSet) deliver(gpu int, typ, data uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed || s.mask[gpu]&typ == 0 {
		return
	}
	idx := -1
	for _, p := range s.index {
		if p[0] == gpu {
			idx = p[1]
		}
	}
	select {
	case s.ch <- Event{Index: idx, Type: typ, Data: data}:
	default:
		s.dropped++ // as NVML, a full queue loses events
	}
}

func (s *fakeEventSet) Wait(timeout time.Duration) (Event, error) {
	s.mu.Lock()
	if s.freed {
		s.mu.Unlock()
		s.f.misused("Wait on a freed event set")
		return Event{}, errors.New("event wait: set freed")
	}
	s.waiting++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.waiting--
		s.mu.Unlock()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ev := <-s.ch:
		return ev, nil
	case <-t.C:
		return Event{}, fmt.Errorf("event wait: %w", ErrTimeout)
	}
}

func (s *fakeEventSet) Free() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting > 0 {
		s.f.misused("Free while Wait is in progress")
	}
	if s.freed {
		s.f.misused("Free twice")
	}
	s.freed = true
	return nil
}
