package alert

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

func TestWebhookSignedJSON(t *testing.T) {
	secret := []byte("hmac-secret-value")
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
	})
	rec.headers = []string{WebhookEventHeader, WebhookSignatureHeader, "User-Agent"}
	wh, err := NewWebhook(rec.URL+"/hook?token=urlsecret", WebhookOptions{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	inc := sampleMismatch()
	if _, err := notify(t, wh, note(inc, EventOpen, nil)); err != nil {
		t.Fatal(err)
	}
	r := rec.requests()[0]
	if got, want := r.Headers[WebhookSignatureHeader], Sign(secret, r.raw); got != want {
		t.Errorf("signature %s, want %s", got, want)
	}
	want, _ := json.Marshal(inc)
	if !bytes.Equal(r.raw, want) {
		t.Errorf("body is not the incident JSON:\n%s", r.raw)
	}
	rec.goldenJSON(t, "webhook.golden.json")

	// A 400 is permanent; the error names neither the URL's token nor the secret.
	retry, err := notify(t, wh, note(inc, EventOpen, nil))
	if err == nil || retry {
		t.Fatalf("retry=%v err=%v, want a permanent error", retry, err)
	}
	if strings.Contains(err.Error(), "urlsecret") || strings.Contains(err.Error(), "hmac-secret") {
		t.Errorf("error leaks a secret: %v", err)
	}
}

func TestWebhookRetryableStatus(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	wh, err := NewWebhook(rec.URL, WebhookOptions{})
	if err != nil {
		t.Fatal(err)
	}
	retry, err := notify(t, wh, note(sampleMismatch(), EventOpen, nil))
	if !retry || err == nil {
		t.Fatalf("retry=%v err=%v", retry, err)
	}
	if ra := retryAfterOf(err); ra == nil || ra.After != 2*time.Second {
		t.Errorf("retry-after %v, want 2s", ra)
	}
	if rec.requests()[0].Headers != nil {
		t.Error("unsigned webhook sent headers it should not")
	}
}

func TestAlertmanagerGolden(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusOK) })
	now := func() time.Time { return t0.Add(time.Minute) }
	am, err := NewAlertmanager(rec.URL+"/", AlertmanagerOptions{Links: testLinks, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	open := sampleMismatch()
	other := burst(1)[0]
	if _, err := notify(t, am, note(open, EventOpen, nil), note(resolved(other, time.Minute), EventResolve, nil)); err != nil {
		t.Fatal(err)
	}
	if rec.count() != 1 || rec.requests()[0].Path != "/api/v2/alerts" {
		t.Fatalf("want one POST /api/v2/alerts, got %+v", rec.requests())
	}
	rec.goldenJSON(t, "alertmanager.golden.json")
}

func TestConsoleLines(t *testing.T) {
	var buf bytes.Buffer
	c := NewConsole(&buf)
	inc := sampleMismatch()
	inc.Summary += "\nFAKE 2025-01-01T00:00:00Z RESOLVE forged line"
	if _, err := notify(t, c, note(inc, EventOpen, nil), note(resolved(inc, 252*time.Second), EventResolve, nil)); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Errorf("%d lines, want 2: a newline in a log line must not forge a console line", n)
	}
	golden(t, "console.golden.txt", buf.Bytes())
}

func TestDecide(t *testing.T) {
	open := sampleMismatch()
	open.Revision = 3
	res := resolved(open, time.Minute) // revision 4
	d := func(rev int, st incident.State) *Delivery { return &Delivery{Revision: rev, State: st} }
	for _, tc := range []struct {
		name string
		prev *Delivery
		inc  incident.Incident
		want Event
	}{
		{"new open", nil, open, EventOpen},
		{"resolve never announced", nil, res, ""},
		{"same revision", d(3, incident.StateOpen), open, ""},
		{"stale revision", d(5, incident.StateOpen), open, ""},
		{"newer revision", d(2, incident.StateOpen), open, EventUpdate},
		{"resolve", d(3, incident.StateOpen), res, EventResolve},
		{"resolve at equal revision", d(4, incident.StateOpen), res, EventResolve},
		{"resolve delivered", d(4, incident.StateResolved), res, ""},
		{"reopened", d(2, incident.StateResolved), open, EventOpen},
	} {
		got, ok := decide(tc.prev, tc.inc)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: decide = %q %v, want %q", tc.name, got, ok, tc.want)
		}
	}
}

func TestRedactor(t *testing.T) {
	r := newRedactor("https://hooks.slack.com/services/T1/B2/abc def", "xoxb-1-2-3")
	in := `Post "https://hooks.slack.com/services/T1/B2/abc%20def": EOF; token xoxb-1-2-3; path /services/T1/B2/abc%20def`
	got := r.String(in)
	if strings.Contains(got, "abc") || strings.Contains(got, "xoxb-1-2-3") || strings.Contains(got, "T1/B2") {
		t.Errorf("redacted: %s", got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":                              0,
		"1":                             time.Second,
		" 120 ":                         2 * time.Minute,
		"-3":                            0,
		"99999":                         maxRetryAfter,
		"Wed, 01 Jan 2025 00:00:30 GMT": 30 * time.Second,
		"soon":                          0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestEveryKindHasATitle(t *testing.T) {
	for _, k := range incident.Kinds {
		if kindTitle(k) == string(k) {
			t.Errorf("incident kind %q has no title for people", k)
		}
	}
}
