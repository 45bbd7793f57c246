// Package xid explains NVIDIA XID error codes for incident evidence.
package xid

// Meaning returns a short explanation of an XID and whether it usually means the GPU or
// its job is broken (as opposed to an application fault).
func Meaning(code int) (text string, severe bool) {
	if m, ok := table[code]; ok {
		return m.text, m.severe
	}
	return "see NVIDIA's XID catalog", false
}

type meaning struct {
	text   string
	severe bool
}

var table = map[int]meaning{
	13:  {"graphics engine exception (often an application fault: out-of-range access)", false},
	31:  {"GPU memory page fault (application or driver bug, or bad memory)", false},
	43:  {"GPU stopped processing (a user application fault, the GPU recovered)", false},
	45:  {"preemptive cleanup after a previous error or a killed process", false},
	48:  {"double-bit ECC error: uncorrectable memory error, the GPU needs a reset", true},
	61:  {"internal micro-controller breakpoint/warning", true},
	62:  {"internal micro-controller halt", true},
	63:  {"ECC page retirement or row remapping recorded", false},
	64:  {"ECC page retirement or row remapping failed", true},
	74:  {"NVLink error", true},
	79:  {"GPU has fallen off the bus", true},
	92:  {"high single-bit ECC error rate", false},
	94:  {"contained ECC error: the application was killed, the GPU continues", true},
	95:  {"uncontained ECC error: all applications on the GPU were affected, reset required", true},
	119: {"GSP RPC timeout", true},
	120: {"GSP error", true},
	140: {"unrecovered ECC error", true},
}
