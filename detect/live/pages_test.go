package live

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/snapshot"
)

// pagerDuty is a local PagerDuty Events API v2 receiver: it records each event's action
// and dedup key.
type pagerDuty struct {
	mu     sync.Mutex
	events []string // "<action> <dedup key>"
}

func (p *pagerDuty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Action   string `json:"event_action"`
		DedupKey string `json:"dedup_key"`
		Payload  struct {
			Details struct {
				Job string `json:"job"`
			} `json:"custom_details"`
		} `json:"payload"`
	}
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ev.Action == "trigger" && ev.Payload.Details.Job != "train" {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	p.mu.Lock()
	p.events = append(p.events, ev.Action+" "+ev.DedupKey)
	p.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"status":"success","message":"Event processed","dedup_key":%q}`, ev.DedupKey)
}

// triggered and orphaned: the dedup keys triggered, and those triggered but never resolved.
func (p *pagerDuty) triggered() (keys []string, orphaned []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	open := map[string]bool{}
	for _, e := range p.events {
		var action, key string
		fmt.Sscan(e, &action, &key)
		switch action {
		case "trigger":
			if !open[key] {
				keys = append(keys, key)
			}
			open[key] = true
		case "resolve":
			delete(open, key)
		}
	}
	for _, k := range keys {
		if open[k] {
			orphaned = append(orphaned, k)
		}
	}
	return keys, orphaned
}

func (p *pagerDuty) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.events...)
}

// TestIncidentKeyLostAtFailover: a hang is paged to PagerDuty (a local receiver) by the
// replica that owns its job, through the real alert dispatcher and its delivery state in
// etcd; then the incident's key is deleted, or overwritten with garbage, and its owner
// dies. The replica that takes the job over restores the incident from its sealed page
// record: the hang goes on under its id (no second trigger), and when the job recovers its
// one PagerDuty event is resolved (no orphan). Over TLS with client certificates and auth,
// on the embedded etcd and on Debian's 3.4.
func TestIncidentKeyLostAtFailover(t *testing.T) {
	for _, backend := range etcdtest.Backends {
		for _, damage := range []string{"deleted", "garbled"} {
			t.Run(backend+" "+damage, func(t *testing.T) {
				e := etcdtest.StartSecured(t, backend, "train")
				root := e.Client(t, e.Config("root"))
				pd := &pagerDuty{}
				srv := httptest.NewServer(pd)
				defer srv.Close()
				zero := time.Duration(0)
				cfg := &alert.Config{Defaults: alert.SettingsConfig{GroupWait: &zero},
					Notifiers: []alert.NotifierConfig{{Name: "pd", Type: "pagerduty", EventsURL: srv.URL}}}
				build := alert.BuildOptions{LookupEnv: func(k string) (string, bool) {
					return "R0UT1NGKEY0000000000000000000000", k == "PAGERDUTY_ROUTING_KEY"
				}}
				c := newClusterOn(t, nil, e.Config(etcdroles.Detector), root)
				c.alerts = func(id string, cli *clientv3.Client) func(prometheus.Registerer) (Alerts, error) {
					return func(reg prometheus.Registerer) (Alerts, error) {
						return alert.New(cfg, build, alert.Options{Store: alert.NewEtcdStore(cli, alert.EtcdStoreOptions{}),
							Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
					}
				}
				c.start("a")
				c.start("b")
				c.hang()
				var id string
				eventually(t, 20*time.Second, "the hang paged and its delivery recorded", func() bool {
					keys, _ := pd.triggered()
					if len(keys) != 1 {
						return false
					}
					id = keys[0]
					r, err := root.Get(context.Background(), snapshot.DeliveryKey("pd", id))
					return err == nil && len(r.Kvs) == 1
				})
				owner := c.owner("a", "train")
				survivor := other([2]string{"a", "b"}, owner)
				// The owner stops (frozen, as SIGSTOP: it neither writes nor renews), then
				// the incident's key is damaged: no one rewrites it before the takeover.
				c.kill(owner)
				time.Sleep(300 * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var err error
				if damage == "deleted" {
					_, err = root.Delete(ctx, snapshot.IncidentKey("train", id))
				} else {
					_, err = root.Put(ctx, snapshot.IncidentKey("train", id), `{"seal":"00","id":"`+id+`","state":"resolved"}`)
				}
				if err != nil {
					t.Fatal(err)
				}
				eventually(t, 20*time.Second, "the survivor owns train", func() bool { return c.owns(survivor, "train") })
				time.Sleep(2 * time.Second) // evaluations and deliveries by the new owner
				if keys, _ := pd.triggered(); len(keys) != 1 {
					t.Fatalf("PagerDuty triggered %d events after the takeover, want 1: %v", len(keys), pd.log())
				}
				c.heal(120)
				eventually(t, 20*time.Second, "the page resolved", func() bool { _, orphaned := pd.triggered(); return len(orphaned) == 0 })
				time.Sleep(time.Second)
				keys, orphaned := pd.triggered()
				if len(keys) != 1 || len(orphaned) != 0 || keys[0] != id {
					t.Fatalf("PagerDuty: %d events triggered, %d orphaned, want the one page %s resolved: %v", len(keys), len(orphaned), id, pd.log())
				}
				if got := c.storedIncidents("train"); len(got) != 1 || got[0].ID != id || got[0].State != "resolved" {
					t.Errorf("stored incidents after the recovery: %+v", got)
				}
			})
		}
	}
}
