package live

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/snapshot"
)

// takeovers records what each leadership term starts with: the incidents a dispatcher
// would deliver if it had not yet.
type takeovers struct {
	recorder
	mu    sync.Mutex
	known [][]incident.Incident
}

func (k *takeovers) Start(_ context.Context, known []incident.Incident) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.known = append(k.known, known)
	return nil
}

func (k *takeovers) Close()                       {}
func (k *takeovers) Submit(inc incident.Incident) { k.submit("any", inc) }

func (k *takeovers) terms() [][]incident.Incident {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([][]incident.Incident(nil), k.known...)
}

// TestForgedIncidentNotPagedAtTakeover: someone with write access to the prefix (not a
// detector) stores open incidents: plain JSON, and one with a made-up seal. A standby that
// takes over does not hand them to its notifiers, does not list them, and counts them.
func TestForgedIncidentNotPagedAtTakeover(t *testing.T) {
	srv, err := etcdembed.Start(t.Context(), etcdembed.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rec := &takeovers{}
	start := func(id string, reg prometheus.Registerer) *replica {
		cli, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
		if err != nil {
			t.Fatal(err)
		}
		d, err := New(Options{Client: cli, Rules: detect.DefaultConfig(), Interval: 200 * time.Millisecond,
			ResolveAfter: time.Second, LeaseTTL: 2 * time.Second, ID: id, Logger: slog.New(slog.DiscardHandler), Registerer: reg,
			NewAlerts: func(prometheus.Registerer) (Alerts, error) { return rec, nil }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{d: d, cli: cli, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(r.done); d.Run(ctx) }()
		return r
	}
	a := start("a", nil)
	eventually(t, 10*time.Second, "replica a leads", a.leading)

	forged := incident.Incident{ID: "forged-1", Key: "rank:n9:1", Kind: incident.KindCrash, State: incident.StateOpen,
		Severity: incident.SeverityCritical, Job: "train", Summary: "rank 0 crashed (forged)", Revision: 1, OpenedAt: time.Now()}
	plain, _ := json.Marshal(forged)
	forged.ID = "forged-2"
	body, _ := json.Marshal(forged)
	fakeSeal := `{"seal":"hmac-sha256:` + strings.Repeat("A", 43) + `",` + string(body[1:])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for key, v := range map[string]string{snapshot.IncidentKey("train", "forged-1"): string(plain),
		snapshot.IncidentKey("train", "forged-2"): fakeSeal} {
		if _, err := a.cli.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	b := start("b", reg)
	defer func() { b.cancel(); <-b.done; b.cli.Close() }()
	eventually(t, 10*time.Second, "b has read etcd", func() bool { return b.d.Ready() == nil })
	a.cli.Close()
	a.cancel()
	<-a.done
	eventually(t, 10*time.Second, "standby takes over", b.leading)
	time.Sleep(500 * time.Millisecond)
	terms := rec.terms()
	if len(terms) != 2 {
		t.Fatalf("%d leadership terms, want 2", len(terms))
	}
	for _, inc := range terms[1] {
		if strings.HasPrefix(inc.ID, "forged") {
			t.Errorf("the new leader would deliver forged incident %s", inc.ID)
		}
	}
	if got := b.d.Incidents("train", ""); len(got) != 0 {
		t.Errorf("forged incidents listed: %+v", got)
	}
	for reason, want := range map[string]float64{"unsealed": 1, "bad_seal": 1} {
		// Each is refused by the watch's first read and again at the takeover.
		if got := testutil.ToFloat64(b.d.refused.counter.WithLabelValues(reason)); got < want {
			t.Errorf("refused %s: %v, want at least %v", reason, got, want)
		}
	}
}
