package alert

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ncclwatch/watchdog/incident"
)

// Config is the alert routing configuration (YAML). It names the environment variables
// or files that hold secrets, never the secrets themselves. Example:
//
//	defaults:
//	  group_wait: 2s
//	  rate_limit: {every: 1s, burst: 3}
//	links:
//	  dashboard: "https://grafana.example.com/d/ncclwatch?var-job={job}&var-incident={incident}"
//	  runbooks:
//	    mismatch: https://runbooks.example.com/nccl/mismatch
//	    default: https://runbooks.example.com/nccl
//	notifiers:
//	  - name: slack
//	    type: slack
//	    channel: "#gpu-oncall"      # bot mode if SLACK_TOKEN is set, else SLACK_WEBHOOK_URL
//	  - name: pagerduty
//	    type: pagerduty             # PAGERDUTY_ROUTING_KEY or PAGERDUTY_ROUTING_KEY_FILE
//	routes:
//	  - match: {severity: [critical]}
//	    notifiers: [pagerduty]
//	  - notifiers: [slack]
type Config struct {
	Defaults  SettingsConfig   `yaml:"defaults"`
	Links     LinksConfig      `yaml:"links"`
	Notifiers []NotifierConfig `yaml:"notifiers"`
	Routes    []RouteConfig    `yaml:"routes"`
	// Operators name the notifiers of the people who run the watchdog: the monitoring
	// incidents (a sidecar silent, etcd unreachable, paging stalled) go to them, as
	// warnings, instead of where the routes send the job's incidents. Empty: the routes
	// decide for these too (still as warnings).
	Operators []string `yaml:"operators"`
	// DeliveryDeadline is the dead-man's check: an open incident that no notifier
	// delivered within it opens a monitoring incident (default 60s).
	DeliveryDeadline time.Duration `yaml:"delivery_deadline"`
}

// SettingsConfig is Settings in YAML; unset fields inherit (defaults, then DefaultSettings).
type SettingsConfig struct {
	GroupWait *time.Duration `yaml:"group_wait"`
	MaxBatch  *int           `yaml:"max_batch"`
	QueueSize *int           `yaml:"queue_size"`
	RateLimit *struct {
		Every time.Duration `yaml:"every"`
		Burst int           `yaml:"burst"`
	} `yaml:"rate_limit"`
	Timeout *time.Duration `yaml:"timeout"`
	Backoff *struct {
		Initial time.Duration `yaml:"initial"`
		Max     time.Duration `yaml:"max"`
	} `yaml:"backoff"`
}

func (c SettingsConfig) apply(s Settings) Settings {
	if c.GroupWait != nil {
		s.GroupWait = *c.GroupWait
	}
	if c.MaxBatch != nil {
		s.MaxBatch = *c.MaxBatch
	}
	if c.QueueSize != nil {
		s.QueueSize = *c.QueueSize
	}
	if c.RateLimit != nil {
		s.RateEvery, s.RateBurst = c.RateLimit.Every, c.RateLimit.Burst
	}
	if c.Timeout != nil {
		s.Timeout = *c.Timeout
	}
	if c.Backoff != nil {
		s.BackoffInitial, s.BackoffMax = c.Backoff.Initial, c.Backoff.Max
	}
	return s
}

// LinksConfig is Links in YAML; the runbook named "default" covers other kinds.
type LinksConfig struct {
	Dashboard string            `yaml:"dashboard"`
	Runbooks  map[string]string `yaml:"runbooks"`
}

// Links converts the YAML form.
func (c LinksConfig) Links() Links {
	l := Links{Dashboard: c.Dashboard}
	for k, v := range c.Runbooks {
		if k == "default" {
			l.DefaultRunbook = v
			continue
		}
		if l.Runbooks == nil {
			l.Runbooks = map[incident.Kind]string{}
		}
		l.Runbooks[incident.Kind(k)] = v
	}
	return l
}

// NotifierConfig declares one notifier. Secrets are read from the environment variable
// named by a *_env field (or from the file named by that variable plus _FILE), or from
// the file a *_file field names.
type NotifierConfig struct {
	Name string `yaml:"name"`
	// Type is slack, pagerduty, webhook, alertmanager or console.
	Type string `yaml:"type"`

	// slack: a bot token and a channel (edits and threads), else an incoming webhook.
	Channel        string `yaml:"channel"`
	APIURL         string `yaml:"api_url"`
	TokenEnv       string `yaml:"token_env"`       // default SLACK_TOKEN
	TokenFile      string `yaml:"token_file"`      //
	WebhookURLEnv  string `yaml:"webhook_url_env"` // default SLACK_WEBHOOK_URL
	WebhookURLFile string `yaml:"webhook_url_file"`
	// WebhookURL is a webhook URL a program was given on its command line (`watchdog demo
	// --slack-webhook`); it comes before the *_env and *_file ones. YAML cannot set it:
	// there the URL is a secret, named by webhook_url_env or webhook_url_file.
	WebhookURL    string `yaml:"-"`
	ThreadUpdates *bool  `yaml:"thread_updates"` // default true

	// pagerduty
	EventsURL      string `yaml:"events_url"`
	RoutingKeyEnv  string `yaml:"routing_key_env"` // default PAGERDUTY_ROUTING_KEY
	RoutingKeyFile string `yaml:"routing_key_file"`

	// webhook (url, or url_env/url_file when the URL itself is secret) and alertmanager (url)
	URL        string        `yaml:"url"`
	URLEnv     string        `yaml:"url_env"`
	URLFile    string        `yaml:"url_file"`
	SecretEnv  string        `yaml:"secret_env"`
	SecretFile string        `yaml:"secret_file"`
	TTL        time.Duration `yaml:"ttl"` // alertmanager

	Settings SettingsConfig `yaml:"settings"`
}

// RouteConfig is a Route in YAML.
type RouteConfig struct {
	Match struct {
		Severity []incident.Severity `yaml:"severity"`
		Kind     []incident.Kind     `yaml:"kind"`
		Job      []string            `yaml:"job"`
	} `yaml:"match"`
	Notifiers []string `yaml:"notifiers"`
	Stop      bool     `yaml:"stop"`
}

// LoadConfig reads a YAML routing configuration.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("alert config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("alert config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses and validates a YAML routing configuration. Unknown fields are
// errors: a `webhook_url:` or `routing_key:` with a secret in it is refused.
func ParseConfig(b []byte) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

var notifierTypes = map[string]bool{"slack": true, "pagerduty": true, "webhook": true, "alertmanager": true, "console": true}

// Validate checks names, types, links and routes without reading any secret.
func (c *Config) Validate() error {
	if err := c.Links.Links().Validate(); err != nil {
		return err
	}
	names := map[string]bool{}
	for i, n := range c.Notifiers {
		if n.Name == "" {
			return fmt.Errorf("notifier %d: no name", i+1)
		}
		if !notifierName.MatchString(n.Name) {
			return fmt.Errorf("notifier %q: name wants letters, digits, _ . -", n.Name)
		}
		if names[n.Name] {
			return fmt.Errorf("notifier %q: defined twice", n.Name)
		}
		names[n.Name] = true
		if !notifierTypes[n.Type] {
			return fmt.Errorf("notifier %q: unknown type %q (want slack, pagerduty, webhook, alertmanager or console)", n.Name, n.Type)
		}
		if (n.Type == "alertmanager") && n.URL == "" {
			return fmt.Errorf("notifier %q: alertmanager needs url", n.Name)
		}
		if n.Type == "webhook" && n.URL == "" && n.URLEnv == "" && n.URLFile == "" {
			return fmt.Errorf("notifier %q: webhook needs url, url_env or url_file", n.Name)
		}
	}
	for i, r := range c.routes() {
		if err := r.validate(names); err != nil {
			return fmt.Errorf("route %d: %w", i+1, err)
		}
	}
	for _, n := range c.Operators {
		if !names[n] {
			return fmt.Errorf("operators: unknown notifier %q", n)
		}
	}
	if c.DeliveryDeadline < 0 {
		return fmt.Errorf("delivery_deadline %s: must not be negative", c.DeliveryDeadline)
	}
	return nil
}

func (c *Config) routes() []Route {
	if len(c.Routes) == 0 {
		return nil
	}
	out := make([]Route, 0, len(c.Routes))
	for _, r := range c.Routes {
		out = append(out, Route{
			Severities: r.Match.Severity, Kinds: r.Match.Kind, Jobs: r.Match.Job,
			Notifiers: r.Notifiers, Stop: r.Stop,
		})
	}
	return out
}

// FromEnv returns a configuration built from the environment alone:
//   - SLACK_TOKEN (or SLACK_TOKEN_FILE) with SLACK_CHANNEL: Slack bot, every incident;
//   - else SLACK_WEBHOOK_URL (or SLACK_WEBHOOK_URL_FILE): Slack webhook, every incident;
//   - PAGERDUTY_ROUTING_KEY (or PAGERDUTY_ROUTING_KEY_FILE): PagerDuty, critical incidents;
//   - NCCLWATCH_DASHBOARD_URL: the dashboard link template.
//
// With none of them set it has no notifiers.
func FromEnv() *Config { return fromEnv(os.LookupEnv) }

func fromEnv(lookup func(string) (string, bool)) *Config {
	set := func(name string) bool {
		v, ok := lookup(name)
		f, fok := lookup(name + "_FILE")
		return (ok && v != "") || (fok && f != "")
	}
	c := &Config{}
	if v, ok := lookup("NCCLWATCH_DASHBOARD_URL"); ok {
		c.Links.Dashboard = v
	}
	channel, _ := lookup("SLACK_CHANNEL")
	switch {
	case set("SLACK_TOKEN") && channel != "":
		c.Notifiers = append(c.Notifiers, NotifierConfig{Name: "slack", Type: "slack", Channel: channel})
	case set("SLACK_WEBHOOK_URL"):
		c.Notifiers = append(c.Notifiers, NotifierConfig{Name: "slack", Type: "slack"})
	}
	if len(c.Notifiers) > 0 {
		c.Routes = append(c.Routes, RouteConfig{Notifiers: []string{"slack"}})
	}
	if set("PAGERDUTY_ROUTING_KEY") {
		c.Notifiers = append(c.Notifiers, NotifierConfig{Name: "pagerduty", Type: "pagerduty"})
		r := RouteConfig{Notifiers: []string{"pagerduty"}}
		r.Match.Severity = []incident.Severity{incident.SeverityCritical}
		c.Routes = append(c.Routes, r)
	}
	return c
}

// BuildOptions say where secrets and outputs come from when building notifiers.
type BuildOptions struct {
	// LookupEnv defaults to os.LookupEnv; ReadFile to os.ReadFile.
	LookupEnv func(string) (string, bool)
	ReadFile  func(string) ([]byte, error)
	// Console is where console notifiers write; default os.Stdout.
	Console    io.Writer
	HTTPClient *http.Client
	// Recheck is how often a running notifier's secrets are read again, so that one that
	// appears or changes later is used (default DefaultRecheck).
	Recheck time.Duration
	// Reload, when set, reads the configuration file again at each recheck: a notifier whose
	// own section changed (its URL, channel, the variable or file of its secret) is rebuilt
	// from it. Notifiers added or removed, and routes, take a restart. A file that cannot be
	// read or is invalid keeps the last good section (and is logged).
	Reload func() (*Config, error)
}

func (b BuildOptions) withDefaults() BuildOptions {
	if b.LookupEnv == nil {
		b.LookupEnv = os.LookupEnv
	}
	if b.ReadFile == nil {
		b.ReadFile = os.ReadFile
	}
	if b.Console == nil {
		b.Console = os.Stdout
	}
	if b.Recheck <= 0 {
		b.Recheck = DefaultRecheck
	}
	return b
}

// Targets builds the notifiers of c with their settings, reading secrets.
func (c *Config) Targets(b BuildOptions) ([]Target, error) {
	targets, errs := c.buildEach(b)
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("notifier %q: %w", c.Notifiers[i].Name, err)
		}
	}
	return targets, nil
}

// buildEach builds every notifier of c: targets[i] is Notifiers[i]'s, or nil with errs[i]
// saying why it cannot be built.
func (c *Config) buildEach(b BuildOptions) (targets []Target, errs []error) {
	b = b.withDefaults()
	links := c.Links.Links()
	base := c.Defaults.apply(DefaultSettings())
	targets, errs = make([]Target, len(c.Notifiers)), make([]error, len(c.Notifiers))
	for i, nc := range c.Notifiers {
		n, err := nc.build(b, links)
		if err != nil {
			errs[i] = err
			continue
		}
		s := base
		if nc.Type == "console" {
			// A terminal shows each change as it happens, unless its own settings say otherwise.
			s.GroupWait, s.RateEvery = 0, 0
		}
		targets[i] = Target{Notifier: n, Settings: nc.Settings.apply(s)}
	}
	return targets, errs
}

// New makes a dispatcher routing to the notifiers of c, and to extra targets built by the
// caller (the demo's console story): with no routes in c every incident reaches every
// target. opts.Routes is taken from c.
//
// Each notifier of c is built on its own and built again when its secrets change (a file
// that appears after the start, a rotated token): one that cannot be built fails its own
// deliveries, counted and retried, and never keeps the others from theirs. With
// opts.Health made from c, the dispatcher shares its notifiers (NewHealth), so that what
// the health metrics say is what delivers.
func New(c *Config, b BuildOptions, opts Options, extra ...Target) (*Dispatcher, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var ls []*liveNotifier
	if opts.Health != nil && opts.Health.cfg == c {
		ls = opts.Health.live
	} else {
		ls = c.liveNotifiers(b, opts.Health, opts.Logger)
	}
	opts.Routes, opts.Operators = c.routes(), c.Operators
	if c.DeliveryDeadline > 0 {
		opts.DeliveryDeadline = c.DeliveryDeadline
	}
	return NewDispatcher(opts, slices.Concat(extra, c.liveTargets(ls))...)
}

func (nc NotifierConfig) build(b BuildOptions, links Links) (Notifier, error) {
	sec := secrets{lookup: b.LookupEnv, read: b.ReadFile}
	switch nc.Type {
	case "slack":
		o := SlackOptions{Name: nc.Name, Links: links, HTTPClient: b.HTTPClient,
			NoThreadUpdates: nc.ThreadUpdates != nil && !*nc.ThreadUpdates}
		if nc.Channel != "" {
			token, err := sec.get(or(nc.TokenEnv, "SLACK_TOKEN"), nc.TokenFile)
			if err != nil {
				return nil, err
			}
			if token != "" {
				return NewSlackBot(nc.APIURL, token, nc.Channel, o)
			}
		}
		hook := nc.WebhookURL
		if hook == "" {
			var err error
			if hook, err = sec.get(or(nc.WebhookURLEnv, "SLACK_WEBHOOK_URL"), nc.WebhookURLFile); err != nil {
				return nil, err
			}
		}
		if hook == "" {
			if nc.Channel != "" {
				return nil, fmt.Errorf("no Slack bot token (%s) nor webhook URL (%s) in the environment",
					or(nc.TokenEnv, "SLACK_TOKEN"), or(nc.WebhookURLEnv, "SLACK_WEBHOOK_URL"))
			}
			return nil, fmt.Errorf("no Slack webhook URL (%s or %s_FILE); set channel to use a bot token",
				or(nc.WebhookURLEnv, "SLACK_WEBHOOK_URL"), or(nc.WebhookURLEnv, "SLACK_WEBHOOK_URL"))
		}
		return NewSlackWebhook(hook, o)
	case "pagerduty":
		env := or(nc.RoutingKeyEnv, "PAGERDUTY_ROUTING_KEY")
		key, err := sec.get(env, nc.RoutingKeyFile)
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, fmt.Errorf("no PagerDuty routing key (%s or %s_FILE)", env, env)
		}
		return NewPagerDuty(nc.EventsURL, key, PagerDutyOptions{Name: nc.Name, Links: links, HTTPClient: b.HTTPClient})
	case "webhook":
		u := nc.URL
		if u == "" {
			var err error
			if u, err = sec.get(nc.URLEnv, nc.URLFile); err != nil {
				return nil, err
			}
			if u == "" {
				return nil, fmt.Errorf("no webhook URL in %s", or(nc.URLEnv, nc.URLFile))
			}
		}
		var secret string
		if nc.SecretEnv != "" || nc.SecretFile != "" {
			var err error
			if secret, err = sec.get(nc.SecretEnv, nc.SecretFile); err != nil {
				return nil, err
			}
			if secret == "" {
				return nil, fmt.Errorf("no webhook secret in %s", or(nc.SecretEnv, nc.SecretFile))
			}
		}
		return NewWebhook(u, WebhookOptions{Name: nc.Name, Secret: []byte(secret), HTTPClient: b.HTTPClient})
	case "alertmanager":
		return NewAlertmanager(nc.URL, AlertmanagerOptions{Name: nc.Name, TTL: nc.TTL, Links: links, HTTPClient: b.HTTPClient})
	case "console":
		c := NewConsole(b.Console)
		c.name = nc.Name
		return c, nil
	}
	return nil, fmt.Errorf("unknown type %q", nc.Type)
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// secrets reads a secret from a file named in config, an environment variable, or the
// file named by that variable plus _FILE, in this order. Errors name where it looked,
// never the value.
type secrets struct {
	lookup func(string) (string, bool)
	read   func(string) ([]byte, error)
}

func (s secrets) get(env, file string) (string, error) {
	if file != "" {
		return s.file(file)
	}
	if env == "" {
		return "", nil
	}
	if v, ok := s.lookup(env); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v), nil
	}
	if f, ok := s.lookup(env + "_FILE"); ok && f != "" {
		return s.file(f)
	}
	return "", nil
}

func (s secrets) file(path string) (string, error) {
	b, err := s.read(path)
	if err != nil {
		// The path is not secret; os errors never contain file contents.
		return "", fmt.Errorf("secret file: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("secret file %s is empty", path)
	}
	return v, nil
}
