package logparse

import (
	"strconv"

	"github.com/ncclwatch/watchdog/snapshot"
)

// eventKinds maps the line kinds that report trouble to the event they become.
var eventKinds = [NumKinds]snapshot.EventKind{
	KindIBCompletion:     snapshot.EventIBCompletion,
	KindIBAsync:          snapshot.EventIBAsync,
	KindSocketError:      snapshot.EventSocketError,
	KindConnClosedRemote: snapshot.EventConnClosedRemote,
	KindConnClosedLocal:  snapshot.EventConnClosedLocal,
	KindProxyError:       snapshot.EventProxyError,
	KindCudaError:        snapshot.EventCudaError,
	KindSystemError:      snapshot.EventSystemError,
	KindBreadcrumb:       snapshot.EventBreadcrumb,
	KindRASPeerDead:      snapshot.EventRASPeerDead,
	KindWarn:             snapshot.EventWarn,
	KindDestroy:          snapshot.EventCommAbort, // abort phases only, see EventOf
	KindTorchTimeout:     snapshot.EventTorchTimeout,
	KindTorchWorkStatus:  snapshot.EventTorchWorkStatus,
	KindTorchTerminate:   snapshot.EventTorchTerminate,
	KindTorchNCCLError:   snapshot.EventTorchNCCLError,
	KindLauncherExit:     snapshot.EventLauncherExit,
	KindCollMismatch:     snapshot.EventCollMismatch,
	KindNetSizeMismatch:  snapshot.EventNetSizeMismatch,
	KindSocketConnect:    snapshot.EventSocketConnect,
	KindNoInterface:      snapshot.EventNoInterface,
	KindShmError:         snapshot.EventShmError,
	KindDuplicateGPU:     snapshot.EventDuplicateGPU,
	KindVersionMismatch:  snapshot.EventVersionMismatch,
	KindIBSetup:          snapshot.EventIBSetup,
	KindTorchStore:       snapshot.EventTorchStore,
	KindRankConflict:     snapshot.EventRankConflict,
	KindTorchStuck:       snapshot.EventTorchStuck,
	KindP2PError:         snapshot.EventP2PError,
	KindNetError:         snapshot.EventNetError,
	KindFRCollective:     snapshot.EventFRCollective,
	KindFRCulprit:        snapshot.EventFRCulprit,
	KindFRMissing:        snapshot.EventFRMissing,
	KindSignal:           snapshot.EventSignal,
	KindTorchDesync:      snapshot.EventTorchDesync,
	KindTorchBarrier:     snapshot.EventTorchBarrier,
	KindRankExit:         snapshot.EventRankExit,
	KindInvalidRank:      snapshot.EventInvalidRank,
	KindNetFallback:      snapshot.EventNetFallback,
	KindTorchLagging:     snapshot.EventTorchLagging,
}

// EventOf is the event a parsed line reports, timed ts (µs since the epoch, 0 when
// unknown); ok is false for a line that reports none. It is the one place where lines
// become events: the tracker (NCCL logs), the sidecar's stdout follower and analyze's
// console reader all call it, so they cannot disagree.
func EventOf(l *Line, ts int64) (e snapshot.Event, ok bool) {
	if l.Kind >= NumKinds || eventKinds[l.Kind] == "" {
		return e, false
	}
	e = snapshot.Event{Kind: eventKinds[l.Kind], T: snapshot.Micros(ts), Dev: string(l.Dev2), Port: l.Port,
		Code: l.Code, Fatal: l.Fatal, Msg: snapshot.CutMsg(string(l.Msg))}
	if (l.Level == LevelWarn || l.Kind == KindBreadcrumb) && len(l.File) > 0 && len(l.File) <= 64 {
		e.Src = string(l.File)
	}
	if len(l.Detail) > 0 && len(l.Detail) < len(l.Msg) {
		e.Detail = snapshot.CutMsg(string(l.Detail))
	}
	switch l.Kind {
	case KindDestroy:
		if l.Phase != PhaseAbortStart && l.Phase != PhaseAbort {
			return snapshot.Event{}, false
		}
		e.Comm = "0x" + strconv.FormatUint(l.Comm, 16)
	case KindConnClosedLocal:
		e.LocalRank = l.LocalRk
	case KindLauncherExit:
		e.LocalRank, e.PID = l.LocalRk, l.Torch.PID
	case KindTorchTimeout:
		e.Code = int(l.Torch.SeqNum)
		e.Comm = string(l.Torch.PG)
		t := &l.Torch
		e.Work = []snapshot.TorchWork{{Seq: t.SeqNum, Op: string(t.OpType), NumelIn: max(t.NumelIn, 0),
			NumelOut: max(t.NumelOut, 0), TimeoutMs: max(t.TimeoutMs, 0)}}
	case KindTorchDesync:
		e.Ranks = []int{l.Ranks[0], l.Ranks[1]}
		e.Work = []snapshot.TorchWork{Fingerprint(l.Text), Fingerprint(l.Detail)}
		e.Code = int(e.Work[0].Seq)
		e.Detail = ""
	case KindTorchLagging:
		e.Ranks, _ = frRanks(l.Text, "")
		e.Detail = laggingWords(l.Detail, l.Code)
	case KindTorchBarrier:
		e.Ranks, e.Code = frRanks(l.Text, "")
		if len(l.Detail) > 0 {
			e.Work = []snapshot.TorchWork{Fingerprint(l.Detail)}
		}
		e.Detail = ""
	case KindRankExit:
		e.PID, e.LocalRank, e.Bytes = l.Torch.PID, l.LocalRk, l.Torch.Bytes
		e.Src = snapshot.ExitTraceback
		if l.Torch.Launcher {
			e.Src = snapshot.ExitLauncher
		}
		if len(l.Text) > 0 {
			e.Msg = snapshot.CutMsg(string(l.Text))
		}
		e.Detail = snapshot.CutMsg(string(l.Detail))
	case KindInvalidRank, KindNetFallback:
		e.Peer = string(l.Text)
	case KindTorchStuck:
		e.Comm = string(l.Torch.PG)
	case KindCudaError:
		if l.Torch.Watchdog {
			e.Src = snapshot.SrcTorchWatchdog
		}
		e.Peer = string(l.Text)
	case KindTorchWorkStatus:
		e.Code = int(l.Torch.Completed)
		e.Enqueued = max(l.Torch.Enqueued, 0)
		e.Comm = string(l.Torch.PG)
		if l.Ranks[0] >= 0 {
			// The dump signal's rank whose collective timed out.
			e.Ranks = []int{l.Ranks[0]}
		}
	case KindIBAsync:
		e.Detail = string(l.Text)
	case KindFRCulprit:
		e.Ranks, e.Code = frRanks(l.Text, "Culprit rank ")
		e.Detail = snapshot.CutMsg(string(frFirstError(l.Text)))
	case KindFRMissing:
		e.Ranks, e.Code = frRanks(l.Text, "")
	case KindDuplicateGPU, KindVersionMismatch, KindProxyError, KindTorchStore, KindRankConflict:
		// Their readers set both slots, -1 where the line names no rank.
		for _, r := range l.Ranks {
			if r >= 0 {
				e.Ranks = append(e.Ranks, r)
			}
		}
		e.Peer = string(l.Text)
	default:
		e.Peer = string(l.Text)
	}
	return e, true
}

// FromTorch reports whether a kind comes from PyTorch or its launcher rather than NCCL.
func (k Kind) FromTorch() bool {
	switch k {
	case KindTorchTimeout, KindTorchWorkStatus, KindTorchTerminate, KindTorchNCCLError, KindTorchCommCreated,
		KindLauncherExit, KindTorchStore, KindTorchStuck, KindFRCollective, KindFRCulprit, KindFRMissing, KindSignal,
		KindTorchDesync, KindTorchBarrier, KindRankExit, KindExitRecord, KindTorchLagging:
		return true
	}
	return false
}
