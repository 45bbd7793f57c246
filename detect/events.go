package detect

import (
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// EventConfig bounds the age of the logged events and XIDs the rules read.
type EventConfig struct {
	// EventMaxAge ignores WARN events and XIDs older than this (live): the events a rank
	// keeps can be hours old in a quiet run, and an old error does not explain the job now.
	EventMaxAge time.Duration `yaml:"event_max_age"`
}

func recentEvent(j *Job, cfg EventConfig, t int64) bool {
	if j.Offline || t == 0 || cfg.EventMaxAge == 0 {
		return true
	}
	return j.Now.Sub(snapshot.Micros(t).Time()) <= cfg.EventMaxAge
}

// echoed reports an event of PyTorch's rank-less output (its quote of NCCL's last WARN,
// "Last error: ...") that a process's own NCCL log also holds: one error, reported once,
// under the process that printed it.
func echoed(j *Job, p *Proc, e snapshot.Event) bool {
	if p.PID != 0 {
		return false
	}
	for _, q := range j.Procs {
		if q.PID == 0 {
			continue
		}
		for _, o := range q.Events {
			if o.Kind == e.Kind && o.Code == e.Code && o.Peer == e.Peer && o.Detail == e.Detail {
				return true
			}
		}
	}
	return false
}

// failureSeen reports whether anything in the job says it failed: an error NCCL or PyTorch
// printed, a launcher's non-zero exit, an aborted communicator, an init that did not
// complete, ranks whose collective counts differ. Without any, closed connections are what
// a job that ended looks like.
func failureSeen(j *Job) bool {
	for _, p := range j.Procs {
		for _, e := range p.Events {
			switch e.Kind {
			case snapshot.EventIBCompletion, snapshot.EventCudaError, snapshot.EventShmError, snapshot.EventDuplicateGPU,
				snapshot.EventVersionMismatch, snapshot.EventNoInterface, snapshot.EventCollMismatch,
				snapshot.EventNetSizeMismatch, snapshot.EventRASPeerDead, snapshot.EventCommAbort, snapshot.EventTorchTimeout,
				snapshot.EventTorchNCCLError, snapshot.EventTorchTerminate, snapshot.EventProxyError, snapshot.EventTorchStore,
				snapshot.EventRankConflict, snapshot.EventTorchStuck:
				return true
			case snapshot.EventLauncherExit:
				if e.Code != 0 {
					return true
				}
			case snapshot.EventSocketConnect, snapshot.EventSocketError, snapshot.EventConnClosedRemote,
				snapshot.EventIBSetup, snapshot.EventSystemError, snapshot.EventIBAsync:
				if e.Fatal {
					return true
				}
			}
		}
	}
	for _, g := range j.Groups {
		for _, m := range g.Members {
			if m.Comm.State == snapshot.CommInit || m.Comm.Count != g.Members[0].Comm.Count {
				return true
			}
		}
	}
	return false
}
