// Package profiletest runs simulated NCCL ranks that write real profiler regions: it builds
// the plugin (profiler/plugin.c) and its test driver (profiler/test/driver.c) with gcc, and
// starts driver processes that load the plugin and call it the way NCCL does, step by step as
// a test scripts them (the driver's "script" scenario). Each rank is a real process with its
// own pid and region file, alive until the test ends or kills it, so tests of the sidecar and
// of the rules read exactly what a training job's regions hold.
package profiletest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Kit is a built plugin and driver.
type Kit struct {
	SO, Driver string
}

var (
	buildOnce sync.Once
	built     *Kit
	buildErr  error
	buildSkip string
)

// Build compiles the plugin and the driver once per test binary (in a temporary folder
// removed with the process's temporary files); a test without gcc is skipped.
func Build(t testing.TB) *Kit {
	t.Helper()
	buildOnce.Do(func() {
		gcc, err := exec.LookPath("gcc")
		if err != nil {
			buildSkip = "gcc not found: the profiler plugin is C and these tests build it (apt-get install gcc)"
			return
		}
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "ncclwatch-profiletest-")
		if err != nil {
			buildErr = err
			return
		}
		k := &Kit{SO: filepath.Join(dir, "libnccl-profiler-ncclwatch.so"), Driver: filepath.Join(dir, "driver")}
		so := []string{"-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread", "-Wall", "-Wextra",
			"-Werror", "-Wl,-z,nodelete", "-o", k.SO, filepath.Join(root, "profiler", "plugin.c"),
			filepath.Join(root, "profiler", "chain.c"), "-ldl"}
		drv := []string{"-std=gnu11", "-O1", "-pthread", "-Wall", "-Wextra", "-Werror", "-o", k.Driver,
			filepath.Join(root, "profiler", "test", "driver.c"), "-ldl"}
		for _, args := range [][]string{so, drv} {
			if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("gcc %v: %w\n%s", args, err, out)
				return
			}
		}
		built = k
	})
	if buildSkip != "" {
		t.Skip(buildSkip)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}

// Rank is one simulated rank process.
type Rank struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	done  chan struct{}
	// PID is the process id, Dir the folder its region is in.
	PID int
	Dir string
}

// Start runs a rank that writes its region into dir, with the launcher's variables
// (RANK=..., WORLD_SIZE=...) in env; the test's cleanup kills it if it still runs.
func (k *Kit) Start(t testing.TB, dir string, env ...string) *Rank {
	t.Helper()
	cmd := exec.Command(k.Driver, k.SO, "script", "5")
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "NCCLWATCH_") || strings.HasPrefix(name, "NCCL_") || name == "RANK" ||
			name == "LOCAL_RANK" || name == "WORLD_SIZE" || name == "LOCAL_WORLD_SIZE" || name == "TORCHELASTIC_RUN_ID" ||
			name == "SLURM_JOB_ID" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "NCCLWATCH_PROFILER_DIR="+dir)
	cmd.Env = append(cmd.Env, env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &Rank{t: t, cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout), done: make(chan struct{}), PID: cmd.Process.Pid, Dir: dir}
	t.Cleanup(r.Kill)
	return r
}

// Do sends script lines (profiler/test/driver.c documents them) and waits until the
// driver has run them: everything is then in the region.
func (r *Rank) Do(lines ...string) {
	r.t.Helper()
	if _, err := io.WriteString(r.stdin, strings.Join(lines, "\n")+"\nsync\n"); err != nil {
		r.t.Fatalf("rank pid %d: %v", r.PID, err)
	}
	deadline := time.AfterFunc(30*time.Second, func() { _ = r.cmd.Process.Kill() })
	defer deadline.Stop()
	for r.out.Scan() {
		line := r.out.Text()
		if strings.HasPrefix(line, "sync ") {
			return
		}
	}
	r.t.Fatalf("rank pid %d ended before its script did", r.PID)
}

// Path is the rank's region file.
func (r *Rank) Path() string {
	h, err := os.Hostname()
	if err != nil {
		h = "unknown"
	}
	h, _, _ = strings.Cut(h, ".")
	return filepath.Join(r.Dir, "ncclwatch-prof."+h+"."+strconv.Itoa(r.PID)+".bin")
}

// Kill ends the rank the way a crash does (SIGKILL: its region still says running).
func (r *Rank) Kill() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Kill()
	r.wait()
}

// Exit ends the rank cleanly (its region then says exited).
func (r *Rank) Exit() {
	_ = r.stdin.Close()
	r.wait()
}

func (r *Rank) wait() {
	select {
	case <-r.done:
	default:
		_ = r.cmd.Wait()
		close(r.done)
	}
}
