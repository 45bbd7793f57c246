package alert

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ncclwatch/watchdog/incident"
)

// liveConfig sends every incident at once (no grouping, no rate limit) to its notifiers.
func liveConfig(notifiers ...NotifierConfig) *Config {
	zero := time.Duration(0)
	c := &Config{Notifiers: notifiers}
	c.Defaults.GroupWait = &zero
	c.Defaults.RateLimit = &struct {
		Every time.Duration `yaml:"every"`
		Burst int           `yaml:"burst"`
	}{}
	return c
}

// startLive runs a dispatcher of cfg sharing h's notifiers, as the detector does, on the
// test etcd, with the real clock.
func startLive(t *testing.T, cfg *Config, h *Health, deadline time.Duration) *Dispatcher {
	t.Helper()
	d, err := New(cfg, BuildOptions{}, Options{Store: NewEtcdStore(testEtcd(t), EtcdStoreOptions{}), Health: h,
		Logger: quietLogger(), DeliveryDeadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); d.Close() })
	if err := d.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitFor polls cond in real time (bounded).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func incidentNamed(id string) incident.Incident {
	inc := sampleMismatch()
	inc.ID, inc.Key = id, "rank:"+id
	inc.OpenedAt, inc.LastSeen = time.Now(), time.Now()
	return inc
}

// TestLateSecretIsPickedUp: a PagerDuty routing key mounted as a file after the detector
// started (a Vault agent, a CSI driver). Before it is there, the crash incident's delivery
// fails visibly (failures counted, not built, not ready) and the dead-man's check lists the
// incident; once the file appears, that incident and the next one reach a real HTTP
// receiver, without a restart, and the check clears.
func TestLateSecretIsPickedUp(t *testing.T) {
	pd := newRecorder(t, pagerDutyAPI)
	keyFile := filepath.Join(t.TempDir(), "routing-key")
	cfg := liveConfig(NotifierConfig{Name: "pd", Type: "pagerduty", EventsURL: pd.URL + "/v2/enqueue", RoutingKeyFile: keyFile})
	reg := prometheus.NewRegistry()
	h, err := NewHealth(cfg, BuildOptions{LookupEnv: envOf(nil), Recheck: 50 * time.Millisecond}, quietLogger(), reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Ready(); err == nil || !strings.Contains(err.Error(), keyFile) {
		t.Fatalf("Ready before the key: %v", err)
	}
	d := startLive(t, cfg, h, 300*time.Millisecond)
	d.Submit(incidentNamed("crash-1"))
	waitFor(t, "a failed attempt counted", func() bool { return testutil.ToFloat64(h.failures.WithLabelValues("pd")) >= 1 })
	waitFor(t, "the dead-man's check lists the incident", func() bool {
		ids, _ := d.Undelivered()
		return len(ids) == 1 && ids[0] == "crash-1"
	})
	waitFor(t, "the dead-man's metric says so", func() bool { return testutil.ToFloat64(d.m.undelivered) == 1 })
	if pd.count() != 0 {
		t.Fatalf("%d requests without a key", pd.count())
	}

	if err := os.WriteFile(keyFile, []byte("R0UT1NGKEY0000000000000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiting incident delivered once the key is there", func() bool { return pd.count() == 1 })
	d.Submit(incidentNamed("crash-2"))
	waitFor(t, "the next incident delivered", func() bool { return pd.count() == 2 })
	if err := h.Ready(); err != nil {
		t.Errorf("Ready with the key: %v", err)
	}
	if v := testutil.ToFloat64(h.built.WithLabelValues("pd", "pagerduty")); v != 1 {
		t.Errorf("built = %v with the key", v)
	}
	if v := testutil.ToFloat64(h.delivered.WithLabelValues("pd")); v != 2 {
		t.Errorf("deliveries %v, want 2", v)
	}
	if ids, _ := d.Undelivered(); len(ids) != 0 {
		t.Errorf("undelivered after delivery: %v", ids)
	}
	for _, r := range pd.requests() {
		if !strings.Contains(string(r.raw), "R0UT1NGKEY") {
			t.Errorf("request without the key from the file: %s", r.raw)
		}
	}
}

// TestBadNotifierBesideGood: a notifier without its secret and one whose endpoint fails
// beside a working Slack webhook: Slack gets the crash incident at once, the two others
// fail on their own, counted, and the incident is not undelivered (someone was paged).
func TestBadNotifierBesideGood(t *testing.T) {
	slack := newRecorder(t, slackWebhook)
	broken := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusBadGateway) })
	env := envOf(map[string]string{"SLACK_WEBHOOK_URL": slack.URL + "/hook"})
	cfg := liveConfig(
		NotifierConfig{Name: "pd", Type: "pagerduty", EventsURL: "http://127.0.0.1:1/v2/enqueue"},
		NotifierConfig{Name: "hook", Type: "webhook", URL: broken.URL + "/x"},
		NotifierConfig{Name: "slack", Type: "slack"},
	)
	h, err := NewHealth(cfg, BuildOptions{LookupEnv: env, Recheck: 50 * time.Millisecond}, quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	d := startLive(t, cfg, h, 300*time.Millisecond)
	d.Submit(incidentNamed("crash-1"))
	waitFor(t, "slack delivered", func() bool { return slack.count() == 1 })
	waitFor(t, "the two bad ones failed on their own", func() bool {
		return testutil.ToFloat64(h.failures.WithLabelValues("pd")) >= 1 && testutil.ToFloat64(h.failures.WithLabelValues("hook")) >= 1
	})
	if v := testutil.ToFloat64(h.delivered.WithLabelValues("slack")); v != 1 {
		t.Errorf("slack deliveries %v", v)
	}
	time.Sleep(400 * time.Millisecond)
	if ids, _ := d.Undelivered(); len(ids) != 0 {
		t.Errorf("delivered by slack, yet undelivered: %v", ids)
	}
	if v := testutil.ToFloat64(h.built.WithLabelValues("pd", "pagerduty")); v != 0 {
		t.Errorf("pd built = %v without a key", v)
	}
}

// TestMonitoringGoesToOperatorsAsWarning: the watchdog's own trouble reaches the operators'
// notifier only, as a warning, even when made critical and even where a route sends
// critical incidents to PagerDuty.
func TestMonitoringGoesToOperatorsAsWarning(t *testing.T) {
	ops := newRecorder(t, slackWebhook)
	pd := newRecorder(t, pagerDutyAPI)
	env := envOf(map[string]string{"SLACK_WEBHOOK_URL": ops.URL + "/hook", "PAGERDUTY_ROUTING_KEY": "k"})
	cfg := liveConfig(NotifierConfig{Name: "pd", Type: "pagerduty", EventsURL: pd.URL + "/v2/enqueue"}, NotifierConfig{Name: "ops", Type: "slack"})
	r := RouteConfig{Notifiers: []string{"pd"}}
	r.Match.Severity = []incident.Severity{incident.SeverityCritical}
	cfg.Routes = []RouteConfig{r}
	cfg.Operators = []string{"ops"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h, err := NewHealth(cfg, BuildOptions{LookupEnv: env}, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := startLive(t, cfg, h, time.Minute)
	mon := incidentNamed("mon-1")
	mon.Kind, mon.Severity, mon.Summary = incident.KindMonitoring, incident.SeverityCritical, "node n1's sidecar is silent"
	d.Submit(mon)
	waitFor(t, "operators told", func() bool { return ops.count() == 1 })
	time.Sleep(100 * time.Millisecond)
	if pd.count() != 0 {
		t.Fatalf("a monitoring incident paged PagerDuty: %s", pd.requests()[0].raw)
	}
	if body := string(ops.requests()[0].raw); strings.Contains(strings.ToLower(body), "critical") {
		t.Errorf("monitoring incident delivered as critical: %s", body)
	}
}

// TestUpdateNotTakenIsNotUndelivered: PagerDuty takes no updates; an update routed to it
// alone is not an incident that paging failed to deliver.
func TestUpdateNotTakenIsNotUndelivered(t *testing.T) {
	pd := newRecorder(t, pagerDutyAPI)
	cfg := liveConfig(NotifierConfig{Name: "pd", Type: "pagerduty", EventsURL: pd.URL + "/v2/enqueue"})
	h, err := NewHealth(cfg, BuildOptions{LookupEnv: envOf(map[string]string{"PAGERDUTY_ROUTING_KEY": "k"})}, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := startLive(t, cfg, h, time.Minute)
	inc := incidentNamed("crash-1")
	d.Submit(inc)
	waitFor(t, "the open delivered", func() bool { return pd.count() == 1 })
	inc.Revision, inc.Summary = 2, inc.Summary+" (and more)"
	d.Submit(inc)
	waitFor(t, "the update handled", d.idle)
	d.pendMu.Lock()
	waiting := len(d.pending)
	d.pendMu.Unlock()
	if waiting != 0 {
		t.Errorf("an update PagerDuty does not take still waits for a delivery (%d waiting)", waiting)
	}
	if pd.count() != 1 {
		t.Errorf("%d requests, want the open only", pd.count())
	}
}

// TestConfigChangeIsPickedUp: the alert file is read again at each recheck; a notifier
// whose own section changed (here its webhook URL) delivers the next incident where the file
// now says, and a file made invalid meanwhile keeps the last good section.
func TestConfigChangeIsPickedUp(t *testing.T) {
	first, second := newRecorder(t, slackWebhook), newRecorder(t, slackWebhook)
	file := filepath.Join(t.TempDir(), "alerts.yaml")
	write := func(body string) { // atomically, as configuration management does
		t.Helper()
		if err := os.WriteFile(file+".tmp", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	section := func(url string) string {
		return "defaults: {group_wait: 0s, rate_limit: {every: 0s}}\nnotifiers:\n  - {name: hook, type: webhook, url: " + url + "}\n"
	}
	write(section(first.URL + "/in"))
	cfg, err := LoadConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	reload := func() (*Config, error) { return LoadConfig(file) }
	h, err := NewHealth(cfg, BuildOptions{LookupEnv: envOf(nil), Recheck: 50 * time.Millisecond, Reload: reload}, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := startLive(t, cfg, h, time.Minute)
	d.Submit(incidentNamed("one"))
	waitFor(t, "delivered where the file said", func() bool { return first.count() == 1 })

	write(section(second.URL + "/in"))
	time.Sleep(100 * time.Millisecond) // past a recheck
	d.Submit(incidentNamed("two"))
	waitFor(t, "delivered where the file says now", func() bool { return second.count() == 1 })

	write("notifiers: [{name: hook, type: bogus}]\n")
	time.Sleep(100 * time.Millisecond)
	d.Submit(incidentNamed("three"))
	waitFor(t, "an invalid file keeps the last good section", func() bool { return second.count() == 2 })
	if first.count() != 1 {
		t.Errorf("the old URL got %d requests, want 1", first.count())
	}
}
