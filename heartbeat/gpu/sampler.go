// Package gpu samples the node's GPUs through NVML for the sidecar: utilization, power,
// clocks and their throttle reasons, ECC, NVLink and PCIe error counters, and XID events,
// as snapshot.GPU values with a derived state (computing, waiting in a collective, idle),
// and the processes computing on each GPU (a GPU shared with another job is a slow GPU).
//
// NVML is reached through Library, a narrow interface of our own: the real one wraps
// go-nvml and exists only in cgo builds; Fake scripts GPUs for tests and the simulator.
// Where there is no driver, Open fails with ErrNoNVML and the sidecar runs without GPUs.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Options configures a Sampler; the zero value works.
type Options struct {
	Logger *slog.Logger
	// Now stamps samples and XIDs; time.Now when nil.
	Now func() time.Time
	// XIDHistory is how many recent XIDs each GPU keeps (16 when <= 0, at most 256).
	XIDHistory int
	// EventPoll is the longest single wait for an NVML event, which bounds how long
	// Close and a cancelled context take to stop the watcher (500 ms when <= 0).
	EventPoll time.Duration
	// Window is the state smoothing window (DefaultWindow when <= 0).
	Window time.Duration
	// ProcRoot is where the names of the GPUs' processes are looked up, as
	// <ProcRoot>/<pid>/comm ("/proc" when empty).
	ProcRoot string
}

// Sampler reads all GPUs of one node. Sample is called by the sidecar's loop (about once
// a second); XID and ECC events are collected in between by a goroutine of its own.
type Sampler struct {
	lib      Library
	log      *slog.Logger
	now      func() time.Time
	procRoot string
	devs     []*device
	smoother *Smoother

	sampleMu sync.Mutex // serialises Sample (device caches, smoother)

	mu        sync.Mutex // guards the fields below, shared with the watcher
	closed    bool
	strayXIDs int // XIDs that named no known GPU

	set    EventSet
	cancel context.CancelFunc
	done   chan struct{} // closed when the watcher has returned; nil without watcher
	close  sync.Once
}

// device is one GPU and what the sampler remembers about it.
type device struct {
	index  int
	handle Device

	// Static readings, fetched until they succeed.
	busID, uuid, name string
	smMax             int
	links             []int // active NVLinks, probed once
	linksProbed       bool

	unsupported map[string]bool // reading -> NVML said not supported
	warned      map[string]bool // reading -> a failure was logged

	// Guarded by Sampler.mu.
	xids                 []snapshot.XID // ring, oldest first
	sbeEvents, dbeEvents uint64
}

// NewWithLibrary starts a sampler over lib, for tests and the simulator (see Fake). Its
// event watcher runs until Close.
func NewWithLibrary(lib Library, opts Options) (*Sampler, error) {
	return newSampler(context.Background(), lib, opts)
}

func newSampler(ctx context.Context, lib Library, opts Options) (*Sampler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.XIDHistory <= 0 {
		opts.XIDHistory = 16
	}
	opts.XIDHistory = min(opts.XIDHistory, 256)
	if opts.EventPoll <= 0 {
		opts.EventPoll = 500 * time.Millisecond
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if err := lib.Init(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoNVML, err)
	}
	n, err := lib.DeviceCount()
	if err != nil {
		_ = lib.Shutdown()
		return nil, fmt.Errorf("%w: %w", ErrNoNVML, err)
	}
	s := &Sampler{
		lib:      lib,
		log:      opts.Logger,
		now:      opts.Now,
		procRoot: opts.ProcRoot,
		smoother: NewSmoother(opts.Window, 0),
	}
	for i := 0; i < n; i++ {
		d := &device{index: i, unsupported: map[string]bool{}, warned: map[string]bool{},
			xids: make([]snapshot.XID, 0, opts.XIDHistory)}
		if h, err := lib.Device(i); err != nil {
			s.log.Warn("nvml: no handle for GPU", "gpu", i, "err", err)
		} else {
			d.handle = h
			s.readStatic(d)
		}
		s.devs = append(s.devs, d)
	}
	s.startWatcher(ctx, opts)
	s.log.Info("nvml: sampling GPUs", "count", n)
	return s, nil
}

// Close stops the event watcher and releases NVML. Safe to call more than once.
func (s *Sampler) Close() error {
	var err error
	s.close.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
		s.sampleMu.Lock()
		defer s.sampleMu.Unlock()
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		if s.set != nil {
			err = errors.Join(err, s.set.Free())
		}
		err = errors.Join(err, s.lib.Shutdown())
	})
	return err
}

// Sample reads every GPU once. A GPU that cannot be read comes back with Err set and the
// rest of the node still sampled; only a cancelled context or a closed sampler fail it.
func (s *Sampler) Sample(ctx context.Context) ([]snapshot.GPU, error) {
	s.sampleMu.Lock()
	defer s.sampleMu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	now := s.now()
	out := make([]snapshot.GPU, 0, len(s.devs))
	for _, d := range s.devs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g := s.read(d, now)
		s.addEvents(d, &g)
		if g.Err != "" {
			s.smoother.Forget(d.index)
		} else {
			g.State = s.smoother.Observe(g)
		}
		out = append(out, g)
	}
	return out, nil
}

// Unsupported lists, by JSON name, the readings NVML reported not supported on a GPU so
// far (for nvml-probe and the sidecar's start-up log).
func (s *Sampler) Unsupported(index int) []string {
	s.sampleMu.Lock()
	defer s.sampleMu.Unlock()
	if index < 0 || index >= len(s.devs) {
		return nil
	}
	var out []string
	for _, f := range []string{"bus", "uuid", "name", "util", "memutil", "pw", "pwmax", "sm", "smmax",
		"temp", "ce", "sbe", "dbe", "nvlerr", "pcierep", "procs", "xids"} {
		if s.devs[index].unsupported[f] {
			out = append(out, f)
		}
	}
	return out
}

// readStatic fetches the readings that do not change while the driver is loaded.
func (s *Sampler) readStatic(d *device) {
	h := d.handle
	if d.busID == "" && !d.unsupported["bus"] {
		if raw, err := h.PCIBusID(); s.ok(d, "bus", err) {
			if packed, err := PackBusID(raw); err != nil {
				s.warnOnce(d, "bus", err)
			} else {
				d.busID = packed
			}
		}
	}
	if d.uuid == "" && !d.unsupported["uuid"] {
		if v, err := h.UUID(); s.ok(d, "uuid", err) {
			d.uuid = v
		}
	}
	if d.name == "" && !d.unsupported["name"] {
		if v, err := h.Name(); s.ok(d, "name", err) {
			d.name = v
		}
	}
	if d.smMax == 0 && !d.unsupported["smmax"] {
		if v, err := h.MaxSMClock(); s.ok(d, "smmax", err) {
			d.smMax = int(v)
		}
	}
}

// read takes one sample of one GPU. Readings that fail are listed in Missing; a lost GPU
// stops the sample there, since every further call would fail slowly.
func (s *Sampler) read(d *device, now time.Time) snapshot.GPU {
	g := snapshot.GPU{Index: d.index, T: snapshot.MicrosOf(now)}
	if d.handle == nil {
		h, err := s.lib.Device(d.index)
		if err != nil {
			g.Err = errText(err)
			return g
		}
		d.handle = h
	}
	s.readStatic(d)
	h := d.handle
	g.BusID, g.UUID, g.Name, g.SMMaxMHz = d.busID, d.uuid, d.name, d.smMax
	missing := func(fields ...string) { g.Missing = append(g.Missing, fields...) }
	if d.busID == "" {
		missing("bus")
	}
	if d.uuid == "" {
		missing("uuid")
	}
	if d.name == "" {
		missing("name")
	}
	if d.smMax == 0 {
		missing("smmax")
	}

	var lost error
	check := func(field string, err error) bool {
		if err == nil {
			return true
		}
		if errors.Is(err, ErrGPULost) {
			lost = err
		}
		s.ok(d, field, err)
		return false
	}
	if u, m, err := h.Utilization(); check("util", err) {
		g.Util, g.MemUtil = int(u), int(m)
	} else {
		missing("util", "memutil")
	}
	if lost != nil {
		g.Err, g.Missing = errText(lost), nil
		return g
	}
	if v, err := h.PowerUsage(); check("pw", err) {
		g.PowerW = float64(v) / 1000
	} else {
		missing("pw")
	}
	if v, err := h.EnforcedPowerLimit(); check("pwmax", err) {
		g.PowerLimitW = float64(v) / 1000
	} else {
		missing("pwmax")
	}
	if v, err := h.SMClock(); check("sm", err) {
		g.SMClockMHz = int(v)
	} else {
		missing("sm")
	}
	if v, err := h.Temperature(); check("temp", err) {
		g.TempC = int(v)
	} else {
		missing("temp")
	}
	if v, err := h.ClockEventReasons(); check("ce", err) {
		g.ClockEvents, g.Reasons = v, Reasons(v)
	} else {
		missing("ce")
	}
	if v, err := h.ComputeProcesses(); check("procs", err) {
		g.Procs = s.gpuProcs(v)
	} else {
		missing("procs") // unknown, which an empty list must not be taken for
	}
	sbeErr, dbeErr := error(nil), error(nil)
	if v, err := h.ECCErrors(false); check("sbe", err) {
		g.ECCVolatileSBE = v
	} else {
		sbeErr = err
	}
	if v, err := h.ECCErrors(true); check("dbe", err) {
		g.ECCVolatileDBE = v
	} else {
		dbeErr = err
	}
	if v, err := h.PCIeReplays(); check("pcierep", err) {
		g.PCIeReplays = v
	} else {
		missing("pcierep")
	}
	if lost == nil {
		if v, ok := s.nvlinkErrors(d, &lost); ok {
			g.NVLinkErrors = v
		} else {
			missing("nvlerr")
		}
	}
	if lost != nil {
		g.Err, g.Missing = errText(lost), nil
		return g
	}
	// Where the ECC counters are missing, events counted since start stand in for them
	// (see addEvents); mark them missing only if there is nothing at all.
	s.mu.Lock()
	sbeEv, dbeEv := d.sbeEvents, d.dbeEvents
	s.mu.Unlock()
	if sbeErr != nil {
		g.ECCVolatileSBE = sbeEv
		if sbeEv == 0 {
			missing("sbe")
		}
	}
	if dbeErr != nil {
		g.ECCVolatileDBE = dbeEv
		if dbeEv == 0 {
			missing("dbe")
		}
	}
	return g
}

// nvlinkErrors sums the CRC-flit, replay and recovery counters over the active links.
// ok is false when no link gives any counter.
func (s *Sampler) nvlinkErrors(d *device, lost *error) (sum uint64, ok bool) {
	if d.unsupported["nvlerr"] {
		return 0, false
	}
	if !d.linksProbed {
		d.linksProbed = true
		for link := 0; link < MaxNVLinks; link++ {
			active, err := d.handle.NVLinkActive(link)
			if errors.Is(err, ErrGPULost) {
				*lost = err
				d.linksProbed = false
				return 0, false
			}
			if err == nil && active {
				d.links = append(d.links, link)
			} else if err != nil && !unsupported(err) {
				s.warnOnce(d, "nvlerr", err)
			}
		}
		if len(d.links) == 0 {
			d.unsupported["nvlerr"] = true
			return 0, false
		}
	}
	read := 0
	for _, link := range d.links {
		for _, c := range []NVLinkCounter{NVLinkCRCFlit, NVLinkReplay, NVLinkRecovery} {
			v, err := d.handle.NVLinkErrorCounter(link, c)
			if err != nil {
				if errors.Is(err, ErrGPULost) {
					*lost = err
					return 0, false
				}
				if !unsupported(err) {
					s.warnOnce(d, "nvlerr", err)
				}
				continue
			}
			sum += v
			read++
		}
	}
	if read == 0 {
		d.unsupported["nvlerr"] = true // links up, but no counter readable: stop asking
		return 0, false
	}
	return sum, true
}

// ok records a failed reading (not supported, or logged once) and reports success.
func (s *Sampler) ok(d *device, field string, err error) bool {
	if err == nil {
		return true
	}
	if unsupported(err) {
		d.unsupported[field] = true
		return false
	}
	s.warnOnce(d, field, err)
	return false
}

func (s *Sampler) warnOnce(d *device, field string, err error) {
	if d.warned[field] {
		return
	}
	d.warned[field] = true
	s.log.Warn("nvml: reading failed (logged once per GPU and reading)", "gpu", d.index, "reading", field, "err", err)
}

// addEvents copies the GPU's recent XIDs into the sample.
func (s *Sampler) addEvents(d *device, g *snapshot.GPU) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(d.xids) > 0 {
		g.XIDs = append([]snapshot.XID(nil), d.xids...)
	}
}

func errText(err error) string {
	switch {
	case errors.Is(err, ErrGPULost):
		return ErrGPULost.Error()
	case errors.Is(err, ErrNotSupported):
		return ErrNotSupported.Error()
	}
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// startWatcher registers every GPU for XID and ECC events and starts the goroutine that
// waits for them. GPUs (or drivers) without events are logged once and skipped.
func (s *Sampler) startWatcher(ctx context.Context, opts Options) {
	set, err := s.lib.NewEventSet()
	if err != nil {
		s.log.Warn("nvml: no event set, XIDs will not be seen", "err", err)
		return
	}
	registered := 0
	for _, d := range s.devs {
		if d.handle == nil {
			continue
		}
		mask := EventXID | EventSingleBitECC | EventDoubleBitECC
		if supported, err := d.handle.SupportedEvents(); err == nil {
			mask &= supported
		}
		if mask == 0 {
			d.unsupported["xids"] = true
			continue
		}
		if err := d.handle.RegisterEvents(set, d.index, mask); err != nil {
			if unsupported(err) {
				d.unsupported["xids"] = true
			} else {
				s.log.Warn("nvml: cannot register GPU for XID/ECC events", "gpu", d.index, "err", err)
			}
			continue
		}
		registered++
	}
	if registered == 0 {
		if err := set.Free(); err != nil {
			s.log.Warn("nvml: free event set", "err", err)
		}
		return
	}
	s.set = set
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go s.watch(ctx, set, opts.EventPoll, opts.XIDHistory)
}

// watch waits for events until ctx ends. Errors other than a timeout back off (up to
// 5 s) so a lost GPU does not spin the loop; each kind of error is logged once.
func (s *Sampler) watch(ctx context.Context, set EventSet, poll time.Duration, history int) {
	defer close(s.done)
	logged := map[string]bool{}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		ev, err := set.Wait(poll)
		if err == nil {
			backoff = 0
			s.record(ev, history)
			continue
		}
		if errors.Is(err, ErrTimeout) {
			continue
		}
		if msg := err.Error(); !logged[msg] && len(logged) < 32 {
			logged[msg] = true
			s.log.Warn("nvml: waiting for events failed; retrying", "err", err)
		}
		backoff = min(max(2*backoff, poll), 5*time.Second)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// record files one event under its GPU.
func (s *Sampler) record(ev Event, history int) {
	now := snapshot.MicrosOf(s.now())
	var d *device
	if ev.Index >= 0 && ev.Index < len(s.devs) {
		d = s.devs[ev.Index]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d == nil {
		if ev.Type&EventXID != 0 {
			s.strayXIDs++
			if s.strayXIDs <= 8 {
				text, _ := snapshot.XIDMeaning(int(ev.Data))
				s.log.Warn("nvml: XID for an unknown GPU", "xid", ev.Data, "meaning", text, "gpu", ev.Index)
			}
		}
		return
	}
	switch {
	case ev.Type&EventXID != 0:
		x := snapshot.XID{Code: int(ev.Data), T: now}
		if len(d.xids) >= history {
			copy(d.xids, d.xids[1:])
			d.xids[len(d.xids)-1] = x
		} else {
			d.xids = append(d.xids, x)
		}
		text, severe := snapshot.XIDMeaning(x.Code)
		s.log.Warn("nvml: XID", "gpu", d.index, "xid", x.Code, "meaning", text, "severe", severe)
	case ev.Type&EventDoubleBitECC != 0:
		d.dbeEvents++
		s.log.Warn("nvml: double-bit ECC error event", "gpu", d.index)
	case ev.Type&EventSingleBitECC != 0:
		d.sbeEvents++
	}
}
