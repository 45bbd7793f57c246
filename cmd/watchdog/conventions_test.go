package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/internal/procstat"
)

// TestEveryCommandHelpExitsZero: --help of every command prints its usage and flags on
// stdout and exits 0, and -h does the same.
func TestEveryCommandHelpExitsZero(t *testing.T) {
	for _, c := range commands() {
		for _, flag := range []string{"--help", "-h"} {
			t.Run(c.name+" "+flag, func(t *testing.T) {
				var out, errb bytes.Buffer
				var code int
				out.WriteString(captureStdout(t, func() { code = run(t.Context(), []string{c.name, flag}, &out, &errb) }))
				if code != exitOK || errb.Len() != 0 {
					t.Fatalf("exit %d, stderr %q", code, errb.String())
				}
				if c.name != "version" && !strings.Contains(out.String(), "usage: watchdog "+c.name) {
					t.Errorf("no usage line:\n%s", out.String())
				}
			})
		}
	}
}

// TestDurationsLoggedAsDurations: a retry delay reads "1.5s" in the JSON logs, not 1500000000.
func TestDurationsLoggedAsDurations(t *testing.T) {
	var b bytes.Buffer
	lf := logFlags{format: "json", level: "info"}
	log, err := lf.logger(&b)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("retry", "retry_in", 1500*time.Millisecond, slog.Group("g", "wait", 2*time.Minute))
	if !strings.Contains(b.String(), `"retry_in":"1.5s"`) || !strings.Contains(b.String(), `"wait":"2m0s"`) {
		t.Errorf("log line %s", b.String())
	}
}

// TestDoctorAndEtcdRolesExits: doctor exits 1 when a check fails, 0 when none does, 2 on a
// bad command line; etcd-roles prints its script, and wants one of --print and --apply.
func TestDoctorAndEtcdRolesExits(t *testing.T) {
	dir := t.TempDir()
	bad, good := dir+"/bad.env", dir+"/good.env"
	os.WriteFile(bad, []byte("NCCL_DEBUG=WARN\n"), 0o600)
	os.WriteFile(good, []byte("NCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS=INIT,COLL,NET\nNCCL_DEBUG_FILE=/var/log/nccl/nccl.%h.%p.log\n"+
		"NCCL_DEBUG_TIMESTAMP_LEVELS=ALL\nNCCL_DEBUG_TIMESTAMP_FORMAT=[%F %T.%6f] \n"), 0o600)
	// doctor --config: the detector's file with a typo, and one naming a key file that is not there.
	typo, sealed := dir+"/typo.yaml", dir+"/sealed.yaml"
	os.WriteFile(typo, []byte("interval: 1s\nhang_flor: 5s\n"), 0o600)
	os.WriteFile(sealed, []byte("incident_key_file: "+dir+"/no-keys\n"), 0o600)
	for _, c := range []struct {
		args   []string
		exit   int
		stdout string
	}{
		{[]string{"doctor", "--nvml=false", "--training-env", bad}, exitError, "FAIL  nccl   NCCL_DEBUG=\"WARN\""},
		{[]string{"doctor", "--nvml=false", "--training-env", good, "--logs", "/var/log/nccl/*.log"}, exitOK, "ok    nccl   NCCL_DEBUG=INFO"},
		{[]string{"doctor", "--nvml=false", "--training-env", good, "--strict"}, exitError, "warn  alerts"},
		{[]string{"doctor", "--nvml=false", "--config", "../../deploy/examples/detector.yaml"}, exitOK,
			"ok    config ../../deploy/examples/detector.yaml parses strictly"},
		{[]string{"doctor", "--nvml=false", "--config", "../../deploy/examples/detector.yaml"}, exitOK,
			`ok    alerts notifier "console" (console) builds from ../../deploy/examples/detector.yaml (alerts:)`},
		{[]string{"doctor", "--nvml=false", "--config", typo}, exitError, "FAIL  config"},
		{[]string{"doctor", "--nvml=false", "--config", sealed}, exitError, "FAIL  keys   incident_key_file"},
		{[]string{"doctor", "--nvml=false", "--alerts", "../../deploy/examples/detector.yaml"}, exitError, "checked with --config"},
		{[]string{"doctor", "--role", "admin"}, exitUsage, ""},
		{[]string{"doctor", "--training-env", dir + "/missing"}, exitUsage, ""},
		{[]string{"etcd-roles"}, exitUsage, ""},
		{[]string{"etcd-roles", "--print", "--jobs", "a/b"}, exitUsage, ""},
		{[]string{"etcd-roles", "--apply", "--etcd-endpoints", "http://127.0.0.1:1"}, exitUsage, ""},
		{[]string{"etcd-roles", "--remove", "--etcd-endpoints", "http://127.0.0.1:1"}, exitUsage, ""},
		{[]string{"etcd-roles", "--apply", "--print"}, exitUsage, ""},
		{[]string{"etcd-roles", "--apply", "--jobs-only", "--jobs", "a", "--certificate-only", "--job-password-key", "k"}, exitUsage, ""},
		{[]string{"etcd-roles", "--write-password", dir + "/pw", "--jobs", "a,b", "--job-password-key", dir + "/missing"}, exitError, ""},
		{[]string{"etcd-roles", "--print"}, exitOK, "etcdctl role grant-permission --prefix ncclwatch-sidecar write '/ncclwatch/v1/jobs/'"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Setenv("SLACK_WEBHOOK_URL", "")
			t.Setenv("PAGERDUTY_ROUTING_KEY", "")
			var out, errb bytes.Buffer
			var code int
			out.WriteString(captureStdout(t, func() { code = run(t.Context(), c.args, &out, &errb) }))
			if code != c.exit || !strings.Contains(out.String(), c.stdout) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", code, c.exit, out.String(), errb.String())
			}
		})
	}
}

// TestStartWithoutEtcd: sidecar and detector with a user (--etcd-user) whose etcd is
// unreachable start anyway, serve /healthz, answer /readyz 503 saying why, and stop
// cleanly: under Slurm nothing would restart a process that exited.
func TestStartWithoutEtcd(t *testing.T) {
	dead, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	pw := t.TempDir() + "/password"
	os.WriteFile(pw, []byte("secret\n"), 0o600)
	common := []string{"--etcd-endpoints", "http://" + dead, "--etcd-user", "ncclwatch", "--etcd-password-file", pw, "--log-level", "error"}
	for _, c := range []struct {
		cmd  string
		args []string
		says string
	}{
		{"detector", nil, "etcd not read yet"},
		{"sidecar", []string{"--job", "j", "--nvml=false", "--ras-addr", "", "--logs", t.TempDir() + "/*.log", "--state-dir", ""}, "etcd unreachable"},
	} {
		t.Run(c.cmd, func(t *testing.T) {
			addr, err := procstat.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan int, 1)
			args := append(append([]string{c.cmd, "--http", addr}, common...), c.args...)
			go func() { done <- run(ctx, args, io.Discard, io.Discard) }()
			var code int
			var body string
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					code, body = resp.StatusCode, string(b)
					break
				}
				select {
				case exit := <-done:
					t.Fatalf("exited %d while etcd was unreachable", exit)
				case <-time.After(100 * time.Millisecond):
				}
			}
			if code != http.StatusServiceUnavailable || !strings.Contains(body, c.says) {
				t.Errorf("/readyz: %d %q, want 503 saying %q", code, body, c.says)
			}
			cancel()
			select {
			case exit := <-done:
				if exit != exitOK {
					t.Errorf("exit %d after a stop", exit)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("did not stop")
			}
		})
	}
}
