package snapshot

import "fmt"

// xidInfoOf holds the XIDs a training fleet meets, after NVIDIA's Xid catalog
// (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) and the driver's
// nverror.h. severe marks a fault of the GPU, its memory, links or firmware that needs a
// GPU reset, a reboot or service (the catalog's RESET_GPU / RESTART_BM / workflow
// buckets): evidence against the hardware. The others are raised by an application
// fault or follow another error: they explain a dead rank but do not blame the GPU.
func xidInfoOf(code int) (text string, severe bool, known bool) {
	switch code {
	case 8:
		return "GPU stopped processing (channel idle timeout)", false, true
	case 13:
		return "graphics engine exception (often an out-of-range access by the application)", false, true
	case 31:
		return "GPU memory page fault (MMU fault, usually an illegal address in the application)", false, true
	case 32:
		return "invalid or corrupted push buffer stream (PBDMA error)", false, true
	case 38:
		return "driver firmware error", true, true
	case 43:
		return "GPU stopped processing: a channel was reset after an application fault", false, true
	case 44:
		return "graphics engine fault during context switch", true, true
	case 45:
		return "preemptive cleanup after a previous error (channel torn down)", false, true
	case 48:
		return "double-bit ECC error (uncorrectable memory error)", true, true
	case 61:
		return "internal micro-controller (PMU) breakpoint", true, true
	case 62:
		return "internal micro-controller (PMU) halt", true, true
	case 63:
		return "ECC page retirement or row remapping recorded (reset the GPU to apply)", false, true
	case 64:
		return "ECC page retirement or row remapping failure", true, true
	case 69:
		return "graphics engine class error", false, true
	case 74:
		return "NVLink error", true, true
	case 79:
		return "GPU has fallen off the bus", true, true
	case 92:
		return "high single-bit ECC error rate", false, true
	case 94:
		return "contained uncorrectable memory error (the affected application must restart)", true, true
	case 95:
		return "uncontained uncorrectable memory error (GPU reset required)", true, true
	case 109:
		return "context switch timeout", false, true
	case 119:
		return "GSP RPC timeout (GPU firmware not answering)", true, true
	case 120:
		return "GSP firmware error", true, true
	case 121:
		return "C2C (chip-to-chip) link error", true, true
	case 140:
		return "unrecovered ECC error", true, true
	case 154:
		return "GPU recovery action changed (says what another XID needs: reset, reboot, drain)", false, true
	case 155:
		return "NVLink software-defined error", true, true
	case 156:
		return "resource retirement event", false, true
	case 157:
		return "resource retirement failure", true, true
	}
	return "", false, false
}

// XIDMeaning is a short meaning of an XID code (shared vocabulary: the sidecar logs it,
// the detector judges it, neither needs NVML) and whether it blames the GPU hardware,
// firmware or driver (severe) rather than the application. Unknown codes get a generic
// text and severe=false.
func XIDMeaning(code int) (text string, severe bool) {
	if text, severe, ok := xidInfoOf(code); ok {
		return text, severe
	}
	return fmt.Sprintf("XID %d (not in the watchdog's table; see NVIDIA's Xid catalog)", code), false
}
