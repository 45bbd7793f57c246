// Command benchreconnect measures how fast the watchdog recovers from an etcd outage:
// `make bench-reconnect`. A real embedded etcd (same port, same data directory) is stopped
// for --outage, then started again, while a sidecar's publisher writes a node snapshot
// every second and a detector watches; per run it prints how long after etcd was back
//
//   - the node key held a snapshot written after the restart (the sidecar republished),
//     read by a client made after the restart, which has no reconnect backoff of its own;
//   - the detector's /readyz answered 200 again (its watch and reads work);
//   - the detector held a snapshot written after the restart (what it judges is fresh).
//
// The target is 5 s for all three (docs/scale.md#etcd-outages).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/detect/live"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdsnap"
	"github.com/ncclwatch/watchdog/snapshot"
)

const job, node = "bench-reconnect", "node-0"

func main() {
	outage := flag.Duration("outage", 20*time.Second, "how long etcd stays down")
	runs := flag.Int("runs", 3, "outages measured, one after the other")
	limit := flag.Duration("limit", 5*time.Second, "the target: a run slower than this fails the command")
	asJSON := flag.Bool("json", false, "print the runs as JSON")
	flag.Parse()
	if *outage <= 0 || *runs <= 0 || *limit <= 0 {
		fmt.Fprintln(os.Stderr, "benchreconnect: --outage, --runs and --limit must be positive")
		os.Exit(2)
	}
	res, err := measure(context.Background(), *outage, *runs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreconnect:", err)
		os.Exit(1)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	} else {
		report(res, *outage)
	}
	for _, r := range res {
		if r.RepublishS > limit.Seconds() || r.DetectorReadyS > limit.Seconds() || r.DetectorFreshS > limit.Seconds() {
			fmt.Fprintf(os.Stderr, "benchreconnect: run %d is over the %s target\n", r.Run, *limit)
			os.Exit(1)
		}
	}
}

// run is one outage's measurements, in seconds after etcd served again.
type run struct {
	Run            int     `json:"run"`
	OutageS        float64 `json:"outage_s"`
	RepublishS     float64 `json:"sidecar_republish_s"`
	DetectorReadyS float64 `json:"detector_ready_s"`
	DetectorFreshS float64 `json:"detector_fresh_snapshot_s"`
}

func report(res []run, outage time.Duration) {
	fmt.Printf("etcd stopped for %s, then started again on the same port and data; seconds after it served again:\n", outage)
	fmt.Printf("  %-4s %-18s %-18s %-22s\n", "run", "sidecar republish", "detector /readyz", "detector fresh snapshot")
	var rep, ready, fresh []float64
	for _, r := range res {
		fmt.Printf("  %-4d %-18.2f %-18.2f %-22.2f\n", r.Run, r.RepublishS, r.DetectorReadyS, r.DetectorFreshS)
		rep, ready, fresh = append(rep, r.RepublishS), append(ready, r.DetectorReadyS), append(fresh, r.DetectorFreshS)
	}
	fmt.Printf("  %-4s %-18.2f %-18.2f %-22.2f\n", "max", maxOf(rep), maxOf(ready), maxOf(fresh))
}

func maxOf(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)-1]
}

func measure(ctx context.Context, outage time.Duration, runs int) ([]run, error) {
	dir, err := os.MkdirTemp("", "bench-reconnect-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)
	etcd, err := etcdembed.Start(ctx, etcdembed.Options{Dir: dir, Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	conn := etcdconn.Config{Endpoints: etcd.Endpoints()}

	pubCli, err := etcdconn.New(conn)
	if err != nil {
		return nil, err
	}
	defer pubCli.Close()
	detCli, err := etcdconn.New(conn)
	if err != nil {
		return nil, err
	}
	defer detCli.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	pub := assemble.Publisher(pubCli, job, node, assemble.PublishConfig{}, quiet, nil)
	wg.Add(1)
	go func() { defer wg.Done(); _ = pub.Run(ctx, snapshotNow) }()
	det, err := assemble.Detector(detCli, assemble.DetectorConfig{Logger: quiet})
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = det.Run(ctx) }()
	api := httptest.NewServer(det.Handler())
	defer api.Close()

	var out []run
	for i := 1; i <= runs; i++ {
		// Steady state first: the detector holds a recent snapshot.
		if _, err := waitFor(ctx, 30*time.Second, func() bool { return detectorHas(det, time.Now().Add(-2*time.Second)) }); err != nil {
			return nil, fmt.Errorf("run %d: no steady state before the outage: %w", i, err)
		}
		etcd.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(outage):
		}
		if err := etcd.Resume(ctx); err != nil {
			return nil, err
		}
		back := time.Now()
		r := run{Run: i, OutageS: outage.Seconds()}
		var rerr error
		var mu sync.Mutex
		var mwg sync.WaitGroup
		wait := func(dst *float64, cond func() bool) {
			mwg.Add(1)
			go func() {
				defer mwg.Done()
				d, err := waitFor(ctx, 60*time.Second, cond)
				mu.Lock()
				defer mu.Unlock()
				*dst = d.Seconds()
				rerr = errors.Join(rerr, err)
			}()
		}
		observer, err := etcdconn.New(conn)
		if err != nil {
			return nil, err
		}
		wait(&r.RepublishS, func() bool { return keyWrittenAfter(ctx, observer, back) })
		wait(&r.DetectorReadyS, func() bool { return status(api.URL+"/readyz") == http.StatusOK })
		wait(&r.DetectorFreshS, func() bool { return detectorHas(det, back) })
		mwg.Wait()
		observer.Close()
		if rerr != nil {
			return nil, fmt.Errorf("run %d: %w", i, rerr)
		}
		out = append(out, r)
	}
	return out, nil
}

// snapshotNow is the node's snapshot: one rank whose newest op is stamped with the time of
// the write, so a reader can tell when it was published.
func snapshotNow() ([]byte, error) {
	now := snapshot.MicrosOf(time.Now())
	last := snapshot.Op{Seq: int64(now), Op: "AllReduce", Count: 1, Dtype: "float32", Red: "sum", T: now}
	return snapshot.Encode(&snapshot.Node{Job: job, Node: node, Time: now, Started: 1, Processes: []snapshot.Process{{
		Host: node, PID: 1, Rank: 0, LocalRank: 0, Comms: []snapshot.Comm{{ID: "0xbench", Ptr: "0x1", Rank: 0, NRanks: 1,
			State: snapshot.CommReady, Count: int64(now), Last: &last}},
	}}})
}

// keyWrittenAfter reads the node key through a client made after the restart.
func keyWrittenAfter(ctx context.Context, cli *clientv3.Client, t time.Time) bool {
	octx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	n, err := etcdsnap.ReadNode(octx, cli, job, node)
	return err == nil && !n.Time.Time().Before(t)
}

// detectorHas reports whether the detector holds a snapshot published at or after t.
func detectorHas(det *live.Detector, t time.Time) bool {
	v, ok := det.JobView(job)
	if !ok {
		return false
	}
	for _, c := range v.Communicators {
		for _, m := range c.Members {
			if m.LastOp != nil && !m.LastOp.T.Time().Before(t) {
				return true
			}
		}
	}
	return false
}

func status(url string) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitFor polls cond every 10 ms and returns how long it took to hold.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) (time.Duration, error) {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return time.Since(start), fmt.Errorf("not within %s", limit)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
