package jobsim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/logparse"
)

type evKind uint8

const (
	evLine   evKind = iota // an INFO line: text
	evWarn                 // a WARN line: text at site
	evOp                   // op arg of the rank's step, altered by fault
	evGPU                  // the rank's GPU enters state arg
	evInject               // fault happens
	evPorts                // the node of the rank counts a step of traffic (real time)
)

type event struct {
	t     int64 // ns from the job's start
	text  string
	site  string
	fault *resolvedFault
	rank  int32
	arg   int32
	tid   int16
	kind  evKind
	want  logparse.Kind
}

// byTime orders events by their time; sorts that use it are stable, so ties keep the order
// in which they were generated.
func byTime(a, b event) int { return cmp.Compare(a.t, b.t) }

// Phases of the job: init, each step that runs, and the clean end.
const phaseInit = -1

func (s *Sim) phases() []int {
	ph := []int{phaseInit}
	for st := 0; st <= s.sched.last; st++ {
		ph = append(ph, st)
	}
	if s.sched.hangStep < 0 {
		ph = append(ph, s.sched.last+1)
	}
	return ph
}

// phaseEvents appends a rank's events of one phase, in time order.
func (s *Sim) phaseEvents(r *simRank, phase int, evs []event, live bool) []event {
	from := len(evs)
	switch {
	case phase == phaseInit:
		evs = s.initEvents(r, evs)
	case phase > s.sched.last:
		evs = s.endEvents(r, evs)
	default:
		evs = s.stepEvents(r, phase, evs, live)
	}
	slices.SortStableFunc(evs[from:], byTime)
	return evs
}

// initEvents: the process starts, finds its network, creates the world communicator and
// splits it, as PyTorch does with eager init and torch.distributed.split_group.
func (s *Sim) initEvents(r *simRank, evs []event) []event {
	sc := &s.sched
	d := s.d
	rk := int32(r.Rank)
	t := int64(s.unit(purposeStart, uint64(r.Rank)) * 0.05 * float64(sc.initDur))
	add := func(tid int, want logparse.Kind, text string) {
		evs = append(evs, event{t: t, text: text, rank: rk, tid: int16(tid), want: want})
		t += sc.gap
	}
	at := func(frac float64) {
		t = max(t, int64(frac*float64(sc.initDur))+int64(s.unit(purposeStart, uint64(r.Rank), uint64(frac*1000))*0.01*float64(sc.initDur)))
	}
	add(0, logparse.KindBootstrap, d.bootstrapLine()+"ib0:"+r.node.Addr+"<0>")
	add(0, logparse.KindInfo, "cudaDriverVersion "+d.cudaDriver())
	add(0, logparse.KindVersion, "NCCL version "+d.String()+"+cuda"+d.cuda())
	if d.ge(29, 0) {
		add(0, logparse.KindInfo, "NCCL git version master 7b0d2e4")
	}
	add(0, logparse.KindInfo, "NCCL_SOCKET_IFNAME set by environment to ib0")
	add(0, logparse.KindInfo, "NCCL_IB_HCA set by environment to mlx5")
	for _, l := range d.pluginLines() {
		add(0, logparse.KindInfo, l)
	}
	add(0, logparse.KindNetIBDevices, s.ibDeviceList(r))
	if d.ge(28, 0) {
		add(0, logparse.KindInfo, "Initialized NET plugin IB")
		add(0, logparse.KindInfo, "Assigned NET plugin IB to comm")
	}
	add(0, logparse.KindUsingNetwork, "Using network IB")
	marks := [numComms][2]float64{{0.20, 0.40}, {0.45, 0.55}, {0.60, 0.70}, {0.75, 0.85}}
	for k := CommWorld; k < numComms; k++ {
		c := r.comms[k]
		if c == nil {
			continue
		}
		at(marks[k][0])
		add(0, logparse.KindInit, s.initLine(r, c, true))
		if k == CommWorld {
			add(0, logparse.KindInfo, fmt.Sprintf("Setting affinity for GPU %d to %s", r.CudaDev, cpuMask(r.LocalRank)))
		}
		if d.commInfo() {
			add(0, logparse.KindCommInfo, fmt.Sprintf("comm 0x%x rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL 0",
				c.ptr, c.rank, len(c.g.members), c.g.nNodes, c.localRanks, c.localRank))
		}
		if c.rank == 0 {
			for ch := 0; ch < ringChannels; ch++ {
				add(0, logparse.KindRing, ringDump(ch, len(c.g.members)))
			}
		}
		add(0, logparse.KindInfo, treesLine(c))
		add(0, logparse.KindInfo, "P2P Chunksize set to 131072")
		if !d.lazyConnect() {
			for _, l := range s.ringLines(r, k) {
				add(l.tid, logparse.KindChannel, l.text)
			}
			add(0, logparse.KindInfo, d.connectedRings())
		}
		add(0, logparse.KindInfo, "threadThresholds 8/8/64 | 256/8/64 | 512 | 512")
		add(0, logparse.KindInfo, d.channelsLine())
		if d.ge(24, 0) {
			add(0, logparse.KindInfo, "CC Off, workFifoBytes 1048576")
		}
		at(marks[k][1])
		add(0, logparse.KindInit, s.initLine(r, c, false))
		api := d.initAPI(k != CommWorld)
		if api == "" {
			api = "ncclCommInitRank"
		}
		if l := d.initTimings(api, c.rank, len(c.g.members)); l != "" {
			add(0, logparse.KindInfo, l)
		}
	}
	return evs
}

// cpuMask is NCCL's affinity mask of the CPU socket of a GPU (GPUs 0-3 on socket 0).
func cpuMask(local int) string {
	if local < 4 {
		return "ffffffff,00000000,ffffffff"
	}
	return "ffffffff,00000000,ffffffff,00000000"
}

// stepEvents: the rank's ops of one step, the faults that strike it, its GPU's state.
func (s *Sim) stepEvents(r *simRank, step int, evs []event, live bool) []event {
	sc := &s.sched
	rk := int32(r.Rank)
	stop := len(r.plan)
	skip := -1
	var mods map[int]*resolvedFault
	inject := func(t int64, f *resolvedFault) {
		evs = append(evs, event{t: t, kind: evInject, fault: f, rank: rk})
	}
	gpuAt := func(t int64, st gpuState) {
		evs = append(evs, event{t: t, kind: evGPU, arg: int32(st), rank: rk})
	}
	start := sc.start[step]
	var culprit *resolvedFault // a silent or crashed rank: its GPU idles when it stops
	if p := sc.pause[step]; p > 0 {
		gpuAt(start-p, gpuIdle)
	}
	for _, f := range sc.byStep[step] {
		mine := f.rank == r
		switch f.Kind {
		case FaultSilent, FaultCrash:
			if mine {
				stop = min(stop, f.op)
				culprit = f
				inject(s.opTime(r, step, f.op), f)
			} else if f.Kind == FaultCrash && f.rank.node == r.node {
				// The proxy service thread of each communicator the peer shares with the dead
				// rank on the node (world and tensor parallel: one per communicator, as
				// ncclCommSplit does not share proxies by default) sees its socket close.
				t := s.opTime(f.rank, step, f.op) + int64(time.Millisecond) + int64(r.LocalRank)*37_000
				for k, c := range r.comms {
					if c == nil || c.localRanks < 2 || f.rank.comms[k] == nil || f.rank.comms[k].g != c.g {
						continue
					}
					evs = append(evs, event{t: t, rank: rk, tid: int16(tidService + 4*k), want: logparse.KindConnClosedLocal,
						text: "[Service thread] Connection closed by localRank " + strconv.Itoa(f.rank.comms[k].localRank)})
					t += 20_000
				}
			}
		case FaultSkip:
			if mine {
				skip = f.op
				inject(s.opTime(r, step, f.op), f)
			}
		case FaultWrongOp, FaultWrongSize, FaultWrongDtype:
			if mine {
				if mods == nil {
					mods = map[int]*resolvedFault{}
				}
				mods[f.op] = f
				inject(s.opTime(r, step, f.op), f)
			}
		case FaultStuck:
			if mine {
				inject(s.opTime(r, step, len(r.plan)-1), f)
			}
		case FaultStraggler, FaultXID:
			if mine {
				inject(start, f)
			}
		case FaultPause:
			if mine {
				inject(start-sc.pause[step], f)
			}
		case FaultIBPort:
			if mine {
				inject(start, f)
			}
			if f.Warn && f.rank.node == r.node && r.hca == f.hca {
				t := start + 2*int64(time.Millisecond) + int64(r.LocalRank)*11_000
				hca := "mlx5_" + strconv.Itoa(f.hca)
				if f.Down {
					evs = append(evs, event{t: t, kind: evWarn, rank: rk, tid: tidIBAsync, site: s.d.ibWarnSite(true),
						want: logparse.KindIBAsync, text: s.d.ibPortError(hca)})
					t += 1000
				}
				evs = append(evs, event{t: t, kind: evWarn, rank: rk, tid: tidProgress, site: s.d.ibWarnSite(false),
					want: logparse.KindIBCompletion, text: s.d.ibCompletion(s.ibPeer(r), hca)})
			}
		}
	}
	if live {
		gpuAt(start+s.lag(r, step), gpuComputing)
	}
	var last int64 = start
	for k := 0; k < stop; k++ {
		if k == skip {
			continue
		}
		t := s.opTime(r, step, k)
		evs = append(evs, event{t: t, kind: evOp, arg: int32(k), fault: mods[k], rank: rk})
		last = t
	}
	switch {
	case culprit != nil:
		gpuAt(s.opTime(r, step, culprit.op), gpuIdle)
	case step == sc.hangStep:
		gpuAt(last+1000, gpuWaiting) // in a collective that never completes
	case live:
		gpuAt(last+1000, gpuWaiting) // the step's last collective: waits for the slowest rank
	}
	if live && r.node.ranks[0] == r && step != sc.hangStep {
		evs = append(evs, event{t: start + sc.dur[step] - 1000, kind: evPorts, rank: rk})
	}
	return evs
}

// endEvents: the job ends cleanly; each rank destroys its communicators, children first.
func (s *Sim) endEvents(r *simRank, evs []event) []event {
	gap := min(max(int64(s.cfg.StepTime)/10, int64(time.Millisecond)), int64(300*time.Millisecond))
	t := s.sched.end + int64(s.unit(purposeStart, uint64(r.Rank), 99)*float64(gap))
	rk := int32(r.Rank)
	for k := numComms - 1; k >= CommWorld; k-- {
		if c := r.comms[k]; c != nil && s.d.destroyVisible() {
			evs = append(evs, event{t: t, rank: rk, want: logparse.KindDestroy, text: s.destroyLine(r, c)})
			t += gap
		}
	}
	return append(evs, event{t: t, kind: evGPU, arg: int32(gpuIdle), rank: rk})
}

// dispatch carries out one event on the rank's output.
func (s *Sim) dispatch(o *rankOut, e *event, live bool) {
	switch e.kind {
	case evLine:
		o.lineTid(e.t, int(e.tid), e.want, e.text)
	case evWarn:
		o.warn(e.t, int(e.tid), e.site, e.want, e.text)
	case evOp:
		o.writeOp(e.t, int(e.arg), e.fault)
	case evGPU:
		if live {
			s.setGPU(o.r.node, o.r.LocalRank, gpuState(e.arg), uint64(e.t))
		} else {
			o.gpu, o.gpuAt, o.gpuSet = gpuState(e.arg), e.t, true
		}
	case evInject:
		s.inject(o, e, live)
	case evPorts:
		s.addTraffic(o.r.node, func(*simRank) int { return 1 })
		if err := s.writeTraffic(o.r.node, false); err != nil && o.err == nil {
			o.err = err
		}
	}
}

// inject records a fault and does what it does outside the logs.
func (s *Sim) inject(o *rankOut, e *event, live bool) {
	f := e.fault
	r := f.rank
	when := time.Unix(0, s.sched.base+e.t).In(s.cfg.Location)
	if live {
		when = time.Now()
	}
	in := Injection{Kind: f.Kind, Rank: r.Rank, Host: r.Host, PID: r.PID, Step: f.Step, Time: when}
	world := r.comms[CommWorld].g.id
	switch f.Kind {
	case FaultSkip, FaultWrongOp, FaultWrongSize, FaultWrongDtype:
		op := &r.plan[f.op]
		in.Comm, in.Seq = r.comms[op.comm].g.id, s.collPosition(r, f.Step, f.op)
		in.Positions = s.positions(r, f.Step, f.op)
		in.Detail = fmt.Sprintf("op %d of the step: %s(count %d %s) on %s", f.op, op.name, op.count, dtypeName(op.dtype), op.comm)
	case FaultSilent, FaultCrash:
		in.Positions = s.positions(r, f.Step, f.op)
		in.Comm = world
		if op := &r.plan[f.op]; op.coll {
			in.Comm = r.comms[op.comm].g.id
		}
		in.Seq = in.Positions[in.Comm]
		in.Detail = fmt.Sprintf("before op %d of the step", f.op)
		if f.Kind == FaultCrash {
			s.mu.Lock()
			s.dead[r.PID] = true
			s.mu.Unlock()
			s.setGPU(r.node, r.LocalRank, gpuIdle, uint64(e.t))
		}
	case FaultStraggler:
		in.Positions = s.positions(r, f.Step, 0)
		in.Comm, in.Seq = world, in.Positions[world]
		in.Detail = "late by " + f.Delay.String() + " at every collective"
	case FaultStuck:
		in.Positions = map[string]int64{}
		for k, c := range r.comms {
			if c != nil {
				in.Positions[c.g.id] = int64(f.Step+1) * r.perStep[k]
			}
		}
		in.Comm, in.Seq = world, in.Positions[world]
		in.Detail = "every rank's last collectives of the step never complete"
	case FaultIBPort:
		hca := "mlx5_" + strconv.Itoa(f.hca)
		in.Detail = r.node.Name + " " + hca + " port 1 trained at 1X NDR (100 of 400 Gb/s)"
		if f.Down {
			in.Detail = r.node.Name + " " + hca + " port 1 DOWN"
		}
		if err := s.degradePort(r.node, f.hca, f.Down); err != nil && o.err == nil {
			o.err = err
		}
	case FaultXID:
		in.Detail = "XID " + strconv.Itoa(f.XID) + " on GPU " + strconv.Itoa(r.LocalRank) + " (bus " + r.NVMLBusID + ")"
		r.node.GPUs.InjectXID(r.LocalRank, f.XID)
	case FaultPause:
		in.Benign = true
		in.Detail = "all ranks pause for " + f.Duration.String()
	}
	s.record(in, live)
}

// Generate writes the whole job as fast as it can, timed by the fake clock from
// Config.Start. Ranks are written in parallel; each rank's file is written in order.
func (s *Sim) Generate() error {
	if err := s.begin(); err != nil {
		return err
	}
	phases := s.phases()
	next := make(chan *simRank)
	errs := make([]error, s.cfg.Workers)
	var wg sync.WaitGroup
	for w := 0; w < s.cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var evs []event
			for r := range next {
				if errs[w] != nil {
					continue
				}
				evs, errs[w] = s.generateRank(r, phases, evs)
			}
		}()
	}
	for _, r := range s.ranks {
		next <- r
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return s.finish()
}

func (s *Sim) generateRank(r *simRank, phases []int, evs []event) ([]event, error) {
	o, err := s.newOut(r)
	if err != nil {
		return evs, err
	}
	for _, ph := range phases {
		evs = s.phaseEvents(r, ph, evs[:0], false)
		for i := range evs {
			s.dispatch(o, &evs[i], false)
		}
		if o.err != nil {
			break
		}
	}
	if o.gpuSet {
		s.setGPU(r.node, r.LocalRank, o.gpu, uint64(o.gpuAt))
	}
	err = o.close()
	s.mu.Lock()
	s.stats.Lines += o.lines
	s.stats.Bytes += o.bytes
	s.stats.Files++
	s.mu.Unlock()
	return evs, err
}

// finish counts the traffic of the steps that ran and marks a clean end.
func (s *Sim) finish() error {
	sc := &s.sched
	steps := func(r *simRank) int {
		n := sc.last + 1
		for _, f := range sc.byStep[sc.last] {
			if f.rank == r && (f.Kind == FaultSilent || f.Kind == FaultCrash) {
				n--
			}
		}
		return n
	}
	var errs []error
	for _, n := range s.nodes {
		s.addTraffic(n, steps)
		errs = append(errs, s.writeTraffic(n, true))
	}
	if sc.hangStep < 0 {
		s.mu.Lock()
		s.exited = true
		s.mu.Unlock()
	}
	for _, in := range s.Injections() { // workers injected out of order: report by time
		s.report(in)
	}
	return errors.Join(errs...)
}

// Run writes the job in real time: each line when NCCL would print it, GPU readings and
// port counters as the job goes. A hung job is held (Config.Hold). It returns ctx.Err() when
// cancelled before the script is done, nil when done (cancelled while holding included).
func (s *Sim) Run(ctx context.Context) error {
	if err := s.begin(); err != nil {
		return err
	}
	base := time.Now()
	s.sched.base = base.UnixNano()
	outs := make([]*rankOut, len(s.ranks))
	count := func() {
		var st Stats
		for _, o := range outs {
			if o != nil {
				st.Lines += o.lines
				st.Bytes += o.bytes
				st.Files++
			}
		}
		s.mu.Lock()
		s.stats = st
		s.mu.Unlock()
	}
	closeAll := func() error {
		var errs []error
		for _, o := range outs {
			if o != nil {
				errs = append(errs, o.close())
			}
		}
		count()
		return errors.Join(errs...)
	}
	for i, r := range s.ranks {
		o, err := s.newOut(r)
		if err != nil {
			return errors.Join(err, closeAll())
		}
		outs[i] = o
	}
	flush := func() error {
		var errs []error
		for _, o := range outs {
			errs = append(errs, o.flush())
		}
		return errors.Join(errs...)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sleep := func(d time.Duration) error {
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return nil
		}
	}
	var evs []event
	for _, ph := range s.phases() {
		evs = evs[:0]
		for _, r := range s.ranks {
			evs = s.phaseEvents(r, ph, evs, true)
		}
		slices.SortStableFunc(evs, byTime)
		for i := 0; i < len(evs); {
			if wait := time.Until(base.Add(time.Duration(evs[i].t))); wait > 0 {
				if err := flush(); err != nil {
					return errors.Join(err, closeAll())
				}
				if err := sleep(wait); err != nil {
					return errors.Join(err, closeAll())
				}
			}
			now := int64(time.Since(base))
			if late := now - int64(evs[i].t); late > s.behind.Load() {
				s.behind.Store(late)
			}
			for ; i < len(evs) && evs[i].t <= now; i++ {
				s.dispatch(outs[evs[i].rank], &evs[i], true)
			}
		}
		if err := flush(); err != nil {
			return errors.Join(err, closeAll())
		}
		count()
	}
	var errs []error
	for _, n := range s.nodes {
		errs = append(errs, s.writeTraffic(n, true))
	}
	if s.sched.hangStep < 0 {
		s.mu.Lock()
		s.exited = true
		s.mu.Unlock()
	} else if s.cfg.Hold > 0 {
		_ = sleep(s.cfg.Hold)
	} else {
		<-ctx.Done()
	}
	errs = append(errs, closeAll())
	return errors.Join(errs...)
}
