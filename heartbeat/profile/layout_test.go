package profile

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLayoutMatchesC compiles profiler/test/layout.c, which prints every size, offset and
// enum value of profiler/region.h as gcc lays them out, and compares them with the Go
// constants. The C and Go sides of the region cannot drift apart unnoticed.
func TestLayoutMatchesC(t *testing.T) {
	gcc := needGCC(t)
	bin := filepath.Join(t.TempDir(), "layout")
	src := filepath.Join(repoRoot(t), "profiler", "test", "layout.c")
	if out, err := exec.Command(gcc, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc layout.c: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("layout: %v", err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("layout printed %q", line)
		}
		c, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			t.Fatalf("layout printed %q", line)
		}
		seen[name] = true
		g, ok := layoutTable[name]
		switch {
		case !ok:
			t.Errorf("C has %s = %d; the Go reader has no constant for it", name, c)
		case uint64(g) != c:
			t.Errorf("%s: C says %d, Go says %d", name, c, g)
		}
	}
	for name := range layoutTable {
		if !seen[name] {
			t.Errorf("Go has %s; layout.c does not print it", name)
		}
	}
}
