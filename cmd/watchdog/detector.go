package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.yaml.in/yaml/v3"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/internal/assemble"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
)

// DetectorConfig is the YAML configuration of `watchdog detector`; flags override it.
type DetectorConfig struct {
	EtcdEndpoints      []string      `yaml:"etcd_endpoints"`
	EtcdCAFile         string        `yaml:"etcd_ca_file"`
	EtcdCertFile       string        `yaml:"etcd_cert_file"`
	EtcdKeyFile        string        `yaml:"etcd_key_file"`
	EtcdUser           string        `yaml:"etcd_user"`
	EtcdPasswordFile   string        `yaml:"etcd_password_file"`
	EmbeddedEtcdListen string        `yaml:"embedded_etcd_listen"`
	EmbeddedEtcdDir    string        `yaml:"embedded_etcd_dir"`
	HTTP               string        `yaml:"http"`
	Interval           time.Duration `yaml:"interval"`
	ResolveAfter       time.Duration `yaml:"resolve_after"`
	LeaseTTL           time.Duration `yaml:"lease_ttl"`
	Rules              detect.Config `yaml:"rules"`
	// Alerts is the alert routing configuration (alert.Config); secrets come from the
	// environment or files it names.
	Alerts *alert.Config `yaml:"alerts"`
}

func defaultDetectorConfig() DetectorConfig {
	return DetectorConfig{EmbeddedEtcdListen: "127.0.0.1:2379", HTTP: "127.0.0.1:9300", Interval: time.Second,
		ResolveAfter: 5 * time.Second, LeaseTTL: 10 * time.Second, Rules: detect.DefaultConfig()}
}

func runDetector(ctx context.Context, args []string) error {
	cfg := defaultDetectorConfig()
	fs := flag.NewFlagSet("detector", flag.ContinueOnError)
	var ef etcdFlags
	ef.register(fs, "")
	var lf logFlags
	lf.register(fs)
	configPath := fs.String("config", "", "YAML configuration file (flags override it)")
	embedListen := fs.String("embedded-etcd-listen", cfg.EmbeddedEtcdListen, "client address of the embedded etcd (used when --etcd-endpoints is empty)")
	embedDir := fs.String("embedded-etcd-dir", "", "data directory of the embedded etcd (default: a temporary one)")
	httpAddr := fs.String("http", cfg.HTTP, "address for the API, /metrics and /healthz")
	interval := fs.Duration("interval", cfg.Interval, "time between evaluations")
	resolveAfter := fs.Duration("resolve-after", cfg.ResolveAfter, "how long a condition must stay clear before its incident resolves")
	leaseTTL := fs.Duration("lease-ttl", cfg.LeaseTTL, "leader election lease: a standby takes over within it")
	hangFloor := fs.Duration("hang-floor", cfg.Rules.HangFloor, "shortest hang window")
	hangK := fs.Float64("hang-k", cfg.Rules.HangK, "hang window = max(floor, k x the communicator's recent p99 gap between ops)")
	stragglerLag := fs.Duration("straggler-min-lag", cfg.Rules.StragglerMinLag, "smallest median arrival lag called a straggler")
	stragglerFrac := fs.Float64("straggler-fraction", cfg.Rules.StragglerFraction, "straggler threshold as a fraction of the step period")
	expectedIB := fs.Float64("expected-ib-gbps", 0, "rate every IB port must run at (0: the job's usual rate)")
	alertsPath := fs.String("alerts", "", "alert routing YAML (alert.Config); default: notifiers from SLACK_*/PAGERDUTY_* environment")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := applyEnv(fs); err != nil {
		return err
	}
	if *configPath != "" {
		b, err := os.ReadFile(*configPath)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			return fmt.Errorf("--config %s: %w", *configPath, err)
		}
	}
	set := given(fs)
	override := func(name string, apply func()) {
		if set[name] {
			apply()
		}
	}
	override("etcd-endpoints", func() { cfg.EtcdEndpoints = splitList(ef.endpoints) })
	override("etcd-ca-file", func() { cfg.EtcdCAFile = ef.ca })
	override("etcd-cert-file", func() { cfg.EtcdCertFile = ef.cert })
	override("etcd-key-file", func() { cfg.EtcdKeyFile = ef.key })
	override("etcd-user", func() { cfg.EtcdUser = ef.user })
	override("etcd-password-file", func() { cfg.EtcdPasswordFile = ef.passwordFile })
	override("embedded-etcd-listen", func() { cfg.EmbeddedEtcdListen = *embedListen })
	override("embedded-etcd-dir", func() { cfg.EmbeddedEtcdDir = *embedDir })
	override("http", func() { cfg.HTTP = *httpAddr })
	override("interval", func() { cfg.Interval = *interval })
	override("resolve-after", func() { cfg.ResolveAfter = *resolveAfter })
	override("lease-ttl", func() { cfg.LeaseTTL = *leaseTTL })
	override("hang-floor", func() { cfg.Rules.HangFloor = *hangFloor })
	override("hang-k", func() { cfg.Rules.HangK = *hangK })
	override("straggler-min-lag", func() { cfg.Rules.StragglerMinLag = *stragglerLag })
	override("straggler-fraction", func() { cfg.Rules.StragglerFraction = *stragglerFrac })
	override("expected-ib-gbps", func() { cfg.Rules.ExpectedIBGbps = *expectedIB })
	if *alertsPath != "" {
		a, err := alert.LoadConfig(*alertsPath)
		if err != nil {
			return err
		}
		cfg.Alerts = a
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	endpoints := cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		srv, err := etcdembed.Start(ctx, etcdembed.Options{ClientAddr: cfg.EmbeddedEtcdListen, Dir: cfg.EmbeddedEtcdDir, Logger: log})
		if err != nil {
			return err
		}
		defer srv.Close()
		endpoints = srv.Endpoints()
	}
	cli, err := etcdconn.New(etcdconn.Config{Endpoints: endpoints, CAFile: cfg.EtcdCAFile, CertFile: cfg.EtcdCertFile,
		KeyFile: cfg.EtcdKeyFile, Username: cfg.EtcdUser, PasswordFile: cfg.EtcdPasswordFile})
	if err != nil {
		return err
	}
	defer cli.Close()
	d, err := assemble.Detector(cli, assemble.DetectorConfig{Rules: cfg.Rules, Interval: cfg.Interval,
		ResolveAfter: cfg.ResolveAfter, LeaseTTL: cfg.LeaseTTL, Logger: log, Registerer: reg,
		Alerts: assemble.Alerts(cfg.Alerts, cli, assemble.AlertOptions{Logger: log})})
	if err != nil {
		return err
	}
	srv, err := serveHTTP(ctx, cfg.HTTP, assemble.DetectorHandler(d, reg), log)
	if err != nil {
		return err
	}
	defer srv.Close()
	log.Info("detector started", "etcd", endpoints, "http", cfg.HTTP)
	return d.Run(ctx)
}
