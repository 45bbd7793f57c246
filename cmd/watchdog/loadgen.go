package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ncclwatch/watchdog/internal/loadgen"
)

func runLoadgen(ctx context.Context, args []string) error {
	fs := newFlags("loadgen", `usage: watchdog loadgen [flags]

Measures the watchdog at scale: simulated sidecars of --ranks ranks publish through the real
publisher to etcd, a real detector process watches, one rank goes silent after --warmup,
and the time to its incident, etcd's load and the detector's cost are printed
(docs/scale.md).`)
	ranks := fs.Int("ranks", 4096, "simulated ranks (8 per node)")
	pp := fs.Int("pp", 4, "pipeline stages")
	endpoints := fs.String("etcd-endpoints", "", "external etcd (empty: embedded in this process)")
	warmup := fs.Duration("warmup", 20*time.Second, "healthy time before a rank goes silent")
	after := fs.Duration("wait", 40*time.Second, "longest wait for the incident")
	asJSON := fs.Bool("json", false, "print the measurements as JSON")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := errors.Join(positiveInt("ranks", *ranks), positiveInt("pp", *pp), notNegative("warmup", warmup.Seconds()),
		positiveDuration("wait", *after)); err != nil {
		return err
	}
	res, err := loadgen.Run(ctx, loadgen.Options{Ranks: *ranks, PP: *pp, Endpoints: splitList(*endpoints), Warmup: *warmup, After: *after})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Printf("%d ranks on %d nodes (%s etcd), %.0f s\n", res.Ranks, res.Nodes, res.Etcd, res.DurationS)
	fmt.Printf("etcd writes      %.0f/s (%.2f per node per s), %.1f MB/s, %.1f KB per snapshot\n", res.EtcdWritesPerS, res.WritesPerNodePerS, res.BytesPerS/1e6, res.SnapshotBytesAvg/1e3)
	fmt.Printf("detector         %.2f CPU s/s, peak RSS %.0f MiB, evaluation p50 %.0f ms p99 %.0f ms, watch lag p50 %.0f ms p99 %.0f ms\n",
		res.DetectorCPUPerS, res.DetectorPeakRSSMiB, res.EvalP50Ms, res.EvalP99Ms, res.WatchLagP50Ms, res.WatchLagP99Ms)
	fmt.Printf("silent rank %d   detected as %s %v after %.1f s\n", res.InjectedRank, res.DetectedKind, res.DetectedCulprits, res.DetectionLatencyS)
	return nil
}
