package assemble

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/detect/live"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/snapshot"
)

// TestReplicasPageOnce: two detector replicas as production builds them, each with its
// real alert dispatcher and the delivery state they share in etcd, page a webhook. The
// replica that owns the hung job pages once and records it; it stops (its lease revoked as
// a replica that shuts down does), the other takes the job over and continues the
// incident, and the webhook still has one page, then one resolve when the job recovers.
func TestReplicasPageOnce(t *testing.T) {
	srv, cli := etcdtest.Start(t, etcdembed.Options{})
	var mu sync.Mutex
	var events []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var inc incident.Incident
		if err := json.NewDecoder(r.Body).Decode(&inc); err == nil && inc.Job == "train" {
			mu.Lock()
			events = append(events, r.Header.Get(alert.WebhookEventHeader)+" "+inc.ID)
			mu.Unlock()
		}
	}))
	defer hook.Close()
	count := func(event string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, e := range events {
			if len(e) > len(event) && e[:len(event)+1] == event+" " {
				n++
			}
		}
		return n
	}
	zero := time.Duration(0)
	cfg := &alert.Config{Defaults: alert.SettingsConfig{GroupWait: &zero},
		Notifiers: []alert.NotifierConfig{{Name: "hook", Type: "webhook", URL: hook.URL}}}
	quiet := slog.New(slog.DiscardHandler)

	type replica struct {
		d    *live.Detector
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(id string) *replica {
		c, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		d, err := Detector(c, DetectorConfig{Interval: 200 * time.Millisecond, ResolveAfter: time.Second, LeaseTTL: 2 * time.Second,
			ID: id, Logger: quiet, Alerts: Alerts(cfg, c, AlertOptions{Logger: quiet})})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{d: d, stop: cancel, done: make(chan struct{})}
		go func() { defer close(r.done); d.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	replicas := map[string]*replica{"a": start("a"), "b": start("b")}

	put := func(r int, n int64, at time.Time) {
		last := snapshot.Op{Seq: n, Op: "AllReduce", Count: 1024, Dtype: "float32", Red: "sum", T: snapshot.MicrosOf(at)}
		name := []string{"n0", "n1"}[r]
		b, err := snapshot.Encode(&snapshot.Node{Job: "train", Node: name, Started: 1, Processes: []snapshot.Process{{
			Host: name, PID: 100 + r, Rank: r, Comms: []snapshot.Comm{{ID: "0xabc", Ptr: "0x1", Rank: r, NRanks: 2,
				State: snapshot.CommReady, Count: n, Last: &last}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(t.Context(), snapshot.NodeKey("train", name), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15 s (webhook saw %v)", what, events)
			}
		}
	}
	stalled := time.Now().Add(-30 * time.Second)
	put(0, 100, stalled)
	put(1, 90, stalled)
	waitFor("the hang paged", func() bool { return count("open") == 1 })
	// The page is acknowledged and its delivery recorded (a dispatcher stopped while a
	// send is in flight sends again: at least once).
	waitFor("the delivery recorded", func() bool {
		mu.Lock()
		id := events[0][len("open "):]
		mu.Unlock()
		r, err := cli.Get(t.Context(), snapshot.DeliveryKey("hook", id))
		return err == nil && len(r.Kvs) == 1
	})
	owner := ownerOf(replicas["a"].d)
	other := map[string]string{"a": "b", "b": "a"}[owner]
	replicas[owner].stop()
	<-replicas[owner].done
	waitFor("the other replica owns the job", func() bool { return ownerOf(replicas[other].d) == other })
	time.Sleep(2 * time.Second) // evaluations and deliveries by the new owner
	if n := count("open"); n != 1 {
		t.Fatalf("%d pages after the takeover, want 1: %v", n, events)
	}
	now := time.Now()
	put(0, 120, now)
	put(1, 120, now)
	waitFor("the resolve delivered", func() bool { return count("resolve") == 1 })
	time.Sleep(time.Second)
	if count("open") != 1 || count("resolve") != 1 {
		t.Fatalf("webhook saw %v, want one open and one resolve", events)
	}
}

// ownerOf is the owner of job train as d's API says.
func ownerOf(d *live.Detector) string {
	rec := httptest.NewRecorder()
	d.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/leader", nil))
	var v struct {
		Owners map[string]string `json:"owners"`
	}
	if json.Unmarshal(rec.Body.Bytes(), &v) != nil {
		return ""
	}
	return v.Owners["train"]
}
