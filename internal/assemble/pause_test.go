package assemble

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/internal/jobsim"
	"github.com/ncclwatch/watchdog/snapshot"
)

// childSidecarEnv makes the test binary a sidecar process (TestMain): a real process that a
// test can SIGSTOP, as an overloaded or frozen node would stop it.
const childSidecarEnv = "NCCLWATCH_TEST_CHILD_SIDECAR"

// childSidecar is what the child sidecar runs.
type childSidecar struct {
	Endpoints []string
	Job, Node string
	Logs      string // glob
}

func TestMain(m *testing.M) {
	if v := os.Getenv(childSidecarEnv); v != "" {
		os.Exit(runChildSidecar(v))
	}
	os.Exit(m.Run())
}

// runChildSidecar runs a sidecar until SIGTERM.
func runChildSidecar(spec string) int {
	var c childSidecar
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: c.Endpoints})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	sc, release, err := Sidecar(ctx, cli, pausedJobSidecar(c.Job, c.Node, c.Logs))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer release()
	sc.Run(ctx)
	return 0
}

// pausedJobSidecar is the configuration of each sidecar of TestPausedSidecarIsNoLostNode.
func pausedJobSidecar(job, node, logs string) SidecarConfig {
	return SidecarConfig{Job: job, Node: node, LogPatterns: []string{logs}, PollLogs: true, SampleEvery: 250 * time.Millisecond,
		Publish: PublishConfig{LeaseTTL: 3 * time.Second, Interval: 500 * time.Millisecond}, Logger: slog.New(slog.DiscardHandler)}
}

// TestPausedSidecarIsNoLostNode: a node's sidecar, a real process, SIGSTOPped for 20 s
// while its ranks go on (the simulated job keeps writing their logs, and the other node's
// ranks keep completing collectives with them). Its lease expires, yet no critical incident
// opens: the detector says, as a monitoring warning, that the sidecar is silent while its
// ranks keep completing collectives. Real embedded etcd, real sidecars, the real detector.
func TestPausedSidecarIsNoLostNode(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a sidecar for 20 s")
	}
	_, cli := etcdtest.Start(t, etcdembed.Options{})
	dir := t.TempDir()
	sim, err := jobsim.New(jobsim.Config{Nodes: 2, RanksPerNode: 2, Steps: 200, StepTime: 200 * time.Millisecond,
		Jitter: 4 * time.Millisecond, Timestamps: true, Seed: 7}, dir)
	if err != nil {
		t.Fatal(err)
	}
	const job = "paused-sidecar"
	nodes := sim.Nodes()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	det, err := Detector(cli, DetectorConfig{Interval: 500 * time.Millisecond, ResolveAfter: 2 * time.Second, LeaseTTL: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); det.Run(ctx) }()

	// node0's sidecar in this process, node1's in a child process.
	sc, release, err := Sidecar(ctx, cli, pausedJobSidecar(job, nodes[0].Name, filepath.Join(nodes[0].LogDir, "*.log")))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	wg.Add(1)
	go func() { defer wg.Done(); sc.Run(ctx) }()
	spec, _ := json.Marshal(childSidecar{Endpoints: cli.Endpoints(), Job: job, Node: nodes[1].Name, Logs: filepath.Join(nodes[1].LogDir, "*.log")})
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childSidecarEnv+"="+string(spec))
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = child.Process.Signal(syscall.SIGCONT)
		_ = child.Process.Signal(syscall.SIGTERM)
		_ = child.Wait()
	}()
	wg.Add(1)
	go func() { defer wg.Done(); _ = sim.Run(ctx) }()

	seen := map[string]incident.Incident{}
	watch := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			for _, inc := range det.Incidents(job, "") {
				seen[inc.ID] = inc
			}
		}
	}
	// Both nodes published and the job runs for a few seconds.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := cli.Get(ctx, snapshot.NodeKey(job, nodes[1].Name))
		if err == nil && len(resp.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child sidecar never published")
		}
		time.Sleep(100 * time.Millisecond)
	}
	watch(3 * time.Second)

	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	watch(20 * time.Second)
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("sidecar of %s paused for %s", nodes[1].Name, time.Since(paused).Round(time.Millisecond))
	watch(5 * time.Second)

	blind := false
	for _, inc := range seen {
		t.Logf("%s %s [%s] %s: %s", inc.ID, inc.Kind, inc.Severity, inc.State, inc.Summary)
		if inc.Severity == incident.SeverityCritical {
			t.Errorf("critical incident while only a sidecar was paused: %s %s: %s", inc.ID, inc.Kind, inc.Summary)
		}
		if inc.Kind == incident.KindMonitoring && strings.Contains(inc.Summary, "keep completing collectives") {
			blind = true
		}
	}
	if !blind {
		t.Error("no monitoring incident said that the paused node's sidecar is silent while its ranks keep completing collectives")
	}
}
