// Package assemble wires the watchdog's stages into running parts: a sidecar (the
// publisher, the sources and heartbeat.Sidecar), a detector (live.Detector) and the alert
// dispatcher a detector makes at each leadership term from an alert.Config. cmd/watchdog,
// the demo, the load generator and the end-to-end tests all build their parts here, so
// they run what production runs. Configurations are plain values; the demo and the tests
// inject simulated sources through them (a GPU library, sysfs roots, a liveness).
//
// Why a package and not constructors in the stage packages: a sidecar needs heartbeat,
// four source packages and the publisher, and a detector needs detect/live and alert. A
// constructor in heartbeat would make it import every source it only knows by interface,
// and one in alert would make alert import detect/live, the consumer of its dispatcher.
// Here the stages stay independent of each other and only this package knows them all.
package assemble

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/heartbeat"
	"github.com/ncclwatch/watchdog/heartbeat/gpu"
	"github.com/ncclwatch/watchdog/heartbeat/ibport"
	"github.com/ncclwatch/watchdog/heartbeat/proc"
	"github.com/ncclwatch/watchdog/heartbeat/publish"
	"github.com/ncclwatch/watchdog/heartbeat/ras"
	"github.com/ncclwatch/watchdog/internal/buildinfo"
	"github.com/ncclwatch/watchdog/snapshot"
)

// SidecarConfig describes one node's sidecar. A source left at its zero value is off; a
// zero duration is the stage's default.
type SidecarConfig struct {
	Job string
	// Node names the node (default: the hostname).
	Node string
	// LogPatterns are globs of NCCL_DEBUG_FILE logs; StdoutPatterns of launcher/PyTorch
	// output (optional).
	LogPatterns    []string
	StdoutPatterns []string
	// StateDir keeps read offsets and parser checkpoints across restarts ("" = none).
	StateDir string
	// ProfilerDirs are the folders of the NCCL profiler plugin's regions (none: the plugin
	// is not read; heartbeat.DefaultProfilerDirs gives the plugin's own defaults).
	ProfilerDirs []string
	// FRDumpDir is the folder PyTorch writes its Flight Recorder dumps to ("": not read).
	FRDumpDir string
	// PollLogs polls the logs instead of using inotify (tests, odd filesystems).
	PollLogs bool
	// LogKeep bounds each NCCL log on disk: its header and its last LogKeep bytes stay, the
	// rest is freed once read (0: never; heartbeat.Options.LogKeep).
	LogKeep int64
	// SampleEvery is the GPU and port sampling period (default 1 s).
	SampleEvery time.Duration
	// Publish says how the node key is kept in etcd (with no etcd client there is none:
	// the sidecar only serves its snapshot over HTTP).
	Publish PublishConfig

	// NVML samples the node's GPUs through NVML; where there is none (no driver, or a
	// build without cgo) one warning says so and the sidecar runs without GPU state.
	// GPULibrary, when set, is sampled instead (a fake or simulated node). GPUWindow is the
	// GPU state smoothing window (gpu.DefaultWindow when zero).
	NVML       bool
	GPULibrary gpu.Library
	GPUWindow  time.Duration

	// Ports samples InfiniBand and net ports under IBRoot and NetRoot (the real sysfs when
	// empty); NetInterfaces, when set, names the net interfaces.
	Ports         bool
	IBRoot        string
	NetRoot       string
	NetInterfaces []string

	// CheckPIDs watches the ranks' processes under ProcRoot (default /proc), which also
	// names the GPUs' processes. Liveness, when set, answers instead (simulated ranks).
	CheckPIDs bool
	ProcRoot  string
	Liveness  heartbeat.Liveness

	// RASAddr is the NCCL RAS service to poll ("" = off). Its report covers the whole job;
	// the sidecar keeps only its own ranks' counts (Sidecar.OwnsRank).
	RASAddr string

	Logger     *slog.Logger // default slog.Default()
	Registerer prometheus.Registerer
	// Version gives what the command was stamped with at build time, for
	// ncclwatch_build_info (nil: what the Go toolchain recorded).
	Version buildinfo.Stamped
}

// PublishConfig says how a node key is kept in etcd; zero values are publish's defaults
// (lease TTL 10 s, at most one write a second, backoff up to 2 s).
type PublishConfig struct {
	LeaseTTL   time.Duration
	Interval   time.Duration
	MaxBackoff time.Duration
}

// Sidecar builds a node's sidecar: its sources, and its publisher on cli (nil: none).
// ctx bounds NVML's event watcher; the sidecar's Run starts the rest. release frees what
// the sources hold (NVML): call it after Run has returned.
func Sidecar(ctx context.Context, cli *clientv3.Client, cfg SidecarConfig) (sc *heartbeat.Sidecar, release func(), err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, nil, fmt.Errorf("sidecar: node name: %w", err)
		}
		cfg.Node = h
	}
	opts := heartbeat.Options{
		Job: cfg.Job, Node: cfg.Node, LogPatterns: cfg.LogPatterns, StdoutPatterns: cfg.StdoutPatterns,
		StateDir: cfg.StateDir, ProfilerDirs: cfg.ProfilerDirs, FRDumpDir: cfg.FRDumpDir, PollLogs: cfg.PollLogs, LogKeep: cfg.LogKeep,
		SampleEvery: cfg.SampleEvery,
		Logger:      log, Registerer: cfg.Registerer,
	}
	if err := buildinfo.Register(cfg.Registerer, buildinfo.Read(cfg.Version)); err != nil {
		return nil, nil, fmt.Errorf("sidecar: %w", err)
	}
	if cli != nil {
		opts.Publisher = Publisher(cli, cfg.Job, cfg.Node, cfg.Publish, log, cfg.Registerer)
	}
	var gpus *gpu.Sampler
	release = func() {
		if gpus != nil {
			gpus.Close()
		}
	}
	gopts := gpu.Options{Logger: log.With("part", "nvml"), Window: cfg.GPUWindow, ProcRoot: cfg.ProcRoot}
	switch {
	case cfg.GPULibrary != nil:
		s, err := gpu.NewWithLibrary(cfg.GPULibrary, gopts)
		if err != nil {
			return nil, nil, err
		}
		gpus, opts.GPU = s, s
	case cfg.NVML:
		s, err := gpu.Open(ctx, gopts)
		if err != nil {
			// No driver or no cgo: one clear line, the rest runs without GPUs.
			log.Warn("NVML off: GPU state will be unknown", "err", err)
		} else {
			gpus, opts.GPU = s, s
		}
	}
	if cfg.Ports {
		opts.Ports = ibport.New(ibport.Options{IBRoot: cfg.IBRoot, NetRoot: cfg.NetRoot, Interfaces: cfg.NetInterfaces,
			Logger: log.With("part", "ports")})
	}
	switch {
	case cfg.Liveness != nil:
		opts.Liveness = cfg.Liveness
	case cfg.CheckPIDs:
		opts.Liveness = proc.New(proc.Options{ProcRoot: cfg.ProcRoot, Logger: log.With("part", "proc")})
	}
	var rasClient *ras.Client
	if cfg.RASAddr != "" {
		rasClient = &ras.Client{Addr: cfg.RASAddr}
		opts.RAS = rasClient
	}
	if sc, err = heartbeat.New(opts); err != nil {
		release()
		return nil, nil, err
	}
	if rasClient != nil {
		rasClient.Keep = sc.OwnsRank // only this node's ranks' counts go into its snapshot
	}
	return sc, release, nil
}

// Publisher keeps the node key of job and node in etcd: the sidecar's publisher, and the
// load generator's simulated ones.
func Publisher(cli *clientv3.Client, job, node string, cfg PublishConfig, log *slog.Logger, reg prometheus.Registerer) *publish.Publisher {
	if log == nil {
		log = slog.Default()
	}
	return publish.New(cli, publish.Options{Key: snapshot.NodeKey(job, node), TTL: cfg.LeaseTTL, Interval: cfg.Interval,
		MaxBackoff: cfg.MaxBackoff, Logger: log.With("part", "publish"), Registerer: reg})
}
