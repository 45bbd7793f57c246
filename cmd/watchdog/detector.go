package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.yaml.in/yaml/v3"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/detect/fleet"
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
	// EtcdSlow and EtcdSlowFor: etcd answering the detector with a p99 above EtcdSlow for
	// EtcdSlowFor is a monitoring warning (the watchdog cannot see in time).
	EtcdSlow    time.Duration `yaml:"etcd_slow"`
	EtcdSlowFor time.Duration `yaml:"etcd_slow_for"`
	Rules       detect.Config `yaml:"rules"`
	// Alerts is the alert routing configuration (alert.Config); secrets come from the
	// environment or files it names.
	Alerts *alert.Config `yaml:"alerts"`
	// IncidentKeyFile holds the keys that seal the incidents in etcd (incident/seal);
	// empty: a key kept in etcd, readable by the detector's role only.
	IncidentKeyFile string `yaml:"incident_key_file"`
	// Fleet configures the fleet ledger: roots across jobs and node incidents (detect/fleet).
	Fleet fleet.Config `yaml:"fleet"`
}

func defaultDetectorConfig() DetectorConfig {
	return DetectorConfig{EmbeddedEtcdListen: "127.0.0.1:2379", HTTP: "127.0.0.1:9300", Interval: time.Second,
		ResolveAfter: 5 * time.Second, LeaseTTL: 10 * time.Second, EtcdSlow: 500 * time.Millisecond, EtcdSlowFor: 30 * time.Second,
		Rules: detect.DefaultConfig(), Fleet: fleet.DefaultConfig()}
}

func runDetector(ctx context.Context, args []string) error {
	cfg := defaultDetectorConfig()
	fs := newFlags("detector", `usage: watchdog detector [flags]

Watches every job's node snapshots in etcd, runs the rules, opens and resolves incidents and
sends them to the configured notifiers. Replicas share the jobs through etcd (each job is
judged by one of them; a dead one's jobs pass to the others) and elect a leader for the
watchdog's own monitoring; any replica answers the API. With no --etcd-endpoints it runs an embedded single-node etcd (trials).`)
	var ef etcdFlags
	ef.register(fs.FlagSet, "")
	var lf logFlags
	lf.register(fs.FlagSet)
	configPath := fs.String("config", "", "YAML configuration file (flags override it)")
	embedListen := fs.String("embedded-etcd-listen", cfg.EmbeddedEtcdListen, "client address of the embedded etcd (used when --etcd-endpoints is empty)")
	embedDir := fs.String("embedded-etcd-dir", "", "data directory of the embedded etcd (default: a temporary one)")
	httpAddr := fs.String("http", cfg.HTTP, "address for the API, /metrics, /healthz and /readyz")
	interval := fs.Duration("interval", cfg.Interval, "time between evaluations")
	resolveAfter := fs.Duration("resolve-after", cfg.ResolveAfter, "how long a condition must stay clear before its incident resolves")
	leaseTTL := fs.Duration("lease-ttl", cfg.LeaseTTL, "replica lease: a dead replica's jobs and leadership pass to the others within it")
	etcdSlow := fs.Duration("etcd-slow", cfg.EtcdSlow, "etcd round trips with a p99 above this ...")
	etcdSlowFor := fs.Duration("etcd-slow-for", cfg.EtcdSlowFor, "... for this long are a monitoring warning (the watchdog cannot see in time)")
	id := fs.String("id", "", "this replica's name among the detector replicas, unique; empty: hostname:pid")
	hangFloor := fs.Duration("hang-floor", cfg.Rules.HangFloor, "shortest hang window")
	hangK := fs.Float64("hang-k", cfg.Rules.HangK, "hang window = max(floor, k x the communicator's recent p99 gap between ops)")
	slowShare := fs.Float64("slowdown-share", cfg.Rules.SlowdownShare, "share of the job's time a root must cost to be a slowdown (0-1)")
	slowSteps := fs.Int("slowdown-steps", cfg.Rules.SlowdownSteps, "training steps over which a slowdown's share is judged")
	expectedIB := fs.Float64("expected-ib-gbps", 0, "rate every IB port must run at (0: the job's usual rate)")
	alertsPath := fs.String("alerts", "", "alert routing YAML (alert.Config); default: notifiers from SLACK_*/PAGERDUTY_* environment")
	incidentKey := fs.String("incident-key-file", "", "keys that seal stored incidents, one a line, the first signs (default: one kept in etcd for the detector role; docs/security.md)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *configPath != "" {
		if err := cfg.load(*configPath); err != nil {
			return err
		}
	}
	set := given(fs.FlagSet)
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
	override("etcd-slow", func() { cfg.EtcdSlow = *etcdSlow })
	override("etcd-slow-for", func() { cfg.EtcdSlowFor = *etcdSlowFor })
	override("hang-floor", func() { cfg.Rules.HangFloor = *hangFloor })
	override("hang-k", func() { cfg.Rules.HangK = *hangK })
	override("slowdown-share", func() { cfg.Rules.SlowdownShare = *slowShare })
	override("slowdown-steps", func() { cfg.Rules.SlowdownSteps = *slowSteps })
	override("expected-ib-gbps", func() { cfg.Rules.ExpectedIBGbps = *expectedIB })
	override("incident-key-file", func() { cfg.IncidentKeyFile = *incidentKey })
	if *alertsPath != "" {
		a, err := alert.LoadConfig(*alertsPath)
		if err != nil {
			return err
		}
		cfg.Alerts = a
	}
	if err := cfg.validate(); err != nil {
		return usageError{err}
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	alerts := cfg.Alerts
	if alerts == nil {
		alerts = alert.FromEnv()
	}
	logNotifiers(log, alerts)
	// Built once now: each notifier's health is a metric from the start, and one that
	// cannot be built keeps the detector not ready, saying why.
	health, err := alert.NewHealth(alerts, alert.BuildOptions{Reload: alertsReload(*alertsPath, *configPath, cfg.Alerts)}, log, reg)
	if err != nil {
		return err
	}

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
		KeyFile: cfg.EtcdKeyFile, Username: cfg.EtcdUser, PasswordFile: cfg.EtcdPasswordFile, Logger: log})
	if err != nil {
		return err
	}
	defer cli.Close()
	alertOpts := assemble.AlertOptions{Logger: log, Health: health, OutageInBand: true}
	d, err := assemble.Detector(cli, assemble.DetectorConfig{Rules: cfg.Rules, Interval: cfg.Interval,
		ResolveAfter: cfg.ResolveAfter, LeaseTTL: cfg.LeaseTTL, EtcdSlow: cfg.EtcdSlow, EtcdSlowFor: cfg.EtcdSlowFor, ID: *id, Logger: log, Registerer: reg, Version: stamped,
		Ready: health.Ready, Alerts: assemble.Alerts(alerts, cli, alertOpts), IncidentKeyFile: cfg.IncidentKeyFile, Fleet: &cfg.Fleet})
	if err != nil {
		return err
	}
	if err := assemble.Outage(ctx, d, alerts, alertOpts); err != nil {
		return err
	}
	srv, err := serveHTTP(ctx, cfg.HTTP, assemble.DetectorHandler(d, reg), log)
	if err != nil {
		return err
	}
	defer srv.Close()
	bi := build()
	log.Info("detector started", "etcd", endpoints, "http", cfg.HTTP, "version", bi.Version, "revision", bi.Revision)
	return d.Run(ctx)
}

// alertsReload reads the alert configuration again from the file it came from (--alerts,
// else the alerts: section of --config; nil when it came from the environment), so that a
// notifier whose section changed is rebuilt without a restart (alert.BuildOptions.Reload).
func alertsReload(alertsPath, configPath string, fromConfig *alert.Config) func() (*alert.Config, error) {
	switch {
	case alertsPath != "":
		return func() (*alert.Config, error) { return alert.LoadConfig(alertsPath) }
	case configPath != "" && fromConfig != nil:
		return func() (*alert.Config, error) {
			var c DetectorConfig
			if err := c.load(configPath); err != nil {
				return nil, err
			}
			if c.Alerts == nil {
				return nil, fmt.Errorf("%s: no alerts: section any more", configPath)
			}
			return c.Alerts, nil
		}
	}
	return nil
}

// logNotifiers says at start where incidents will go, and warns loudly when nowhere: a
// detector without notifiers opens incidents that nobody hears of. (alert.NewHealth says
// which cannot be built.)
func logNotifiers(log *slog.Logger, cfg *alert.Config) {
	if len(cfg.Notifiers) == 0 {
		log.Warn("NO ALERT NOTIFIER CONFIGURED: incidents open and resolve in etcd, the API and `watchdog status`, but nobody is paged or messaged",
			"fix", "set SLACK_WEBHOOK_URL, or SLACK_TOKEN and SLACK_CHANNEL, or PAGERDUTY_ROUTING_KEY (or their *_FILE twins), or give --alerts or alerts: in --config")
		return
	}
	for _, n := range cfg.Notifiers {
		var routes []string
		for i, r := range cfg.Routes {
			if slices.Contains(r.Notifiers, n.Name) {
				routes = append(routes, fmt.Sprintf("route %d %s", i+1, describeMatch(r)))
			}
		}
		if len(cfg.Routes) == 0 {
			routes = []string{"every incident (no routes)"}
		}
		if len(routes) == 0 {
			log.Warn("alert notifier named by no route: it gets nothing", "notifier", n.Name, "type", n.Type)
			continue
		}
		log.Info("alert notifier", "notifier", n.Name, "type", n.Type, "gets", strings.Join(routes, "; "))
	}
	if err := cfg.Validate(); err != nil {
		log.Error("alert configuration invalid: no notification will be sent until it is fixed", "err", err)
	}
}

// describeMatch says which incidents a route takes.
func describeMatch(r alert.RouteConfig) string {
	var parts []string
	for _, p := range []struct {
		what string
		vals []string
	}{{"severity", toStrings(r.Match.Severity)}, {"kind", toStrings(r.Match.Kind)}, {"job", r.Match.Job}} {
		if len(p.vals) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.vals, "|"))
		}
	}
	if len(parts) == 0 {
		return "(every incident)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func toStrings[S ~string](v []S) []string {
	out := make([]string, len(v))
	for i, s := range v {
		out[i] = string(s)
	}
	return out
}

// load reads a YAML configuration over c: unknown keys are errors (a typo, or a secret
// where only the name of its variable or file belongs).
func (c *DetectorConfig) load(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	return nil
}

// validate refuses durations and thresholds out of range, from the flags or the YAML file:
// a zero interval would evaluate in a busy loop, a negative window never opens an incident.
func (c *DetectorConfig) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"interval", c.Interval}, {"resolve_after", c.ResolveAfter}, {"lease_ttl", c.LeaseTTL},
		{"etcd_slow", c.EtcdSlow}, {"etcd_slow_for", c.EtcdSlowFor},
		{"rules.hang_floor", c.Rules.HangFloor}, {"rules.event_max_age", c.Rules.EventMaxAge}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: must be positive", d.name, d.v))
		}
	}
	if c.Rules.HangK <= 0 {
		errs = append(errs, fmt.Errorf("rules.hang_k %g: must be positive", c.Rules.HangK))
	}
	if f := c.Rules.SlowdownShare; f <= 0 || f > 1 {
		errs = append(errs, fmt.Errorf("rules.slowdown_share %g: must be in (0, 1]", f))
	}
	if c.Rules.SlowdownSteps < 2 {
		errs = append(errs, fmt.Errorf("rules.slowdown_steps %d: must be at least 2", c.Rules.SlowdownSteps))
	}
	// Whatever the rules grow: no negative number anywhere in them.
	errs = append(errs, negativeFields("rules", reflect.ValueOf(c.Rules))...)
	errs = append(errs, negativeFields("fleet", reflect.ValueOf(c.Fleet))...)
	return errors.Join(errs...)
}

// negativeFields names the negative numbers of a configuration struct by their YAML paths.
func negativeFields(path string, v reflect.Value) []error {
	var errs []error
	for i := 0; i < v.NumField(); i++ {
		f, fv := v.Type().Field(i), v.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		key := path + "." + name
		switch {
		case fv.Kind() == reflect.Struct:
			if name == "" {
				key = path // inline
			}
			errs = append(errs, negativeFields(key, fv)...)
		case fv.CanInt() && fv.Int() < 0:
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", key, fv.Interface()))
		case fv.CanFloat() && fv.Float() < 0:
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", key, fv.Interface()))
		}
	}
	return errs
}
