package assemble

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/detect/fleet"
	"github.com/ncclwatch/watchdog/detect/live"
	"github.com/ncclwatch/watchdog/incident/seal"
	"github.com/ncclwatch/watchdog/internal/buildinfo"
)

// DetectorConfig describes one detector replica; zero durations are live's defaults.
type DetectorConfig struct {
	// Rules are the rules' thresholds (detect.DefaultConfig() when zero).
	Rules        detect.Config
	Interval     time.Duration
	ResolveAfter time.Duration
	LeaseTTL     time.Duration
	// EtcdSlow and EtcdSlowFor: etcd's p99 round trip above EtcdSlow for EtcdSlowFor is a
	// monitoring warning (live.Options).
	EtcdSlow, EtcdSlowFor time.Duration
	// ID names the replica among the detector replicas (default hostname:pid).
	ID string
	// Alerts makes the alert dispatcher of each term of the replica (see Alerts); nil: no
	// notifications.
	Alerts func(prometheus.Registerer) (live.Alerts, error)
	// Ready, when set, is part of the detector's readiness (alert.Health.Ready).
	Ready func() error
	// IncidentKeyFile seals the stored incidents with its keys (incident/seal.FileKeys);
	// empty: the key internal/incidentkey keeps in etcd.
	IncidentKeyFile string
	// Fleet configures the fleet ledger (detect/fleet): roots across jobs, node incidents;
	// nil takes its defaults.
	Fleet *fleet.Config

	Logger     *slog.Logger // default slog.Default()
	Registerer prometheus.Registerer
	// Version gives what the command was stamped with at build time, for
	// ncclwatch_build_info (nil: what the Go toolchain recorded).
	Version buildinfo.Stamped
}

// Detector builds a detector replica on cli; Run starts it.
func Detector(cli *clientv3.Client, cfg DetectorConfig) (*live.Detector, error) {
	if reflect.ValueOf(cfg.Rules).IsZero() {
		cfg.Rules = detect.DefaultConfig()
	}
	if err := buildinfo.Register(cfg.Registerer, buildinfo.Read(cfg.Version)); err != nil {
		return nil, fmt.Errorf("detector: %w", err)
	}
	var incidents live.IncidentCodec
	if cfg.IncidentKeyFile != "" {
		keys := seal.FileKeys(cfg.IncidentKeyFile)
		if _, err := keys(context.Background()); err != nil {
			return nil, fmt.Errorf("detector: %w", err)
		}
		incidents = seal.New(keys)
	}
	fc := fleet.Config{}
	if cfg.Fleet != nil {
		fc = *cfg.Fleet
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ledger := fleet.New(cli, fc, fleet.Options{Logger: log.With("part", "fleet"), Registerer: cfg.Registerer})
	return live.New(live.Options{Client: cli, Rules: cfg.Rules, Interval: cfg.Interval, ResolveAfter: cfg.ResolveAfter,
		LeaseTTL: cfg.LeaseTTL, EtcdSlow: cfg.EtcdSlow, EtcdSlowFor: cfg.EtcdSlowFor, ID: cfg.ID, NewAlerts: cfg.Alerts, Ready: cfg.Ready, Incidents: incidents, Logger: cfg.Logger,
		Registerer: cfg.Registerer, Fleet: ledger})
}

// DetectorHandler serves a detector's API (/api/..., the fleet's /api/v1/nodes included), /healthz (liveness), /readyz
// (readiness: etcd reachable), and /metrics: g's and the current term's.
func DetectorHandler(d *live.Detector, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	api := d.Handler()
	mux.Handle("/api/", api)
	mux.Handle("/healthz", api)
	mux.Handle("/readyz", api)
	mux.Handle("GET /api/v1/nodes", d.FleetHandler())
	mux.Handle("GET /api/v1/nodes/{node}", d.FleetHandler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{g, d.TermGatherer()}, promhttp.HandlerOpts{}))
	return mux
}

// AlertOptions complete an alert configuration.
type AlertOptions struct {
	// Build says where secrets and console output come from (default: this process's
	// environment and files, and stdout).
	Build alert.BuildOptions
	// Targets are notifiers the caller built, beside the configuration's (the demo's
	// console story). Routes do not name them: they get every incident when the
	// configuration has no routes.
	Targets []alert.Target
	Logger  *slog.Logger // default slog.Default()
	// Health is told of every delivery (alert.NewHealth); OutageInBand leaves the etcd
	// outage to an alert.Outage (Outage, below).
	Health       *alert.Health
	OutageInBand bool
	// OutageGrace is how long etcd must be gone before Outage delivers it (alert's
	// default when zero).
	OutageGrace time.Duration
}

// Alerts returns what a detector calls at the start of each term of the replica
// (live.Options.NewAlerts): a dispatcher over cfg's notifiers and routes, with delivery
// state in etcd so that a replica taking a job over does not notify again what the previous
// owner did; its writes pass the fence the term puts in their context (etcdfence). A
// nil cfg takes the notifiers that SLACK_* and PAGERDUTY_* environment variables ask for
// (alert.FromEnv). Secrets are read at each term's start, from the variables, or the files
// that *_FILE variables or the configuration name.
func Alerts(cfg *alert.Config, cli *clientv3.Client, o AlertOptions) func(prometheus.Registerer) (live.Alerts, error) {
	if cfg == nil {
		cfg = alert.FromEnv()
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return func(reg prometheus.Registerer) (live.Alerts, error) {
		d, err := alert.New(cfg, o.Build, alert.Options{Store: alert.NewEtcdStore(cli, alert.EtcdStoreOptions{}),
			Registerer: reg, Logger: log.With("part", "alert"), Health: o.Health, OutageInBand: o.OutageInBand}, o.Targets...)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
}

// Outage runs, until ctx ends, the in-band delivery of an etcd outage (alert.Outage) for
// detector d with the notifiers of cfg (nil: alert.FromEnv); the dispatchers of d's terms
// must be made with AlertOptions.OutageInBand.
func Outage(ctx context.Context, d *live.Detector, cfg *alert.Config, o AlertOptions) error {
	if cfg == nil {
		cfg = alert.FromEnv()
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	out, err := alert.NewOutage(cfg, o.Build, alert.OutageOptions{Down: d.EtcdDownSince, Leading: d.Leading, Replica: d.ID(), Grace: o.OutageGrace,
		ID: d.OutageID, Orphans: d.OrphanedOutages,
		Health: o.Health, Logger: log.With("part", "alert")})
	if err != nil {
		return err
	}
	go out.Run(ctx)
	return nil
}
