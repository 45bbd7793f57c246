package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/internal/procstat"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestCommandLine: the conventions every command keeps: help on stdout with exit 0 and each
// flag's environment twin, the version, an unknown command named, values out of range
// refused with exit 2 before anything starts, and no error prefix said twice.
func TestCommandLine(t *testing.T) {
	t.Setenv("NCCLWATCH_JOB", "")
	closed, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		args   []string
		exit   int
		stdout string // a regexp the output must match
		stderr string
	}{
		{"no command", nil, 2, `^$`, `usage: watchdog <command>`},
		{"help", []string{"--help"}, 0, `(?s)Commands:.*status .*NCCLWATCH_ETCD_ENDPOINTS.*Exit status:`, `^$`},
		{"help word", []string{"help"}, 0, `Commands:`, `^$`},
		{"version flag", []string{"--version"}, 0, `^watchdog \S+ \(revision \S+, go1\.`, `^$`},
		{"version command", []string{"version"}, 0, `^watchdog \S+ \(revision \S+, go1\.`, `^$`},
		{"unknown command", []string{"stauts"}, 2, `^$`, `unknown command "stauts"`},
		{"sidecar help", []string{"sidecar", "--help"}, 0, `(?s)--etcd-endpoints string +\$NCCLWATCH_ETCD_ENDPOINTS.*--lease-ttl duration +\$NCCLWATCH_LEASE_TTL.*Exit status:`, `^$`},
		{"detector help", []string{"detector", "-h"}, 0, `--hang-floor duration +\$NCCLWATCH_HANG_FLOOR`, `^$`},
		{"status help", []string{"status", "--help"}, 0, `(?s)--every duration +\$NCCLWATCH_EVERY.*3  the job is unknown`, `^$`},
		{"bad flag", []string{"status", "--bogus"}, 2, `^$`, `^watchdog status: flag provided but not defined: -bogus\nRun 'watchdog status --help'`},
		{"status every 0", []string{"status", "--every", "0"}, 2, `^$`, `--every 0s: must be positive`},
		{"status negative every", []string{"status", "--every", "-1s"}, 2, `^$`, `--every -1s: must be positive`},
		{"status bad url", []string{"status", "--detector", "ftp://x"}, 2, `^$`, `want a URL`},
		{"negative hang floor", []string{"detector", "--hang-floor", "-5s"}, 2, `^$`, `rules.hang_floor -5s: must be positive`},
		{"zero interval", []string{"detector", "--interval", "0"}, 2, `^$`, `interval 0s: must be positive`},
		{"slowdown share", []string{"detector", "--slowdown-share", "2"}, 2, `^$`, `slowdown_share 2: must be in \(0, 1\]`},
		{"sidecar lease 0", []string{"sidecar", "--lease-ttl", "0"}, 2, `^$`, `--lease-ttl 0s: must be positive`},
		{"simulate ranks", []string{"simulate", "--out", t.TempDir(), "--ranks-per-node", "0"}, 2, `^$`, `--ranks-per-node 0: must be positive`},
		{"nvml-probe n", []string{"nvml-probe", "--n", "-1"}, 2, `^$`, `--n -1: must be positive`},
		{"loadgen ranks", []string{"loadgen", "--ranks", "0"}, 2, `^$`, `--ranks 0: must be positive`},
		{"demo nodes", []string{"demo", "--nodes", "0"}, 2, `^$`, `--nodes 0: must be positive`},
		{"prefix once", []string{"sidecar", "--job", "", "--nvml=false", "--ras-addr", "", "--http", closed}, 1, `^$`, `^watchdog sidecar: no job name\n$`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			var code int
			// Commands write to the process's stdout; top-level help and errors to the writers.
			out.WriteString(captureStdout(t, func() { code = run(t.Context(), c.args, &out, &errb) }))
			if code != c.exit || !regexp.MustCompile(c.stdout).MatchString(out.String()) || !regexp.MustCompile(c.stderr).MatchString(errb.String()) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", code, c.exit, out.String(), errb.String())
			}
		})
	}
}

// captureStdout returns what fn wrote to os.Stdout.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&out, r); close(done) }()
	fn()
	os.Stdout = saved
	w.Close()
	<-done
	return out.String()
}

// TestStatus: `watchdog status` against a real detector over HTTP: exit 1 when the detector
// is down, 3 for a job it does not know, host:port as well as a URL; the view fits 80
// columns with a header and a legend, and shows each rank's global rank beside its rank in
// the communicator.
func TestStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	closed, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = statusMain(ctx, []string{"--detector", closed, "--once"}, &out)
	if code := finish("status", err, &out); code != exitError || !strings.Contains(out.String(), "detector unreachable") {
		t.Fatalf("detector down: exit %d, %q", code, out.String())
	}

	_, cli := etcdtest.Start(t, etcdembed.Options{})
	d, err := assemble.Detector(cli, assemble.DetectorConfig{Interval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(dctx) }()
	defer func() { stop(); <-done }()
	api := httptest.NewServer(assemble.DetectorHandler(d, nil))
	defer api.Close()

	// Global ranks 4 and 5 are ranks 0 and 1 of their communicator; rank 5 stopped 30 s ago.
	stalled := time.Now().Add(-30 * time.Second)
	for r, n := range []int64{100, 90} {
		last := snapshot.Op{Seq: n, Op: "AllReduce", Count: 1024, Dtype: "float32", Red: "sum", T: snapshot.MicrosOf(stalled)}
		node := &snapshot.Node{Job: "train", Node: "node-" + string(rune('a'+r)), Started: 1, Processes: []snapshot.Process{{
			Host: "node-" + string(rune('a'+r)), PID: 100 + r, Rank: 4 + r, CudaDev: 0,
			Comms: []snapshot.Comm{{ID: "0xfeedfacecafe", Ptr: "0x1", Rank: r, NRanks: 2, State: snapshot.CommReady, Count: n, Last: &last}},
		}}}
		b, err := snapshot.Encode(node)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, snapshot.NodeKey(node.Job, node.Node), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	hostPort := strings.TrimPrefix(api.URL, "http://")
	deadline := time.Now().Add(20 * time.Second)
	for {
		out.Reset()
		err = statusMain(ctx, []string{"--detector", hostPort, "--job", "train", "--once", "--width", "80"}, &out)
		if err == nil && strings.Contains(out.String(), "hang") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no hang incident in the view: %v\n%s", err, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	view := out.String()
	for _, line := range strings.Split(view, "\n") {
		if len([]rune(line)) > 80 {
			t.Errorf("line of %d columns at --width 80: %q", len([]rune(line)), line)
		}
	}
	for _, want := range []string{"ncclwatch status", "JOB train", "comm  rank", "c0    r4", "! c1    r5", "Legend:", "global rank"} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}

	// A second replica, which does not judge the job, shows the same view.
	d2, err := assemble.Detector(cli, assemble.DetectorConfig{Interval: 100 * time.Millisecond, ID: "second",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done2 := make(chan struct{})
	go func() { defer close(done2); d2.Run(dctx) }()
	defer func() { stop(); <-done2 }()
	api2 := httptest.NewServer(assemble.DetectorHandler(d2, nil))
	defer api2.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		out.Reset()
		err = statusMain(ctx, []string{"--detector", api2.URL, "--job", "train", "--once", "--width", "80"}, &out)
		if err == nil && strings.Contains(out.String(), "hang") && strings.Contains(out.String(), "! c1    r5") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second replica's view lacks the hang: %v\n%s", err, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	out.Reset()
	err = statusMain(ctx, []string{"--detector", api.URL, "--job", "nope", "--once"}, &out)
	if code := finish("status", err, &out); code != exitUnknownJob || !strings.Contains(out.String(), `unknown job "nope"`) || !strings.Contains(out.String(), "train") {
		t.Fatalf("unknown job: exit %d, %q", code, out.String())
	}
}

// TestNotifierLog: the detector says at start where incidents go, and warns loudly when
// nowhere.
func TestNotifierLog(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(slog.NewTextHandler(&b, nil))
	logNotifiers(log, &alert.Config{})
	if !strings.Contains(b.String(), "level=WARN") || !strings.Contains(b.String(), "NO ALERT NOTIFIER CONFIGURED") {
		t.Errorf("no notifier: %s", b.String())
	}
	b.Reset()
	cfg := &alert.Config{Notifiers: []alert.NotifierConfig{{Name: "pd", Type: "pagerduty"}, {Name: "chat", Type: "slack"}}}
	r := alert.RouteConfig{Notifiers: []string{"pd"}}
	r.Match.Severity = []incident.Severity{incident.SeverityCritical}
	cfg.Routes = []alert.RouteConfig{r}
	logNotifiers(log, cfg)
	for _, want := range []string{`notifier=pd type=pagerduty gets="route 1 (severity critical)"`, `level=WARN msg="alert notifier named by no route`, "notifier=chat"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, b.String())
		}
	}
}
