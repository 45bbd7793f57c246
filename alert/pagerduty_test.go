package alert

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ncclwatch/watchdog/incident"
)

const testRoutingKey = "R0UT1NGKEYR0UT1NGKEYR0UT1NGKEY01"

func TestPagerDutyGolden(t *testing.T) {
	rec := newRecorder(t, pagerDutyAPI)
	rec.headers = []string{"Authorization"}
	p, err := NewPagerDuty(rec.URL, testRoutingKey, PagerDutyOptions{Links: testLinks})
	if err != nil {
		t.Fatal(err)
	}
	if p.Accepts(EventUpdate) {
		t.Error("PagerDuty must not take updates: one root cause is one page")
	}
	inc := sampleMismatch()
	trigger := note(inc, EventOpen, nil)
	if _, err := notify(t, p, trigger); err != nil {
		t.Fatal(err)
	}
	if !trigger.delivered {
		t.Error("trigger not acknowledged")
	}
	prev := &Delivery{Revision: 1, State: incident.StateOpen}
	if _, err := notify(t, p, note(resolved(inc, 252*time.Second), EventResolve, prev)); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want trigger and resolve", len(reqs))
	}
	for _, r := range reqs {
		if r.Headers["Authorization"] != "" {
			t.Errorf("Events API needs no Authorization header, got one")
		}
	}
	rec.goldenJSON(t, "pagerduty.golden.json")
}

func TestPagerDutyEventURLForms(t *testing.T) {
	rec := newRecorder(t, pagerDutyAPI)
	for _, u := range []string{rec.URL, rec.URL + "/", rec.URL + "/v2/enqueue"} {
		p, err := NewPagerDuty(u, testRoutingKey, PagerDutyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := notify(t, p, note(sampleMismatch(), EventOpen, nil)); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestPagerDutyPayloadLimits(t *testing.T) {
	inc := sampleMismatch()
	inc.Summary = strings.Repeat("x", 5000)
	inc.Severity = "bogus"
	inc.Culprits = nil
	for i := range 80 {
		inc.Culprits = append(inc.Culprits, incident.Culprit{Rank: i, Host: fmt.Sprintf("h%d", i)})
	}
	inc.Evidence = nil
	for range 200 {
		inc.Evidence = append(inc.Evidence, strings.Repeat("e\n", 2000))
	}
	e := pagerDutyEvent(inc, EventOpen, testRoutingKey, Links{})
	if n := utf8.RuneCountInString(e.Payload.Summary); n > pdSummaryMax {
		t.Errorf("summary of %d chars > %d", n, pdSummaryMax)
	}
	if e.Payload.Severity != "error" {
		t.Errorf("unknown severity maps to %q, want error", e.Payload.Severity)
	}
	d := e.Payload.Details.(pdDetails)
	if len(d.Culprits) != pdMaxCulprits || len(d.Evidence) != pdMaxEvidence || d.More != "omitted 30 culprits and 150 evidence lines" {
		t.Errorf("culprits %d evidence %d note %q", len(d.Culprits), len(d.Evidence), d.More)
	}
	if strings.Contains(d.Evidence[0], "\n") || utf8.RuneCountInString(d.Evidence[0]) > pdLineMax {
		t.Errorf("evidence line not one capped line")
	}
	for sev, want := range map[incident.Severity]string{"critical": "critical", "warning": "warning", "info": "info"} {
		if got := pdSeverity(sev); got != want {
			t.Errorf("pdSeverity(%s) = %s", sev, got)
		}
	}
}

func TestPagerDutyErrorsClassified(t *testing.T) {
	for _, tc := range []struct {
		status     int
		retryAfter string
		retry      bool
		wait       time.Duration
	}{
		{http.StatusTooManyRequests, "7", true, 7 * time.Second},
		{http.StatusTooManyRequests, "", true, 0},
		{http.StatusServiceUnavailable, "", true, 0},
		{http.StatusBadRequest, "", false, 0},
		{http.StatusForbidden, "", false, 0},
	} {
		t.Run(fmt.Sprint(tc.status, tc.retryAfter), func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, `{"status":"error","message":"rejected %s"}`, testRoutingKey)
			})
			p, err := NewPagerDuty(rec.URL, testRoutingKey, PagerDutyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n := note(sampleMismatch(), EventOpen, nil)
			retry, err := notify(t, p, n)
			if err == nil || retry != tc.retry || n.delivered {
				t.Fatalf("retry=%v err=%v delivered=%v, want retry=%v", retry, err, n.delivered, tc.retry)
			}
			var ra *RetryAfterError
			got := time.Duration(0)
			if errors.As(err, &ra) {
				got = ra.After
			}
			if got != tc.wait {
				t.Errorf("retry after %s, want %s", got, tc.wait)
			}
			if strings.Contains(err.Error(), testRoutingKey) {
				t.Errorf("error leaks the routing key: %v", err)
			}
		})
	}
}

func TestPagerDutyPartialBatchAcksDelivered(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 3 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		pagerDutyAPI(w, r, n)
	})
	p, err := NewPagerDuty(rec.URL, testRoutingKey, PagerDutyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ns []*Notification
	for _, inc := range burst(5) {
		ns = append(ns, note(inc, EventOpen, nil))
	}
	retry, err := notify(t, p, ns...)
	if err == nil || !retry {
		t.Fatalf("retry=%v err=%v", retry, err)
	}
	var got []bool
	for _, n := range ns {
		got = append(got, n.delivered)
	}
	if fmt.Sprint(got) != "[true true false false false]" {
		t.Errorf("delivered %v: only the events before the failure count", got)
	}
	var body map[string]any
	_ = json.Unmarshal(rec.requests()[0].Body, &body)
	if body["dedup_key"] != "inc-0000" {
		t.Errorf("dedup_key %v", body["dedup_key"])
	}
}
