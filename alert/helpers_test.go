package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/snapshot"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file (run go test -update after checking):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

var t0 = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// sampleMismatch is a mismatch as the detector reports it: rank 137 called AllGather
// where the other 511 ranks called AllReduce.
func sampleMismatch() incident.Incident {
	return incident.Incident{
		ID:       "inc-7f3a2c",
		Kind:     incident.KindMismatch,
		State:    incident.StateOpen,
		Severity: incident.SeverityCritical,
		Job:      "llama-70b-pretrain",
		Comm:     "0x9e1c4f2b7a3d5e60",
		Seq:      1842,
		Culprits: []incident.Culprit{{Rank: 137, Host: "gpu-node-017", PID: 48213, GPU: "1"}},
		Victims:  511,
		Summary:  "rank 137 called AllGather at collective #1842 while 511 ranks called AllReduce",
		Evidence: []string{
			"gpu-node-017:48213:48213 [1] NCCL INFO AllGather: opCount 732 sendbuff 0x7f2e0c000000 recvbuff 0x7f2e0e000000 count 4194304 datatype 9 op 0 root 0 comm 0x55d0c6a0 [nranks=512] stream 0x55d0c1b0",
			"ranks 0-136,138-511 issued AllReduce count 1048576 bf16 sum at collective #1842",
			"no progress on the communicator for 94 s",
		},
		Ops: map[string]incident.Op{
			"rank 137":            {Op: "AllGather", Count: 4194304, Datatype: "bf16"},
			"ranks 0-136,138-511": {Op: "AllReduce", Count: 1048576, Datatype: "bf16", RedOp: "sum"},
		},
		OpenedAt: t0,
		LastSeen: t0.Add(30 * time.Second),
		FaultAt:  t0.Add(-94 * time.Second),
		Revision: 1,
	}
}

func resolved(inc incident.Incident, after time.Duration) incident.Incident {
	inc = incident.Bound(inc)
	at := inc.OpenedAt.Add(after)
	inc.State, inc.ResolvedAt, inc.LastSeen = incident.StateResolved, &at, at
	inc.Revision++
	return inc
}

var testLinks = Links{
	Dashboard:      "https://grafana.example.com/d/ncclwatch/job?var-job={job}&var-incident={incident}",
	Runbooks:       map[incident.Kind]string{incident.KindMismatch: "https://runbooks.example.com/nccl/mismatch"},
	DefaultRunbook: "https://runbooks.example.com/nccl",
}

// recordedRequest is a request as a golden file shows it: JSON bodies and the JSON-valued
// form fields Slack uses (blocks) are kept verbatim, just indented.
type recordedRequest struct {
	Method      string                     `json:"method"`
	Path        string                     `json:"path"`
	ContentType string                     `json:"content_type"`
	Headers     map[string]string          `json:"headers,omitempty"`
	Form        map[string]json.RawMessage `json:"form,omitempty"`
	Body        json.RawMessage            `json:"body,omitempty"`

	at  time.Time // on the test's clock
	raw []byte
}

// recorder is an httptest server that records requests and answers with respond.
type recorder struct {
	*httptest.Server
	t       *testing.T
	clock   clockwork.Clock
	token   string   // expected Slack token in forms; removed from the record
	headers []string // headers to record
	respond func(w http.ResponseWriter, r *http.Request, n int)

	mu   sync.Mutex
	reqs []recordedRequest
	got  chan struct{}
}

func newRecorder(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, n int)) *recorder {
	rec := &recorder{t: t, clock: clockwork.NewRealClock(), respond: respond, got: make(chan struct{}, 100000)}
	rec.Server = httptest.NewServer(http.HandlerFunc(rec.handle))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) handle(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req := recordedRequest{Method: r.Method, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"), at: rec.clock.Now(), raw: raw}
	for _, h := range rec.headers {
		if v := r.Header.Get(h); v != "" {
			if req.Headers == nil {
				req.Headers = map[string]string{}
			}
			req.Headers[h] = v
		}
	}
	if strings.HasPrefix(req.ContentType, "application/x-www-form-urlencoded") {
		r.Body = io.NopCloser(bytes.NewReader(raw))
		if err := r.ParseForm(); err != nil {
			rec.t.Errorf("bad form: %v", err)
		}
		req.Form = map[string]json.RawMessage{}
		for k, vs := range r.PostForm {
			v := strings.Join(vs, ",")
			if k == "token" {
				if v != rec.token {
					rec.t.Errorf("form token %q, want %q", v, rec.token)
				}
				continue
			}
			if json.Valid([]byte(v)) && (strings.HasPrefix(v, "[") || strings.HasPrefix(v, "{")) {
				req.Form[k] = json.RawMessage(v)
			} else {
				b, _ := json.Marshal(v)
				req.Form[k] = b
			}
		}
	} else if len(raw) > 0 {
		if json.Valid(raw) {
			req.Body = bytes.TrimSpace(raw)
		} else {
			b, _ := json.Marshal(string(raw))
			req.Body = b
		}
	}
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, req)
	n := len(rec.reqs)
	rec.mu.Unlock()
	rec.respond(w, r, n)
	rec.got <- struct{}{}
}

func (rec *recorder) requests() []recordedRequest {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recordedRequest(nil), rec.reqs...)
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}

func (rec *recorder) goldenJSON(t *testing.T, name string) {
	t.Helper()
	b, err := json.MarshalIndent(rec.requests(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, name, append(b, '\n'))
}

// slackAPI answers like Slack's Web API: chat.postMessage and chat.update.
func slackAPI(w http.ResponseWriter, r *http.Request, n int) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasSuffix(r.URL.Path, "/chat.postMessage"):
		fmt.Fprintf(w, `{"ok":true,"channel":"C1","ts":"1700000000.%06d"}`, n*100)
	case strings.HasSuffix(r.URL.Path, "/chat.update"):
		_ = r.ParseForm()
		fmt.Fprintf(w, `{"ok":true,"channel":"C1","ts":%q,"text":"updated"}`, r.PostForm.Get("ts"))
	default:
		fmt.Fprint(w, `{"ok":false,"error":"unknown_method"}`)
	}
}

// slackWebhook answers like an incoming webhook.
func slackWebhook(w http.ResponseWriter, _ *http.Request, _ int) {
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprint(w, "ok")
}

// pagerDutyAPI answers like the Events API v2.
func pagerDutyAPI(w http.ResponseWriter, r *http.Request, _ int) {
	if r.URL.Path != "/v2/enqueue" {
		http.NotFound(w, r)
		return
	}
	var e struct {
		DedupKey string `json:"dedup_key"`
	}
	_ = json.NewDecoder(bytes.NewReader(mustRead(r))).Decode(&e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"status":"success","message":"Event processed","dedup_key":%q}`, e.DedupKey)
}

func mustRead(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	return b
}

// notify runs n.Notify on a batch of notifications built from incidents.
func notify(t *testing.T, n Notifier, ns ...*Notification) (bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return n.Notify(ctx, ns...)
}

func note(inc incident.Incident, ev Event, prev *Delivery) *Notification {
	return &Notification{Incident: inc, Event: ev, Previous: prev}
}

var (
	etcdOnce   sync.Once
	etcdServer *etcdembed.Server
	etcdErr    error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if etcdServer != nil {
		_ = etcdServer.Close()
	}
	os.Exit(code)
}

// testEtcd returns a client of the package's embedded etcd (started on first use) with
// no delivery state left by earlier tests.
func testEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	etcdOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		etcdServer, etcdErr = etcdembed.Start(ctx, etcdembed.Options{Logger: slog.New(slog.DiscardHandler)})
	})
	if etcdErr != nil {
		t.Fatalf("embedded etcd: %v", etcdErr)
	}
	c, err := etcdconn.New(etcdconn.Config{Endpoints: etcdServer.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Delete(ctx, snapshot.DetectorPrefix+"delivery/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	return c
}

// pump advances a fake clock in steps until cond holds (bounded in real time).
func pump(t *testing.T, clock *clockwork.FakeClock, step time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 20 s")
		}
		clock.Advance(step)
		time.Sleep(2 * time.Millisecond)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
