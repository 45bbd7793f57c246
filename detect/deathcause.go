package detect

import (
	"fmt"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Who died, and why: the cause leads the one incident of a death, in both live modes and
// offline. The reasons, best first: the exception that ended the rank's traceback (a CUDA
// out-of-memory with the size it could not allocate), a signal, an NCCL or CUDA error, the
// launcher's exit code; an exit after destroying every communicator is a rank that left
// early (ran out of data), not a crash.

// deaths says why dead processes ended; the launcher's records are indexed once.
type deaths struct {
	j     *Job
	exits map[int]snapshot.Event // the launcher's failure records by pid, built on first use
}

// lastWord is the event a dead process's own death is told by, best first: the exception
// that ended its traceback, a signal, an NCCL or CUDA error; false when none.
func lastWord(r *Proc) (snapshot.Event, bool) {
	for _, ev := range r.Events {
		if ev.Kind == snapshot.EventRankExit && ev.Src == snapshot.ExitTraceback || ev.Kind == snapshot.EventSignal && ev.Code > 0 ||
			ev.Kind == snapshot.EventTorchNCCLError || ev.Kind == snapshot.EventCudaError && ev.Fatal {
			return ev, true
		}
	}
	return snapshot.Event{}, false
}

// blamesPeer says whether a dead process's own last word blames another: NCCL's remote
// error ("remote process exited or there was a network error") is what a rank dies of when a
// peer went away first. Its death is real, but its cause is elsewhere: it waits, live, for
// that root to show (witnessStands), as any witness does.
func (d *deaths) blamesPeer(r *Proc) bool {
	ev, ok := lastWord(r)
	return ok && ev.Kind == snapshot.EventTorchNCCLError && ev.Code == snapshot.NCCLRemoteError
}

// reason says why a dead process ended ("" when nothing said).
func (d *deaths) reason(r *Proc) string {
	if ev, ok := lastWord(r); ok {
		switch {
		case ev.Kind == snapshot.EventRankExit:
			why := fmt.Sprintf("it ended with %s: %s", ev.Detail, ev.Msg)
			if ev.Bytes > 0 {
				why += fmt.Sprintf(" (it could not allocate %s more)", sizeWords(ev.Bytes))
			}
			return why
		case ev.Kind == snapshot.EventSignal:
			return fmt.Sprintf("it was killed by signal %d (%s)", ev.Code, ev.Detail)
		}
		return "its last error: " + ev.Msg
	}
	if d.exits == nil {
		d.exits = map[int]snapshot.Event{}
		for _, p := range d.j.Procs {
			for _, ev := range p.Events {
				if (ev.Kind == snapshot.EventLauncherExit || ev.Kind == snapshot.EventRankExit) && ev.Code != 0 && ev.PID > 0 {
					d.exits[ev.PID] = ev
				}
			}
		}
	}
	ev, ok := d.exits[r.PID]
	switch {
	case (!ok || r.PID <= 0) && cleanExit(r):
		return "it destroyed its communicators and exited: it left early (ran out of data, fewer steps or batches than its peers, an early return), not a crash"
	case !ok || r.PID <= 0:
		return ""
	case ev.Code < 0:
		return fmt.Sprintf("the launcher reported it killed by signal %d (%s)", -ev.Code, ev.Detail)
	}
	return fmt.Sprintf("the launcher reported exit code %d%s", ev.Code, exitWords(ev.Code))
}
