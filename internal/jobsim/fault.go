package jobsim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultKind names a scripted fault.
type FaultKind string

const (
	// FaultSkip: the rank omits one collective at one step and issues its later ops; the
	// job hangs at the end of that step. Op picks the collective (default: the step's first
	// tensor-parallel op).
	FaultSkip FaultKind = "skip"
	// FaultWrongOp: the rank calls Broadcast (root 0) where the others call their op with the
	// same count (AllReduce where the op is a Broadcast); the job hangs at the end of the step.
	FaultWrongOp FaultKind = "wrong-op"
	// FaultWrongSize: the rank passes another count (Count, default half); no hang.
	FaultWrongSize FaultKind = "wrong-size"
	// FaultWrongDtype: the rank passes another datatype (bf16 <-> fp32); no hang.
	FaultWrongDtype FaultKind = "wrong-dtype"
	// FaultSilent: the rank's host code stops before op Op of the step (default 0) while the
	// process stays alive: its GPU idles, the others wait in their collectives.
	FaultSilent FaultKind = "silent"
	// FaultCrash: the rank's process dies before op Op of the step; its node-local peers log
	// "[Service thread] Connection closed by localRank N" and Alive reports it dead.
	FaultCrash FaultKind = "crash"
	// FaultStraggler: from step Step on, the rank arrives Delay late at every collective; the
	// step takes Delay longer for everyone.
	FaultStraggler FaultKind = "straggler"
	// FaultIBPort: the HCA port of the rank's GPU (or Port) trains at 1X (100 of 400 Gb/s), or
	// goes DOWN with Down; with Warn the ranks using it also log IB WARNs.
	FaultIBPort FaultKind = "ib-port"
	// FaultStuck: every rank issues the whole step and then nothing: the last collectives
	// never complete and every GPU spins (a network path or GPU fault NCCL does not log).
	FaultStuck FaultKind = "stuck"
	// FaultXID: an XID event (code XID, default 48) on the rank's GPU, injected into the
	// node's gpu.Fake.
	FaultXID FaultKind = "xid"
	// FaultPause: every rank stops before step Step for Duration with idle GPUs, then goes
	// on (a checkpoint or evaluation): not a fault, and must not be reported as one.
	FaultPause FaultKind = "pause"
)

// FaultKinds lists every kind, in the order the documentation gives them.
var FaultKinds = []FaultKind{FaultSkip, FaultWrongOp, FaultWrongSize, FaultWrongDtype, FaultSilent,
	FaultCrash, FaultStraggler, FaultIBPort, FaultStuck, FaultXID, FaultPause}

// Fault is one scripted fault. Rank and Step say who and when; the other fields are the
// parameters of the kinds that use them.
type Fault struct {
	Kind FaultKind
	Rank int // global rank; for ib-port and xid it also names the node, GPU and HCA
	Step int // 0-based step at which it starts
	// Op is the index of the affected op in the rank's step (Sim.StepOps lists them), for
	// skip, wrong-*, silent and crash. 0 is the step's first op; -1 picks the kind's default
	// (ParseFault leaves it -1 unless op= is given): the first tensor-parallel collective for
	// skip, the first data-parallel AllReduce for wrong-*, 0 for silent and crash.
	Op       int
	Delay    time.Duration // straggler: lag at every collective
	Duration time.Duration // pause: how long
	Count    uint64        // wrong-size: the count used (default half the right one)
	Port     string        // ib-port: HCA, e.g. "mlx5_1" (default the rank's)
	Down     bool          // ib-port: the port goes DOWN instead of training at 1X
	Warn     bool          // ib-port: the ranks using the port log IB WARNs
	XID      int           // xid: the code (default 48)
}

// hangs reports whether the fault leaves the job hung at the end of its step.
func (f *Fault) hangs() bool {
	switch f.Kind {
	case FaultSkip, FaultWrongOp, FaultSilent, FaultCrash, FaultStuck:
		return true
	}
	return false
}

// String renders the fault in ParseFault's syntax.
func (f Fault) String() string {
	s := fmt.Sprintf("%s:%d:%d", f.Kind, f.Rank, f.Step)
	var p []string
	if f.Op >= 0 && f.usesOp() {
		p = append(p, "op="+strconv.Itoa(f.Op))
	}
	if f.Delay > 0 {
		p = append(p, "delay="+f.Delay.String())
	}
	if f.Duration > 0 {
		p = append(p, "for="+f.Duration.String())
	}
	if f.Count > 0 {
		p = append(p, "count="+strconv.FormatUint(f.Count, 10))
	}
	if f.Port != "" {
		p = append(p, "port="+f.Port)
	}
	if f.Down {
		p = append(p, "down")
	}
	if f.Warn {
		p = append(p, "warn")
	}
	if f.XID > 0 {
		p = append(p, "code="+strconv.Itoa(f.XID))
	}
	if len(p) > 0 {
		s += ":" + strings.Join(p, ",")
	}
	return s
}

func (f *Fault) usesOp() bool {
	switch f.Kind {
	case FaultSkip, FaultWrongOp, FaultWrongSize, FaultWrongDtype, FaultSilent, FaultCrash:
		return true
	}
	return false
}

// ParseFault reads "kind:rank:step[:params]". Params are comma-separated key=value pairs or
// flags; a bare value is the kind's main parameter:
//
//	skip:5:10            skip:5:10:op=3        wrong-op:9:12        wrong-size:9:12:count=1000
//	wrong-dtype:9:12     silent:3:20           crash:3:20:op=4      straggler:7:0:200ms
//	straggler:7:30:delay=150ms                 ib-port:2:10:down,warn   ib-port:2:10:port=mlx5_5
//	stuck:0:25           xid:4:8:79            pause:0:20:30s
func ParseFault(s string) (Fault, error) {
	f := Fault{Op: -1}
	parts := strings.SplitN(s, ":", 4)
	if len(parts) < 3 {
		return f, fmt.Errorf("jobsim: fault %q: want kind:rank:step[:params]", s)
	}
	f.Kind = FaultKind(strings.ToLower(parts[0]))
	known := false
	for _, k := range FaultKinds {
		known = known || k == f.Kind
	}
	if !known {
		return f, fmt.Errorf("jobsim: fault %q: unknown kind %q (one of %v)", s, parts[0], FaultKinds)
	}
	var err error
	if f.Rank, err = strconv.Atoi(parts[1]); err != nil || f.Rank < 0 {
		return f, fmt.Errorf("jobsim: fault %q: bad rank %q", s, parts[1])
	}
	if f.Step, err = strconv.Atoi(parts[2]); err != nil || f.Step < 0 {
		return f, fmt.Errorf("jobsim: fault %q: bad step %q", s, parts[2])
	}
	if len(parts) == 4 && parts[3] != "" {
		for _, p := range strings.Split(parts[3], ",") {
			if err := f.setParam(strings.TrimSpace(p)); err != nil {
				return f, fmt.Errorf("jobsim: fault %q: %w", s, err)
			}
		}
	}
	return f, nil
}

func (f *Fault) setParam(p string) error {
	key, val, hasVal := strings.Cut(p, "=")
	if !hasVal {
		switch strings.ToLower(p) {
		case "down":
			f.Down = true
			return nil
		case "warn":
			f.Warn = true
			return nil
		}
		val = p
		switch f.Kind {
		case FaultStraggler:
			key = "delay"
		case FaultPause:
			key = "for"
		case FaultXID:
			key = "code"
		case FaultIBPort:
			key = "port"
		default:
			key = "op"
		}
	}
	var err error
	switch strings.ToLower(key) {
	case "op":
		if f.Op, err = strconv.Atoi(val); err != nil || f.Op < 0 {
			return fmt.Errorf("bad op index %q", val)
		}
	case "delay":
		if f.Delay, err = time.ParseDuration(val); err != nil || f.Delay <= 0 {
			return fmt.Errorf("bad delay %q", val)
		}
	case "for", "duration":
		if f.Duration, err = time.ParseDuration(val); err != nil || f.Duration <= 0 {
			return fmt.Errorf("bad duration %q", val)
		}
	case "count":
		if f.Count, err = strconv.ParseUint(val, 10, 64); err != nil || f.Count == 0 {
			return fmt.Errorf("bad count %q", val)
		}
	case "code", "xid":
		if f.XID, err = strconv.Atoi(val); err != nil || f.XID <= 0 {
			return fmt.Errorf("bad XID code %q", val)
		}
	case "port", "hca", "dev":
		f.Port = val
	case "down":
		f.Down, err = strconv.ParseBool(val)
	case "warn":
		f.Warn, err = strconv.ParseBool(val)
	default:
		return fmt.Errorf("unknown parameter %q", key)
	}
	return err
}
