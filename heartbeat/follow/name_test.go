package follow

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		name string
		host string
		pid  int
		ok   bool
	}{
		{"/var/log/nccl/nccl.gpu-node-17.12345.log", "gpu-node-17", 12345, true},
		{"nccl.vm.635.log", "vm", 635, true},
		{"job42.nccl.h.1.log", "h", 1, true},
		{"nccl.h.2147483647.log", "h", 2147483647, true},
		{"nccl.h.2147483648.log", "", 0, false}, // above a pid
		{"nccl.h.0123.log", "", 0, false},       // %d has no leading zero
		{"nccl.h.0.log", "", 0, false},
		{"nccl.h.-1.log", "", 0, false},
		{"nccl.h.12a.log", "", 0, false},
		{"nccl..12.log", "", 0, false},
		{".h.12.log", "", 0, false}, // no prefix
		{"h.12.log", "", 0, false},
		{"nccl.h.12.log.1", "", 0, false},
		{"nccl.h.12.txt", "", 0, false},
		{"nccl.log", "", 0, false},
		{"", "", 0, false},
	} {
		host, pid, ok := ParseName(tc.name)
		if host != tc.host || pid != tc.pid || ok != tc.ok {
			t.Errorf("ParseName(%q) = %q, %d, %v; want %q, %d, %v", tc.name, host, pid, ok, tc.host, tc.pid, tc.ok)
		}
	}
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"nccl.h.1.log", "/var/log/nccl/nccl.node-1.99999.log", "a.b.c.d.123.log", "nccl.h.01.log", "..1.log", "nccl.h.9999999999.log"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		host, pid, ok := ParseName(name)
		if !ok {
			if host != "" || pid != 0 {
				t.Fatalf("not ok but %q %d", host, pid)
			}
			return
		}
		if pid <= 0 || host == "" || strings.ContainsAny(host, "./") {
			t.Fatalf("ParseName(%q) = %q, %d", name, host, pid)
		}
		// The name ends with exactly what NCCL's %h.%p.log would print.
		if !strings.HasSuffix(name, "."+host+"."+strconv.Itoa(pid)+".log") {
			t.Fatalf("ParseName(%q) = %q, %d does not round-trip", name, host, pid)
		}
	})
}
