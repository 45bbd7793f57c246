package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeConf writes a Slurm settings file (shell assignments) for the scripts.
func writeConf(t *testing.T, dir string, lines ...string) string {
	t.Helper()
	p := filepath.Join(dir, "slurm.conf")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTaskProlog: the task prolog gives a job the NCCL settings the Kubernetes ConfigMap
// gives a pod: INFO logs, or in plugin mode the plugin and WARN logs, with the plugin's
// files in the folder prolog.sh made for the job.
func TestTaskProlog(t *testing.T) {
	dir := t.TempDir()
	so := filepath.Join(dir, "libnccl-profiler-ncclwatch.so")
	if err := os.WriteFile(so, []byte("plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	const (
		info = "export NCCL_DEBUG=INFO\nexport NCCL_DEBUG_SUBSYS=INIT,COLL,NET\n"
		rest = "export NCCL_DEBUG_FILE=/var/log/nccl/42/nccl.%h.%p.log\nexport NCCL_DEBUG_TIMESTAMP_LEVELS=ALL\n" +
			"export NCCL_DEBUG_TIMESTAMP_FORMAT=[%F_%T.%6f]_\n"
	)
	plugin := "export NCCL_PROFILER_PLUGIN=" + so + "\nexport NCCLWATCH_PROFILER_DIR=/run/nw/profiler/42\n"
	none := filepath.Join(dir, "none.conf")
	for _, c := range []struct {
		name string
		conf []string // nil: no settings file
		env  []string
		want string
	}{
		{name: "no settings: INFO logs", want: info + rest},
		{name: "opted out", env: []string{"NCCLWATCH_DISABLE=1"}, want: ""},
		{name: "no job", conf: []string{"NCCLWATCH_PLUGIN=" + so}, env: []string{"SLURM_JOB_ID="}, want: ""},
		{name: "plugin mode", conf: []string{"NCCLWATCH_PLUGIN=" + so, "NCCLWATCH_RUN_DIR=/run/nw"},
			want: "export NCCL_DEBUG=WARN\n" + rest + plugin},
		{name: "plugin mode keeping INFO lines", conf: []string{"NCCLWATCH_PLUGIN=" + so, "NCCLWATCH_RUN_DIR=/run/nw", "NCCLWATCH_PLUGIN_NCCL_DEBUG=INFO"},
			want: info + rest + plugin},
		{name: "plugin files elsewhere", conf: []string{"NCCLWATCH_PLUGIN=" + so, "NCCLWATCH_PROFILER_ROOT=/dev/shm/nw", "NCCLWATCH_LOG_ROOT=/logs"},
			want: "export NCCL_DEBUG=WARN\nexport NCCL_DEBUG_FILE=/logs/42/nccl.%h.%p.log\nexport NCCL_DEBUG_TIMESTAMP_LEVELS=ALL\n" +
				"export NCCL_DEBUG_TIMESTAMP_FORMAT=[%F_%T.%6f]_\nexport NCCL_PROFILER_PLUGIN=" + so + "\nexport NCCLWATCH_PROFILER_DIR=/dev/shm/nw/42\n"},
		{name: "the job opts out of the plugin", conf: []string{"NCCLWATCH_PLUGIN=" + so}, env: []string{"NCCLWATCH_PLUGIN_DISABLE=1"}, want: info + rest},
		{name: "the plugin is missing on this node", conf: []string{"NCCLWATCH_PLUGIN=" + filepath.Join(dir, "gone.so")}, want: info + rest},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf := none
			if c.conf != nil {
				conf = writeConf(t, t.TempDir(), c.conf...)
			}
			cmd := exec.Command("sh", "slurm/task-prolog.sh")
			cmd.Env = append(os.Environ(), "SLURM_JOB_ID=42", "NCCLWATCH_DISABLE=0", "NCCLWATCH_PLUGIN_DISABLE=0",
				"NCCLWATCH_CONF="+conf, "NCCLWATCH_LOG_ROOT=", "NCCLWATCH_PLUGIN=", "NCCLWATCH_RUN_DIR=", "NCCLWATCH_PROFILER_ROOT=")
			cmd.Env = append(cmd.Env, c.env...)
			out, err := cmd.Output()
			if err != nil || string(out) != c.want {
				t.Fatalf("task-prolog.sh (%v) printed\n%s\nwant\n%s", err, out, c.want)
			}
		})
	}
}

// TestPrologProfilerDir: in plugin mode the prolog makes the job's folder for the plugin's
// files and hands it to the sidecar (NCCLWATCH_PROFILER_DIR, its --profiler-dir); the
// epilog removes it. Without the plugin there is no such folder or setting.
func TestPrologProfilerDir(t *testing.T) {
	for _, plugin := range []bool{true, false} {
		name := map[bool]string{true: "plugin mode", false: "logs only"}[plugin]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			lines := []string{"NCCLWATCH_BIN=/bin/true", "NCCLWATCH_SUPERVISOR=background",
				"NCCLWATCH_RUN_DIR=" + dir + "/run", "NCCLWATCH_LOG_ROOT=" + dir + "/logs",
				"NCCLWATCH_STATE_ROOT=" + dir + "/state"}
			if plugin {
				lines = append(lines, "NCCLWATCH_PLUGIN=/bin/sh", // any readable file
					"NCCLWATCH_ETCD_ENDPOINTS=http://127.0.0.1:1")
			} // else only the prolog's own settings: nothing else for the sidecar
			conf := writeConf(t, dir, lines...)
			env := append(os.Environ(), "NCCLWATCH_CONF="+conf, "SLURM_JOB_ID=77", "SLURMD_NODENAME=n1", "SLURM_JOB_UID=")
			for _, script := range []string{"slurm/prolog.sh", "slurm/epilog.sh"} {
				cmd := exec.Command("bash", script)
				cmd.Env = env
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", script, err, out)
				}
				profdir := filepath.Join(dir, "run", "profiler", "77")
				_, statErr := os.Stat(profdir)
				if script == "slurm/epilog.sh" {
					if statErr == nil {
						t.Errorf("the epilog left %s", profdir)
					}
					continue
				}
				envFile := filepath.Join(dir, "run", "77.n1.env")
				b, err := os.ReadFile(envFile)
				if err != nil {
					t.Fatal(err)
				}
				hands := strings.Contains(string(b), "NCCLWATCH_PROFILER_DIR="+profdir+"\n")
				if plugin != (statErr == nil) || plugin != hands {
					t.Errorf("%s exists: %v; the sidecar's environment names it: %v\n%s", profdir, statErr == nil, hands, b)
				}
				for _, prologOnly := range []string{"NCCLWATCH_PLUGIN=", "NCCLWATCH_BIN="} {
					if strings.Contains(string(b), prologOnly) {
						t.Errorf("the sidecar's environment holds the prolog's %s\n%s", prologOnly, b)
					}
				}
				waitBackground(t, filepath.Join(dir, "run", "77.n1.pid"))
			}
		})
	}
}

// waitBackground waits for the background "sidecar" (/bin/true) the prolog started, so the
// test's folder is not removed under it, then drops its pid file: a zombie that no init
// reaps would keep the epilog waiting for it to stop.
func waitBackground(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	proc := "/proc/" + strings.TrimSpace(string(b))
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st, err := os.ReadFile(proc + "/stat"); err != nil || strings.Contains(string(st), ") Z ") {
			if err := os.Remove(pidFile); err != nil {
				t.Error(err)
			}
			return
		}
	}
	t.Errorf("the prolog's background process %s still runs", proc)
}
