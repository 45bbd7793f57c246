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

Measures the watchdog at scale: simulated sidecars of --ranks ranks (in --jobs jobs) publish
through the real publisher to etcd, --replicas detector processes share the jobs, one rank
goes silent after --warmup, and the time to its incident, etcd's load and each process's
cost are printed (docs/scale.md). The simulated sidecars run in a process of their own
(--generate), so that the detectors' CPU is theirs alone.`)
	ranks := fs.Int("ranks", 4096, "simulated ranks (8 per node)")
	jobs := fs.Int("jobs", 1, "jobs the ranks are split into (the silent rank is in the first)")
	replicas := fs.Int("replicas", 1, "detector replicas, each in its own process")
	pp := fs.Int("pp", 4, "pipeline stages")
	// The simulated sidecars connect with --etcd-* (a sidecar's user and certificate), the
	// detectors with --detector-etcd-* (theirs): one identity per part, as deployed.
	var ef etcdFlags
	ef.register(fs.FlagSet, "")
	detUser := fs.String("detector-etcd-user", "", "etcd user of the detector processes (default: --etcd-user)")
	detPassword := fs.String("detector-etcd-password-file", "", "file holding the detectors' etcd password (default: --etcd-password-file)")
	detCert := fs.String("detector-etcd-cert-file", "", "the detectors' client certificate for etcd TLS (default: --etcd-cert-file)")
	detKey := fs.String("detector-etcd-key-file", "", "the detectors' client key for etcd TLS (default: --etcd-key-file)")
	warmup := fs.Duration("warmup", 20*time.Second, "healthy time before a rank goes silent")
	after := fs.Duration("wait", 40*time.Second, "longest wait for the incident")
	step := fs.Duration("step", time.Second, "simulated training step")
	clients := fs.Int("clients", 8, "etcd clients the simulated sidecars share")
	generate := fs.Bool("generate", false, "be the generator process only: publish the simulated nodes to --etcd-endpoints and report on stdout (run by loadgen itself)")
	asJSON := fs.Bool("json", false, "print the measurements as JSON")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := errors.Join(positiveInt("ranks", *ranks), positiveInt("jobs", *jobs), positiveInt("replicas", *replicas),
		positiveInt("pp", *pp), notNegative("warmup", warmup.Seconds()), positiveDuration("wait", *after),
		positiveDuration("step", *step), positiveInt("clients", *clients)); err != nil {
		return err
	}
	sidecar := ef.config()
	detector := sidecar
	for _, f := range []struct {
		v   string
		dst *string
	}{{*detUser, &detector.Username}, {*detPassword, &detector.PasswordFile}, {*detCert, &detector.CertFile}, {*detKey, &detector.KeyFile}} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	if *generate {
		if len(sidecar.Endpoints) == 0 {
			return usagef("--generate needs --etcd-endpoints")
		}
		return loadgen.Generate(ctx, loadgen.GenerateOptions{Conn: sidecar, Ranks: *ranks, Jobs: *jobs, PP: *pp,
			Warmup: *warmup, StepTime: *step, Clients: *clients}, os.Stdout)
	}
	res, err := loadgen.Run(ctx, loadgen.Options{Ranks: *ranks, Jobs: *jobs, Replicas: *replicas, PP: *pp, Endpoints: sidecar.Endpoints,
		Sidecar: sidecar, Detector: detector, Warmup: *warmup, After: *after, StepTime: *step, Clients: *clients})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Printf("%d ranks on %d nodes in %d job(s), %d detector replica(s) (%s etcd), %.0f s\n", res.Ranks, res.Nodes, res.Jobs,
		res.Replicas, res.Etcd, res.DurationS)
	fmt.Printf("etcd writes      %.0f/s (%.2f per node per s), %.2f MB/s (%.0f B/s per rank), %.0f B per write\n", res.EtcdWritesPerS,
		res.WritesPerNodePerS, res.BytesPerS/1e6, res.BytesPerRankPerS, res.SnapshotBytesAvg)
	fmt.Printf("detector         %.2f CPU s/s, peak RSS %.0f MiB, evaluation p50 %.0f ms p99 %.0f ms, watch lag p50 %.0f ms p99 %.0f ms\n",
		res.DetectorCPUPerS, res.DetectorPeakRSSMiB, res.EvalP50Ms, res.EvalP99Ms, res.WatchLagP50Ms, res.WatchLagP99Ms)
	for _, r := range res.ByReplica {
		fmt.Printf("  %-14s %d job(s), %.2f CPU s/s, peak RSS %.0f MiB\n", r.ID, r.JobsOwned, r.CPUPerS, r.PeakRSSMiB)
	}
	fmt.Printf("generator        %.2f CPU s/s; this process (etcd) %.2f CPU s/s\n", res.GeneratorCPUPerS, res.EtcdCPUPerS)
	fmt.Printf("silent rank %d   detected as %s %v after %.1f s\n", res.InjectedRank, res.DetectedKind, res.DetectedCulprits, res.DetectionLatencyS)
	return nil
}
