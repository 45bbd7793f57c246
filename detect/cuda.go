package detect

import (
	"fmt"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// CUDAConfig sets how CUDA failures inside NCCL are reported.
type CUDAConfig struct {
	// CUDAEvidence caps the failure lines quoted per finding.
	CUDAEvidence int `yaml:"-"`
}

// cudaCause is what a CUDA error inside NCCL usually means and what to do, as NCCL's
// maintainers answer it.
func cudaCause(text, file string) string {
	t := strings.ToLower(text)
	switch {
	case strings.Contains(t, "out of memory"):
		return "the GPU ran out of memory when NCCL allocated its buffers: the application holds nearly all of it (lower the batch or the caching allocator's share, or another process shares the GPU)"
	case strings.Contains(t, "illegal memory access") || strings.Contains(t, "illegal address"):
		return "a kernel on this GPU faulted and the CUDA context is dead: usually the application's own kernel (or a buffer freed while NCCL used it) faulted first; run with CUDA_LAUNCH_BLOCKING=1 to find it, and check the XID in the kernel log"
	case strings.Contains(t, "system not yet initialized"):
		return "the NVSwitch fabric is not up: nvidia-fabricmanager is not running (or its version differs from the driver's) on this host"
	case strings.Contains(file, "nvls"):
		// NCCL's NVLS transport is the only user of CUDA's multicast objects: whatever CUDA
		// says there, the multicast set-up failed, not the GPU's work.
		return "NVLink SHARP (NVLS, NVSwitch multicast) could not be set up on this GPU: the NVSwitch fabric's state (the fabric manager restarted under running processes, or out of step with the driver), IMEX or the driver, or a GPU that needs a reset; NCCL_NVLS_ENABLE=0 confirms it and avoids it (a node reboot or GPU reset fixes it)"
	case strings.Contains(t, "named symbol not found") || strings.Contains(t, "no kernel image") || strings.Contains(t, "unsupported toolchain"):
		return "NCCL's kernels do not match this GPU or driver: a NCCL build for other architectures, or a driver older than the CUDA it was built with"
	case strings.Contains(t, "initialization error") || strings.Contains(t, "driver version is insufficient") || strings.Contains(t, "no cuda-capable device"):
		return "CUDA could not start on this host: a driver problem (version, a fork after CUDA was initialized, devices not visible in the container)"
	case strings.Contains(t, "peer access") || strings.Contains(t, "peer mapping"):
		return "GPU peer-to-peer access failed between two GPUs of this host: the platform does not support it (IOMMU/ACS, a virtual machine); NCCL_P2P_DISABLE=1 confirms it"
	case strings.Contains(t, "device-side assert"):
		return "a kernel's assertion failed on this GPU (usually the application's: an index out of range, a label outside the classes) and the CUDA context is dead; run with CUDA_LAUNCH_BLOCKING=1 to find the kernel"
	case strings.Contains(t, "misaligned address") || strings.Contains(t, "illegal instruction"):
		return "a kernel on this GPU faulted and the CUDA context is dead: usually the application's own kernel (or a custom extension's); run with CUDA_LAUNCH_BLOCKING=1 to find it"
	case strings.Contains(t, "unspecified launch failure") || strings.Contains(t, "uncorrectable ecc") || strings.Contains(t, "hardware"):
		return "the GPU failed (a hardware or driver fault): check its XID errors and take it out of service if they repeat"
	case strings.Contains(t, "invalid device ordinal") || strings.Contains(t, "invalid device"):
		return "the process asked for a GPU it cannot see: CUDA_VISIBLE_DEVICES or the local rank to device mapping is wrong"
	case strings.Contains(t, "busy or unavailable"):
		return "the GPU is in exclusive-process mode and already taken: two ranks (or another job) on one GPU"
	}
	if file == snapshot.SrcTorchWatchdog {
		return "work on this GPU failed and its CUDA context is dead; the CUDA error says how (run with CUDA_LAUNCH_BLOCKING=1 to find the kernel)"
	}
	return "a CUDA call inside NCCL failed on this GPU; the CUDA error says which resource"
}

// CUDA reports CUDA failures NCCL logged ("Cuda failure '...'"), with the usual cause of
// that error: one finding per host and error, naming the ranks that hit it (every GPU of a
// node failing alike points at the node). A failure that follows another on the same
// process (an out-of-memory, then invalid handles) is quoted, not reported again.
func CUDA(j *Job, cfg Config) []Finding {
	quote := max(cfg.CUDAEvidence, 1)
	type failure struct {
		f     Finding
		first *Proc
		text  string
		ev    snapshot.Event
	}
	found := map[string]*failure{}
	var order []string
	for _, p := range j.Procs {
		var mine *failure
		stray := strayAllocations(p)
		for i, e := range p.Events {
			if e.Kind != snapshot.EventCudaError || stray[i] || !recentEvent(j, cfg.EventConfig, int64(e.T)) || echoed(j, p, e) {
				continue
			}
			if mine != nil {
				if len(mine.f.Evidence) < quote {
					mine.f.addEvidence("then %s: %s", p.Name(), e.Msg)
				}
				continue
			}
			text := e.Detail
			if text == "" {
				text = e.Msg
			}
			key := "gpu:" + p.Host + ":" + text
			fl := found[key]
			if fl == nil {
				fl = &failure{f: Finding{Kind: incident.KindGPU, Severity: incident.SeverityCritical, Culprits: []incident.Culprit{}, Key: key},
					first: p, text: text, ev: e}
				found[key] = fl
				order = append(order, key)
			}
			f := &fl.f
			if len(f.Culprits) < 8 {
				f.Culprits = append(f.Culprits, p.Culprit())
			}
			f.culpritKeys = append(f.culpritKeys, p.Key())
			if len(f.Evidence) < quote {
				f.addEvidence("%s: %s", p.Name(), e.Msg)
			}
			if e.T != 0 && (f.FaultAt.IsZero() || e.T.Time().Before(f.FaultAt)) {
				f.FaultAt = e.T.Time()
			}
			mine = fl
		}
	}
	var out []Finding
	opsLogged := anyOpLogged(j)
	for _, k := range order {
		fl := found[k]
		who := fl.first.Name()
		if n := len(fl.f.culpritKeys); n > 1 {
			who = fmt.Sprintf("%d ranks on %s", n, fl.first.Host)
		}
		when := stageWords(knownStage(opsLogged, fl.first, fl.ev))
		switch {
		case fl.first.Lines > 0 && knownStage(opsLogged, fl.first, fl.ev) == snapshot.StageUnknown:
			when = "when, these lines do not show"
		case strings.HasPrefix(fl.ev.Msg, "Test CUDA failure") || strings.HasPrefix(fl.ev.Msg, "Test NCCL failure"):
			when = "as nccl-tests reported it"
		}
		where := "inside NCCL"
		if fl.ev.Src == snapshot.SrcTorchWatchdog {
			// The watchdog only polls the GPU's work: the fault came from a kernel on that GPU.
			where = "under PyTorch's NCCL watchdog (its check of the GPU's work)"
		}
		fl.f.Summary = fmt.Sprintf("%s: CUDA failed %s with '%s' (%s): %s", who, where, fl.text, when,
			cudaCause(fl.text, fl.ev.Src))
		out = append(out, fl.f)
	}
	return out
}

// stageWords says when in the process's life an event came.
func stageWords(s snapshot.Stage) string {
	switch s {
	case snapshot.StageInit:
		return "during initialization"
	case snapshot.StageReady:
		return "after initialization"
	case snapshot.StageFirst:
		return "at its first operations"
	case snapshot.StageRun:
		return "mid-run"
	}
	return "as PyTorch reported it"
}
