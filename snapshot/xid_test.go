package snapshot

import (
	"strings"
	"testing"
)

func TestXIDMeaning(t *testing.T) {
	for _, tt := range []struct {
		code   int
		severe bool
		has    string
	}{
		{13, false, "graphics engine exception"},
		{31, false, "page fault"},
		{43, false, "stopped processing"},
		{45, false, "preemptive cleanup"},
		{48, true, "double-bit ECC"},
		{61, true, "PMU"},
		{62, true, "PMU"},
		{63, false, "row remapping"},
		{64, true, "failure"},
		{74, true, "NVLink"},
		{79, true, "fallen off the bus"},
		{92, false, "single-bit"},
		{94, true, "contained"},
		{95, true, "uncontained"},
		{119, true, "GSP"},
		{120, true, "GSP"},
		{140, true, "unrecovered ECC"},
		{9999, false, "XID 9999"},
	} {
		text, severe := XIDMeaning(tt.code)
		if severe != tt.severe || !strings.Contains(text, tt.has) {
			t.Errorf("Meaning(%d) = %q, %v; want %q, %v", tt.code, text, severe, tt.has, tt.severe)
		}
	}
}
