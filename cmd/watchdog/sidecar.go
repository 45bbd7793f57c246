package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ncclwatch/watchdog/heartbeat"
	"github.com/ncclwatch/watchdog/heartbeat/ibport"
	"github.com/ncclwatch/watchdog/heartbeat/proc"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
)

func runSidecar(ctx context.Context, args []string) error {
	fs := newFlags("sidecar", `usage: watchdog sidecar [flags]

Follows this node's NCCL_DEBUG_FILE logs, samples its GPUs (NVML), network ports, NCCL RAS
and the ranks' processes, and publishes one snapshot of the node to etcd, at most once a
second. One per node, beside the training processes (Kubernetes: in the training pod).`)
	var ef etcdFlags
	ef.register(fs.FlagSet, "http://127.0.0.1:2379")
	var lf logFlags
	lf.register(fs.FlagSet)
	job := fs.String("job", defaultJob(), "job name (default: TORCHELASTIC_RUN_ID, SLURM_JOB_ID, else \"default\")")
	node := fs.String("node", "", "node name (default: hostname)")
	logs := fs.String("logs", "/var/log/nccl/*.log", "comma-separated globs of NCCL_DEBUG_FILE logs")
	stdoutLogs := fs.String("stdout-logs", "", "comma-separated globs of torchrun/PyTorch output logs (optional)")
	httpAddr := fs.String("http", "127.0.0.1:9301", "address for /metrics, /healthz, /readyz, /api/v1/snapshot")
	useNVML := fs.Bool("nvml", true, "sample GPUs through NVML")
	checkPIDs := fs.Bool("check-pids", true, "watch rank processes through /proc (needs the job's pid namespace)")
	procRoot := fs.String("proc-root", proc.DefaultProcRoot, "proc filesystem root")
	ibRoot := fs.String("ib-sysfs", ibport.DefaultIBRoot, "InfiniBand sysfs root")
	netRoot := fs.String("net-sysfs", ibport.DefaultNetRoot, "network interface sysfs root")
	netIfs := fs.String("net-interfaces", "", "comma-separated interfaces to sample (default: physical ones)")
	rasAddr := fs.String("ras-addr", "127.0.0.1:28028", "NCCL RAS address (empty: off)")
	stateDir := fs.String("state-dir", "/var/lib/ncclwatch", "where read offsets and parser checkpoints survive restarts (empty: none)")
	profilerDir := fs.String("profiler-dir", "auto", "comma-separated folders of the NCCL profiler plugin's regions (auto: the folders of --logs, then /dev/shm, as the plugin defaults; empty: off)")
	frDumpDir := fs.String("fr-dump-dir", "", "folder PyTorch writes its Flight Recorder dumps to (the folder of TORCH_FR_DUMP_TEMP_FILE): each rank's dump joins the node snapshot (empty: off)")
	logKeep := fs.Int("log-keep-mib", 1024, "keep each NCCL log's header and its last this many MiB on disk, free the rest once read (0: never free)")
	leaseTTL := fs.Duration("lease-ttl", 10*time.Second, "etcd lease TTL: the node key vanishes this long after the sidecar dies")
	interval := fs.Duration("publish-interval", time.Second, "shortest time between two etcd writes")
	pprofOn := fs.Bool("pprof", false, "serve Go profiles at /debug/pprof/ on --http")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (globs go in --logs)", fs.Arg(0))
	}
	if err := errors.Join(positiveDuration("lease-ttl", *leaseTTL), positiveDuration("publish-interval", *interval),
		notNegative("log-keep-mib", float64(*logKeep))); err != nil {
		return err
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ec := ef.config()
	ec.Logger = log // says why a connection fails (TLS, password), once per cause
	cli, err := etcdconn.New(ec)
	if err != nil {
		return err
	}
	defer cli.Close()
	profilerDirs := splitList(*profilerDir)
	if *profilerDir == "auto" {
		profilerDirs = heartbeat.DefaultProfilerDirs(splitList(*logs))
	}
	sc, release, err := assemble.Sidecar(ctx, cli, assemble.SidecarConfig{
		Job: *job, Node: *node, LogPatterns: splitList(*logs), StdoutPatterns: splitList(*stdoutLogs), StateDir: *stateDir,
		LogKeep: int64(*logKeep) << 20,
		Publish: assemble.PublishConfig{LeaseTTL: *leaseTTL, Interval: *interval}, NVML: *useNVML, RASAddr: *rasAddr,
		Ports: true, IBRoot: *ibRoot, NetRoot: *netRoot, NetInterfaces: splitList(*netIfs),
		CheckPIDs: *checkPIDs, ProcRoot: *procRoot, Logger: log, Registerer: reg, ProfilerDirs: profilerDirs, Version: stamped,
		FRDumpDir: *frDumpDir,
	})
	if err != nil {
		return err
	}
	defer release()
	var h http.Handler = sc.HTTPHandler(reg)
	if *pprofOn {
		h = withPprof(h)
	}
	srv, err := serveHTTP(ctx, *httpAddr, h, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	bi := build()
	log.Info("sidecar started", "job", *job, "node", sc.Snapshot().Node, "logs", *logs, "log_keep_mib", *logKeep, "profiler_dirs", profilerDirs, "fr_dump_dir", *frDumpDir,
		"etcd", ef.endpoints, "http", *httpAddr, "version", bi.Version, "revision", bi.Revision)
	return sc.Run(ctx)
}

// withPprof adds Go's profiling endpoints (for an operator chasing the sidecar's cost).
func withPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.Handle("/", h)
	return mux
}

// defaultJob names the job from the launcher's environment.
func defaultJob() string {
	for _, v := range []string{"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"} {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	return "default"
}

// serveHTTP listens now (so a bad address fails at start) and serves until ctx ends.
func serveHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return srv, nil
}
