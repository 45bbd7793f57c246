package detect

import (
	"fmt"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// ErrorConfig sets how NCCL errors that no other rule explains are reported.
type ErrorConfig struct {
	// ErrorQuoted caps the lines quoted.
	ErrorQuoted int `yaml:"-"`
}

// ncclResultWords is what an ncclResult_t means for whoever reads a post-mortem.
func ncclResultWords(code int) string {
	switch code {
	case snapshot.NCCLUnhandledCuda:
		return "a CUDA call failed inside NCCL"
	case snapshot.NCCLSystemError:
		return "a system call or library failed inside NCCL (sockets, shared memory, InfiniBand verbs)"
	case snapshot.NCCLInternalError:
		return "NCCL's internal check failed, most often because the ranks disagree (NCCL versions or settings) or a connection was corrupted"
	case snapshot.NCCLInvalidArg, snapshot.NCCLInvalidUsage:
		return "the application called NCCL wrongly"
	case snapshot.NCCLRemoteError:
		return "a remote process exited or the network failed: the first error is on another rank"
	}
	return "NCCL returned an error"
}

// NCCLErrors reports an NCCL error that surfaced (PyTorch's "NCCL error ...", NCCL's own
// fatal WARNs) when no other rule names its cause, so that a job NCCL failed is never
// called healthy: the first such error, with NCCL's last WARN as PyTorch quoted it.
func NCCLErrors(j *Job, cfg Config) []Finding {
	quote := max(cfg.ErrorQuoted, 1)
	var first *Proc
	var firstEv snapshot.Event
	var quoted []string
	for _, p := range j.Procs {
		for _, e := range p.Events {
			switch e.Kind {
			case snapshot.EventTorchNCCLError:
			case snapshot.EventSystemError, snapshot.EventProxyError, snapshot.EventSocketError, snapshot.EventNetSizeMismatch:
				if !e.Fatal && e.Kind != snapshot.EventProxyError {
					continue
				}
			case snapshot.EventWarn:
				// Any other WARN counts only as PyTorch's quote of the error it failed on.
				if e.Stage != snapshot.StageUnknown {
					continue
				}
				quoted = append(quoted, fmt.Sprintf("%s: NCCL's last error was %q", p.Name(), e.Msg))
				continue
			default:
				continue
			}
			if first == nil || (firstEv.Kind == snapshot.EventTorchNCCLError && e.Kind != snapshot.EventTorchNCCLError) {
				first, firstEv = p, e
			}
		}
	}
	if first == nil {
		return nil
	}
	f := Finding{Kind: incident.KindCrash, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{first.Culprit()},
		culpritKeys: []string{first.Key()}, Key: "nccl-error:" + first.Key()}
	if firstEv.Kind == snapshot.EventTorchNCCLError {
		f.Summary = fmt.Sprintf("%s failed with an NCCL error: %s", first.Name(), ncclResultWords(firstEv.Code))
		if firstEv.Code == snapshot.NCCLRemoteError {
			f.Culprits = []incident.Culprit{}
		}
	} else {
		f.Summary = fmt.Sprintf("%s: NCCL failed (%s): %s", first.Name(), firstEv.Kind, firstEv.Msg)
	}
	f.addEvidence("%s: %s", first.Name(), firstEv.Msg)
	for i, q := range quoted {
		if i >= quote {
			break
		}
		f.addEvidence("%s", q)
	}
	if firstEv.T != 0 {
		f.FaultAt = firstEv.T.Time()
	}
	return []Finding{f}
}

// silentKey starts the keys of SilentInitFailure's findings.
const silentKey = "silent-init:"

// SilentInitFailure reads NCCL's error breadcrumbs ("misc/socket.cc:564 -> 2") when NCCL
// warned of nothing: an error that propagated while a process set up its communicators,
// and none of them finished, says where init failed (some socket failures print no WARN).
// It is a cause: the init hang it leaves is its consequence.
func SilentInitFailure(j *Job, _ Config) []Finding {
	collNetHandled := collNetFellBack(j)
	for _, p := range j.Procs {
		if len(p.Comms) > 0 && !allInInit(p) {
			continue
		}
		if f, ok := proxyLost(p); ok {
			return []Finding{f}
		}
		for _, e := range p.Events {
			if warning(e) || (e.Kind == snapshot.EventWarn && e.Code == snapshot.WarnCollNet) {
				// A WARN before the breadcrumbs: they are its path, and the rule that
				// reads the WARN reports it. WARNs after them are their consequences.
				break
			}
			if e.Kind != snapshot.EventBreadcrumb || e.Code == 0 || e.Stage != snapshot.StageInit {
				continue
			}
			if collNetHandled && collNetCrumb(e.Src) {
				// The CollNet set-up failed and NCCL went on without it.
				continue
			}
			f := Finding{Kind: incident.KindCrash, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{p.Culprit()},
				culpritKeys: []string{p.Key()}, Key: silentKey + p.Key()}
			f.Summary = fmt.Sprintf("%s failed to initialize NCCL without a warning: %s, first in %s%s",
				p.Name(), ncclResultWords(e.Code), orUnknown(e.Src), breadcrumbArea(e.Src))
			f.addEvidence("%s: %s", p.Name(), e.Msg)
			return []Finding{f}
		}
	}
	return nil
}

// warning reports a WARN-class error a rule reads. The proxy's "Failed to execute operation
// Connect" only reports that an operation failed; its cause is what the breadcrumbs before
// it say.
func warning(e snapshot.Event) bool {
	return e.Fatal && e.Kind != snapshot.EventProxyError
}

func allInInit(p *Proc) bool {
	for _, c := range p.Comms {
		if c.State != snapshot.CommInit {
			return false
		}
	}
	return true
}

// breadcrumbArea says which part of NCCL a source file is.
func breadcrumbArea(src string) string {
	switch {
	case strings.Contains(src, "socket") || strings.Contains(src, "bootstrap"):
		return " (its sockets: a peer it could not reach, NCCL_SOCKET_IFNAME, a firewall)"
	case strings.Contains(src, "shm"):
		return " (shared memory: /dev/shm)"
	case strings.Contains(src, "net_ib") || strings.Contains(src, "ibvwrap"):
		return " (InfiniBand set-up)"
	case strings.Contains(src, "nvls"):
		return " (NVLink SHARP: the fabric manager, or NCCL_NVLS_ENABLE=0)"
	case strings.Contains(src, "p2p"):
		return " (GPU peer-to-peer: NCCL_P2P_DISABLE=1 tells whether the platform supports it)"
	case strings.Contains(src, "cuda") || strings.Contains(src, "alloc"):
		return " (CUDA)"
	}
	return ""
}

// proxyLost reads "Socket recv failed while polling for opId": the proxy thread of a
// process that was setting up lost its connection to the process it served (its own rank,
// or another rank of its host using it) in the middle of an operation. The breadcrumbs
// around it are its path; the first error is in the process at the other end.
func proxyLost(p *Proc) (Finding, bool) {
	for i, e := range p.Events {
		if e.Kind != snapshot.EventSocketError || e.Code != snapshot.SocketProxyPoll {
			continue
		}
		f := Finding{Kind: incident.KindCrash, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{},
			culpritKeys: []string{p.Key()}, Key: silentKey + p.Key()}
		where := ""
		for _, b := range p.Events[i+1:] {
			if b.Kind == snapshot.EventBreadcrumb && b.Src != "" {
				where = fmt.Sprintf("; the failed operation was in %s%s", b.Src, breadcrumbArea(b.Src))
				break
			}
		}
		f.Summary = fmt.Sprintf("%s: NCCL's proxy lost its connection while it polled for an operation (the socket closed under it) while the ranks were setting up: the process at the other end (this rank's own, or another rank of %s that used this proxy) went away or failed first, and its log holds the first error%s",
			p.Name(), orUnknown(p.Host), where)
		f.addEvidence("%s: %s", p.Name(), e.Msg)
		for _, b := range p.Events {
			if b.Kind == snapshot.EventBreadcrumb {
				f.addEvidence("%s: %s", p.Name(), b.Msg)
			}
		}
		if e.T != 0 {
			f.FaultAt = e.T.Time()
		}
		return f, true
	}
	return Finding{}, false
}
