package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/jobsim"
	"github.com/ncclwatch/watchdog/internal/procstat"
)

// childWatchdogEnv makes the test binary the watchdog command (TestMain), with the JSON
// list of arguments it holds: a real process that a test can SIGSTOP.
const childWatchdogEnv = "NCCLWATCH_TEST_CHILD_WATCHDOG"

func TestMain(m *testing.M) {
	if v := os.Getenv(childWatchdogEnv); v != "" {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(exitUsage)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, args, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestPausedTrialDetectorIsNoLostNode: `watchdog detector` in trial mode (its etcd embedded
// in its own process, every setting at its default), SIGSTOPped for 20 s while a job's two
// nodes go on: their sidecars, in this process, cannot publish (etcd is stopped with the
// detector), and when it resumes their leases are past their TTL, as is the detector's
// own. No critical incident opens, no lost_node at all, nothing about the job but
// monitoring warnings: its ranks never stopped. The detector says that it ran late (its
// pulse: the pause ended the term it froze, whose evaluations' lateness went with it).
// Judged through its API over HTTP, until after its hang window has passed since the pause.
func TestPausedTrialDetectorIsNoLostNode(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a detector for 20 s")
	}
	etcdAddr, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal([]string{"detector", "--embedded-etcd-listen", etcdAddr, "--http", httpAddr, "--log-level", "warn"})
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childWatchdogEnv+"="+string(args))
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = child.Process.Signal(syscall.SIGCONT)
		_ = child.Process.Signal(syscall.SIGTERM)
		_ = child.Wait()
	}()
	api := "http://" + httpAddr
	client := http.Client{Timeout: 2 * time.Second}
	get := func(path string, v any) bool {
		resp, err := client.Get(api + path)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if v == nil {
			return resp.StatusCode == http.StatusOK
		}
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
	}
	waitUntil(t, 60*time.Second, "the trial detector ready", func() bool { return get("/readyz", nil) })

	dir := t.TempDir()
	sim, err := jobsim.New(jobsim.Config{Nodes: 2, RanksPerNode: 2, Steps: 400, StepTime: 200 * time.Millisecond,
		Jitter: 4 * time.Millisecond, Timestamps: true, Seed: 11}, dir)
	if err != nil {
		t.Fatal(err)
	}
	const job = "paused-detector"
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, n := range sim.Nodes() {
		cli, err := etcdconn.New(etcdconn.Config{Endpoints: []string{"http://" + etcdAddr}})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		// The sidecar's defaults (lease TTL 10 s, a write a second at most), polling logs.
		sc, release, err := assemble.Sidecar(ctx, cli, assemble.SidecarConfig{Job: job, Node: n.Name,
			LogPatterns: []string{filepath.Join(n.LogDir, "*.log")}, PollLogs: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		wg.Add(1)
		go func() { defer wg.Done(); sc.Run(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = sim.Run(ctx) }()

	seen := map[string]incident.Incident{}
	watch := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			var incs []incident.Incident
			if get("/api/v1/incidents", &incs) {
				for _, inc := range incs {
					seen[inc.ID] = inc
				}
			}
		}
	}
	waitUntil(t, 30*time.Second, "both nodes reporting", func() bool {
		var v struct {
			Nodes []struct{ State string } `json:"nodes"`
		}
		return get("/api/v1/jobs/"+job, &v) && len(v.Nodes) == 2 && v.Nodes[0].State == "reporting" && v.Nodes[1].State == "reporting"
	})
	watch(3 * time.Second)

	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	time.Sleep(20 * time.Second)
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("trial detector paused for %s", time.Since(paused).Round(time.Millisecond))
	// Past the default hang window (10 s) and resolve time (5 s) after the pause.
	watch(15 * time.Second)

	late := false
	for _, inc := range seen {
		t.Logf("%s %s [%s] %s: %s", inc.ID, inc.Kind, inc.Severity, inc.State, inc.Summary)
		late = late || strings.HasPrefix(inc.Key, "monitoring:late:detector:") && inc.Severity == incident.MonitoringSeverity
		if inc.Severity == incident.SeverityCritical || inc.Kind == incident.KindLostNode {
			t.Errorf("the detector's own pause paged about the job: %s %s [%s]: %s", inc.ID, inc.Kind, inc.Severity, inc.Summary)
		}
		if inc.Job == job && inc.Kind != incident.KindMonitoring {
			t.Errorf("an incident about the job, which never stopped: %s %s [%s]: %s", inc.ID, inc.Kind, inc.Severity, inc.Summary)
		}
	}
	if !late {
		t.Error("the detector did not say that it ran late: its pause went unreported")
	}
}

// waitUntil polls cond every 100 ms until it holds, failing the test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within %s", what, limit)
}
