package alert

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ncclwatch/watchdog/incident"
)

func TestSlackWebhookGolden(t *testing.T) {
	rec := newRecorder(t, slackWebhook)
	s, err := NewSlackWebhook(rec.URL+"/services/T000/B000/XXXXSECRET", SlackOptions{Links: testLinks})
	if err != nil {
		t.Fatal(err)
	}
	if s.Accepts(EventUpdate) {
		t.Error("a webhook cannot thread updates, yet Accepts(update)")
	}
	inc := sampleMismatch()
	open := note(inc, EventOpen, nil)
	if _, err := notify(t, s, open); err != nil {
		t.Fatal(err)
	}
	if !open.delivered || open.ref != nil {
		t.Errorf("open: delivered=%v ref=%v, want delivered without a message ref", open.delivered, open.ref)
	}
	prev := &Delivery{Notifier: "slack", IncidentID: inc.ID, Revision: 1, State: incident.StateOpen}
	if _, err := notify(t, s, note(resolved(inc, 4*time.Minute+12*time.Second), EventResolve, prev)); err != nil {
		t.Fatal(err)
	}
	rec.goldenJSON(t, "slack_webhook.golden.json")
}

func TestSlackBotLifecycleGolden(t *testing.T) {
	rec := newRecorder(t, slackAPI)
	rec.token = "xoxb-test-token"
	s, err := NewSlackBot(rec.URL+"/api", rec.token, "#gpu-oncall", SlackOptions{Links: testLinks})
	if err != nil {
		t.Fatal(err)
	}
	inc := sampleMismatch()

	open := note(inc, EventOpen, nil)
	if _, err := notify(t, s, open); err != nil {
		t.Fatal(err)
	}
	want := MessageRef{Channel: "C1", TS: "1700000000.000100"}
	if open.ref == nil || *open.ref != want {
		t.Fatalf("open ref %+v, want %+v", open.ref, want)
	}
	prev := &Delivery{Notifier: "slack", IncidentID: inc.ID, Revision: 1, State: incident.StateOpen, Message: open.ref}

	upd := incident.Bound(inc)
	upd.Revision, upd.LastSeen = 2, t0.Add(time.Minute)
	upd.Evidence = append(upd.Evidence, "rank 137 still in AllGather after 154 s")
	if _, err := notify(t, s, note(upd, EventUpdate, prev)); err != nil {
		t.Fatal(err)
	}
	prev.Revision = 2
	res := note(resolved(upd, 4*time.Minute+12*time.Second), EventResolve, prev)
	if _, err := notify(t, s, res); err != nil {
		t.Fatal(err)
	}
	if !res.delivered {
		t.Error("resolve not acknowledged")
	}
	var paths []string
	for _, r := range rec.requests() {
		paths = append(paths, r.Path)
	}
	if got := strings.Join(paths, " "); got != "/api/chat.postMessage /api/chat.postMessage /api/chat.update /api/chat.postMessage" {
		t.Errorf("calls %s", got)
	}
	rec.goldenJSON(t, "slack_bot.golden.json")
}

func TestSlackUpdateOfVanishedMessagePostsNew(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if strings.HasSuffix(r.URL.Path, "/chat.update") {
			fmt.Fprint(w, `{"ok":false,"error":"message_not_found"}`)
			return
		}
		slackAPI(w, r, n)
	})
	rec.token = "xoxb-test-token"
	s, err := NewSlackBot(rec.URL+"/api/", rec.token, "C1", SlackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prev := &Delivery{Revision: 1, State: incident.StateOpen, Message: &MessageRef{Channel: "C1", TS: "1.2"}}
	if _, err := notify(t, s, note(resolved(sampleMismatch(), time.Minute), EventResolve, prev)); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	if len(reqs) != 2 || reqs[1].Path != "/api/chat.postMessage" || reqs[1].Form["thread_ts"] != nil {
		t.Fatalf("want chat.update then a new top-level post, got %+v", reqs)
	}
}

func TestSlackGroupGolden(t *testing.T) {
	rec := newRecorder(t, slackWebhook)
	s, err := NewSlackWebhook(rec.URL+"/hook", SlackOptions{Links: testLinks})
	if err != nil {
		t.Fatal(err)
	}
	var ns []*Notification
	for _, inc := range burst(500) {
		ns = append(ns, note(inc, EventOpen, nil))
	}
	if _, err := notify(t, s, ns...); err != nil {
		t.Fatal(err)
	}
	if rec.count() != 1 {
		t.Fatalf("%d messages for a burst, want 1", rec.count())
	}
	checkSlackValid(t, rec)
	rec.goldenJSON(t, "slack_group.golden.json")
}

// burst returns n distinct incidents of one job, as a failing switch would produce.
func burst(n int) []incident.Incident {
	out := make([]incident.Incident, n)
	for i := range out {
		kind, sev := incident.KindLink, incident.SeverityWarning
		if i%5 == 0 {
			kind, sev = incident.KindHang, incident.SeverityCritical
		}
		out[i] = incident.Incident{
			ID: fmt.Sprintf("inc-%04d", i), Kind: kind, State: incident.StateOpen, Severity: sev,
			Job:      "llama-70b-pretrain",
			Culprits: []incident.Culprit{{Rank: -1, Host: fmt.Sprintf("gpu-node-%03d", i/8), Port: fmt.Sprintf("mlx5_%d:1", i%8)}},
			Summary:  fmt.Sprintf("port mlx5_%d:1 of gpu-node-%03d is down", i%8, i/8),
			Evidence: []string{"state DOWN, phys_state Polling"},
			OpenedAt: t0.Add(time.Duration(i) * time.Millisecond), Revision: 1,
		}
		if kind == incident.KindHang {
			out[i].Culprits[0].Rank = i
			out[i].Culprits[0].Port = ""
			out[i].Summary = fmt.Sprintf("rank %d made no progress for 60 s", i)
		}
	}
	return out
}

func TestSlackLimits(t *testing.T) {
	rec := newRecorder(t, slackWebhook)
	s, err := NewSlackWebhook(rec.URL+"/hook", SlackOptions{Links: testLinks})
	if err != nil {
		t.Fatal(err)
	}
	inc := sampleMismatch()
	long := strings.Repeat("<&>*", 2000)
	inc.Summary = long
	inc.Job = long
	inc.Comm = long
	inc.Culprits = nil
	inc.Ops = map[string]incident.Op{}
	for i := range 100 {
		inc.Culprits = append(inc.Culprits, incident.Culprit{Rank: i, Host: long})
		inc.Ops[fmt.Sprintf("rank %d %s", i, long)] = incident.Op{Op: long, Count: 1}
	}
	inc.Evidence = nil
	for range 1000 {
		inc.Evidence = append(inc.Evidence, long)
	}
	if _, err := notify(t, s, note(inc, EventOpen, nil)); err != nil {
		t.Fatal(err)
	}
	checkSlackValid(t, rec)
	body := rec.requests()[0].Body
	// Truncation never leaves half an entity behind.
	var msg struct {
		Blocks []json.RawMessage `json:"blocks"`
	}
	_ = json.Unmarshal(body, &msg)
	for _, b := range msg.Blocks {
		var blk struct {
			Text *struct {
				Text string `json:"text"`
			} `json:"text"`
		}
		_ = json.Unmarshal(b, &blk)
		if blk.Text == nil {
			continue
		}
		for _, bad := range []string{"&a…", "&am…", "&amp…", "&l…", "&lt…", "&g…", "&gt…", "&…"} {
			if strings.Contains(blk.Text.Text, bad) {
				t.Errorf("cut entity %q in %q", bad, truncate(blk.Text.Text, 80))
			}
		}
	}
}

func TestSlackEscapesLogText(t *testing.T) {
	inc := sampleMismatch()
	inc.Evidence = []string{"<!channel> <http://evil|click> & *bold*"}
	inc.Summary = "<@U123> and <!here> and @channel say _hi_ ~x~ `rm -rf`"
	inc.Culprits[0].Host = "evil<!everyone>"
	text := RenderSlackText(inc, testLinks)

	for _, want := range []string{
		"• &lt;!channel&gt; &lt;http://evil|click&gt; &amp; ∗bold∗",
		"&lt;@U123&gt; and &lt;!here&gt; and ＠channel say ＿hi＿ ∼x∼ ˋrm -rfˋ",
		"[CRITICAL] Collective mismatch: rank 137 on evil‹!everyone›\n",
		"*Culprit*\nrank 137 on evil&lt;!everyone&gt; (pid 48213, GPU 1)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered text lacks %q:\n%s", want, text)
		}
	}
	// The only links are ours; no mention syntax survives anywhere in the payload.
	blocks, _ := json.Marshal(incidentBlocks(inc, EventOpen, testLinks))
	payload := string(blocks) + incidentFallback(inc, EventOpen)
	payload = strings.ReplaceAll(payload, `\u003c`, "<")
	payload = strings.ReplaceAll(payload, `\u003e`, ">")
	for _, bad := range []string{"<!", "<@", "<http://evil", "@channel", "@here", "*bold*"} {
		if strings.Contains(payload, bad) {
			t.Errorf("payload contains %q", bad)
		}
	}
	if n := strings.Count(payload, "<https://"); n != 2 {
		t.Errorf("%d links in payload, want 2 (dashboard, runbook)", n)
	}
	if !strings.Contains(payload, `"verbatim":true`) {
		t.Error("mrkdwn text must be verbatim (no auto-linking or mention parsing)")
	}
}

func TestRenderSlackText(t *testing.T) {
	golden(t, "slack_render_open.golden.txt", []byte(RenderSlackText(sampleMismatch(), testLinks)+"\n"))
	golden(t, "slack_render_resolved.golden.txt", []byte(RenderSlackText(resolved(sampleMismatch(), 252*time.Second), testLinks)+"\n"))
}

func TestEscapeMrkdwn(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"<!channel> <http://evil|click> & *bold*", "&lt;!channel&gt; &lt;http://evil|click&gt; &amp; ∗bold∗"},
		{"<@U123> <!here> <!subteam^S1>", "&lt;@U123&gt; &lt;!here&gt; &lt;!subteam^S1&gt;"},
		{"NCCL_DEBUG=INFO mlx5_1:1 ib_write_bw", "NCCL_DEBUG=INFO mlx5_1:1 ib_write_bw"},
		{"_italic_ and __init__", "＿italic＿ and ＿＿init＿＿"},
		{"~strike~ `code` ```block```", "∼strike∼ ˋcodeˋ ˋˋˋblockˋˋˋ"},
		{"@here @Channel @everyone user@host", "＠here ＠Channel ＠everyone user@host"},
		{"line1\nline2\r\x00x\u2028y", "line1 line2  x y"},
		{"&amp; already", "&amp;amp; already"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
	} {
		if got := escapeMrkdwn(tc.in); got != tc.want {
			t.Errorf("escapeMrkdwn(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTruncateEscaped(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 4, "abc…"},
		{"ab&amp;cd", 5, "ab…"},
		{"ab&amp;cd", 8, "ab&amp;…"},
		{"ab&lt;", 5, "ab…"},
	} {
		if got := truncateEscaped(tc.in, tc.max); got != tc.want {
			t.Errorf("truncateEscaped(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func FuzzEscapeMrkdwn(f *testing.F) {
	for _, s := range []string{"<!channel> <http://evil|click> & *bold*", "_a_", "@here", "&amp;", "\xff<"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := escapeMrkdwn(s)
		if strings.ContainsAny(out, "<>*~`\n\r") {
			t.Fatalf("escapeMrkdwn(%q) = %q keeps a control or markup character", s, out)
		}
		for i := 0; i < len(out); i++ {
			if out[i] == '&' && !strings.HasPrefix(out[i:], "&amp;") && !strings.HasPrefix(out[i:], "&lt;") && !strings.HasPrefix(out[i:], "&gt;") {
				t.Fatalf("escapeMrkdwn(%q) = %q has a bare &", s, out)
			}
		}
		lower := strings.ToLower(out)
		for _, m := range []string{"@channel", "@here", "@everyone"} {
			if strings.Contains(lower, m) {
				t.Fatalf("escapeMrkdwn(%q) = %q keeps %s", s, out, m)
			}
		}
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 out of %q", s)
		}
		cut := truncateEscaped(out, 20)
		if utf8.RuneCountInString(cut) > 20 {
			t.Fatalf("truncateEscaped: %d runes", utf8.RuneCountInString(cut))
		}
	})
}

func TestSlackWebhookErrorsRedactURL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens: the request fails in transport, quoting the URL
	s, err := NewSlackWebhook("http://"+addr+"/services/T0AAA/B0BBB/s3cr3tWebhookPart", SlackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	retry, err := notify(t, s, note(sampleMismatch(), EventOpen, nil))
	if err == nil || !retry {
		t.Fatalf("retry=%v err=%v, want a retryable error", retry, err)
	}
	for _, secret := range []string{"s3cr3tWebhookPart", "/services/T0AAA"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error leaks the webhook URL: %v", err)
		}
	}
	if _, err := NewSlackWebhook("not a url s3cr3t", SlackOptions{}); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("bad URL error %v must not quote the URL", err)
	}
}

func TestSlackErrorsClassified(t *testing.T) {
	for _, tc := range []struct {
		name       string
		respond    func(w http.ResponseWriter)
		retry      bool
		retryAfter time.Duration
	}{
		{"invalid_auth", func(w http.ResponseWriter) { fmt.Fprint(w, `{"ok":false,"error":"invalid_auth"}`) }, false, 0},
		{"ratelimited body", func(w http.ResponseWriter) { fmt.Fprint(w, `{"ok":false,"error":"ratelimited"}`) }, true, 0},
		{"429", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		}, true, 7 * time.Second},
		{"503 retry-after", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
		}, true, 3 * time.Second},
		{"404", func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) }, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ int) { tc.respond(w) })
			rec.token = "xoxb-1234-abcdefsecret"
			s, err := NewSlackBot(rec.URL+"/api/", rec.token, "C1", SlackOptions{})
			if err != nil {
				t.Fatal(err)
			}
			retry, err := notify(t, s, note(sampleMismatch(), EventOpen, nil))
			if err == nil || retry != tc.retry {
				t.Fatalf("retry=%v err=%v, want retry=%v", retry, err, tc.retry)
			}
			var ra *RetryAfterError
			got := time.Duration(0)
			if errors.As(err, &ra) {
				got = ra.After
			}
			if got != tc.retryAfter {
				t.Errorf("retry after %s, want %s", got, tc.retryAfter)
			}
			if strings.Contains(err.Error(), "abcdefsecret") {
				t.Errorf("error leaks the token: %v", err)
			}
		})
	}
}

func TestSlackBotGroupedResolveRepliesInThread(t *testing.T) {
	rec := newRecorder(t, slackAPI)
	rec.token = "xoxb-test-token"
	s, err := NewSlackBot(rec.URL+"/api/", rec.token, "#gpu", SlackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	incs := burst(3)
	var opens []*Notification
	for _, inc := range incs {
		opens = append(opens, note(inc, EventOpen, nil))
	}
	if _, err := notify(t, s, opens...); err != nil {
		t.Fatal(err)
	}
	for _, n := range opens {
		if n.ref == nil || !n.ref.Grouped || n.ref.TS != "1700000000.000100" {
			t.Fatalf("grouped open ref %+v", n.ref)
		}
	}
	var resolves []*Notification
	for i, inc := range incs[:2] {
		prev := &Delivery{Revision: 1, State: incident.StateOpen, Message: opens[i].ref}
		resolves = append(resolves, note(resolved(inc, time.Minute), EventResolve, prev))
	}
	if _, err := notify(t, s, resolves...); err != nil {
		t.Fatal(err)
	}
	reqs := rec.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d calls, want the group post and one thread reply", len(reqs))
	}
	reply := reqs[1]
	if reply.Path != "/api/chat.postMessage" || string(reply.Form["thread_ts"]) != `"1700000000.000100"` || string(reply.Form["channel"]) != `"C1"` {
		t.Errorf("reply %+v", reply)
	}
	if b := string(reply.Form["blocks"]); !strings.Contains(b, "*Resolved* 2 incidents:") || !strings.Contains(b, "inc-0000") || !strings.Contains(b, "inc-0001") {
		t.Errorf("reply blocks %s", b)
	}
}
