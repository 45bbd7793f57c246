package profile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ncclwatch-profile-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needGCC(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: the profiler plugin is C and these tests build it (apt-get install gcc)")
	}
	return gcc
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

// pluginSources are the plugin's C files, as the Makefile's PLUGIN_SRC lists them.
func pluginSources(root string) []string {
	return []string{filepath.Join(root, "profiler", "plugin.c"), filepath.Join(root, "profiler", "chain.c")}
}
