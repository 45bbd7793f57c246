package alert

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/ncclwatch/watchdog/incident"
)

// Slack refuses a whole message (invalid_blocks) for one bad block, and a refused page is
// a missed page. slack-go validates text objects (type, 1 to 3000 characters); the rules
// it leaves out are written here from Slack's Block Kit reference.
const (
	slackContextMaxElements = 10
	slackHeaderType         = slack.PlainTextType
)

// validateSlackMessage returns every rule a message breaks, as Slack's API would judge it.
func validateSlackMessage(text string, blocks []slack.Block) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if strings.TrimSpace(text) == "" {
		fail("empty fallback text: notifications and screen readers show nothing")
	}
	if n := utf8.RuneCountInString(text); n > slackFallbackMax {
		fail("fallback text of %d characters > %d", n, slackFallbackMax)
	}
	if len(blocks) == 0 || len(blocks) > slackMaxBlocks {
		fail("%d blocks, want 1 to %d", len(blocks), slackMaxBlocks)
	}
	textObject := func(where string, t *slack.TextBlockObject, max int) {
		if t == nil {
			fail("%s: no text object", where)
			return
		}
		if err := t.Validate(); err != nil {
			fail("%s: %w", where, err)
		}
		if n := utf8.RuneCountInString(t.Text); n > max {
			fail("%s: %d characters > %d", where, n, max)
		}
		if t.Type == slack.MarkdownType {
			if err := checkLinks(t.Text); err != nil {
				fail("%s: %w", where, err)
			}
		}
	}
	for i, b := range blocks {
		where := fmt.Sprintf("block %d (%s)", i, b.BlockType())
		switch b := b.(type) {
		case *slack.HeaderBlock:
			textObject(where, b.Text, slackHeaderMax)
			if b.Text != nil && b.Text.Type != slackHeaderType {
				fail("%s: header text must be %s, is %s", where, slackHeaderType, b.Text.Type)
			}
		case *slack.SectionBlock:
			if b.Text == nil && len(b.Fields) == 0 {
				fail("%s: neither text nor fields", where)
			}
			if b.Text != nil {
				textObject(where, b.Text, slackSectionMax)
			}
			if len(b.Fields) > slackMaxFields {
				fail("%s: %d fields > %d", where, len(b.Fields), slackMaxFields)
			}
			for j, f := range b.Fields {
				textObject(fmt.Sprintf("%s field %d", where, j), f, slackFieldMax)
			}
		case *slack.ContextBlock:
			els := b.ContextElements.Elements
			if len(els) == 0 || len(els) > slackContextMaxElements {
				fail("%s: %d elements, want 1 to %d", where, len(els), slackContextMaxElements)
			}
			for j, e := range els {
				t, ok := e.(*slack.TextBlockObject)
				if !ok {
					fail("%s element %d: %T, want a text object", where, j, e)
					continue
				}
				textObject(fmt.Sprintf("%s element %d", where, j), t, slackSectionMax)
			}
		case *slack.DividerBlock:
		default:
			fail("%s: a block type the renderer does not make", where)
		}
	}
	return errs
}

// checkLinks: untrusted text is escaped, so every '<' in mrkdwn is one of our links and
// must be closed; a link cut by truncation shows as raw markup.
func checkLinks(s string) error {
	for {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			if strings.IndexByte(s, '>') >= 0 {
				return errors.New("a '>' outside a link")
			}
			return nil
		}
		if strings.IndexByte(s[:i], '>') >= 0 {
			return errors.New("a '>' outside a link")
		}
		j := strings.IndexByte(s[i:], '>')
		if j < 0 {
			return fmt.Errorf("link %q is not closed", truncate(s[i:], 60))
		}
		s = s[i+j+1:]
	}
}

// sentMessage is one message as the recorder received it: webhook JSON or Web API form.
type sentMessage struct {
	path   string
	text   string
	blocks []slack.Block
}

func sentMessages(t *testing.T, rec *recorder) []sentMessage {
	t.Helper()
	var out []sentMessage
	for _, r := range rec.requests() {
		m := sentMessage{path: r.Path}
		var blocks slack.Blocks
		switch {
		case r.Form != nil:
			if err := json.Unmarshal(r.Form["text"], &m.text); err != nil {
				t.Fatalf("%s: text: %v", r.Path, err)
			}
			if err := json.Unmarshal(r.Form["blocks"], &blocks); err != nil {
				t.Fatalf("%s: blocks: %v", r.Path, err)
			}
		default:
			var msg slack.WebhookMessage
			if err := json.Unmarshal(r.Body, &msg); err != nil {
				t.Fatalf("%s: %v", r.Path, err)
			}
			m.text = msg.Text
			if msg.Blocks != nil {
				blocks = *msg.Blocks
			}
		}
		m.blocks = blocks.BlockSet
		out = append(out, m)
	}
	return out
}

// hostile is log text written to break a page: mentions, links, entities, markup,
// control characters.
const hostile = "<!channel> @channel @here <@U123> <http://evil|click> & &amp; &lt; > *bold* _it_ ~s~ `x` ```block``` \x00\x1b[31m\u2028end"

func noCulprit() incident.Incident {
	inc := sampleMismatch()
	inc.Culprits, inc.Ops, inc.Comm, inc.Seq, inc.Victims = nil, nil, "", 0, 0
	return inc
}

func hostileIncident() incident.Incident {
	inc := sampleMismatch()
	inc.Job, inc.Comm, inc.Summary = "job "+hostile, hostile, hostile
	inc.Culprits[0].Host = hostile
	inc.Evidence = []string{hostile, hostile + hostile}
	inc.Ops = map[string]incident.Op{hostile: {Op: hostile, Count: 1, Datatype: hostile, RedOp: hostile}}
	return inc
}

func hugeIncident() incident.Incident {
	inc := sampleMismatch()
	long := strings.Repeat("<&>*🔥", 1500)
	inc.Summary, inc.Job, inc.Comm = long, long, long
	inc.Culprits, inc.Ops, inc.Evidence = nil, map[string]incident.Op{}, nil
	for i := range 100 {
		inc.Culprits = append(inc.Culprits, incident.Culprit{Rank: i, Host: long})
		inc.Ops[fmt.Sprintf("rank %d %s", i, long)] = incident.Op{Op: long, Count: 1}
	}
	for range 1000 {
		inc.Evidence = append(inc.Evidence, long)
	}
	return inc
}

// bare is an incident with nothing but its identity: no summary, evidence, times.
func bare() incident.Incident {
	return incident.Incident{ID: "inc-1", Kind: incident.KindHang, State: incident.StateOpen, Severity: incident.SeverityWarning, Revision: 1}
}

func twoJobs() []incident.Incident {
	a, b := burst(2)[0], burst(2)[1]
	b.Job = "gpt-8b"
	return []incident.Incident{a, b}
}

// TestSlackMessagesValid sends every kind of message through a real HTTP round trip
// (webhook or Web API) and checks each one the way Slack's block validation would.
func TestSlackMessagesValid(t *testing.T) {
	noLinks := Links{}
	runbookOnly := Links{DefaultRunbook: "https://runbooks.example.com/nccl"}
	type step struct {
		incs []incident.Incident
		ev   Event
	}
	opens := func(incs ...incident.Incident) step { return step{incs, EventOpen} }
	for _, tc := range []struct {
		name  string
		bot   bool
		links Links
		steps []step
	}{
		{"single", false, testLinks, []step{opens(sampleMismatch())}},
		{"single no dashboard", false, runbookOnly, []step{opens(sampleMismatch())}},
		{"single no links", false, noLinks, []step{opens(sampleMismatch())}},
		{"no culprit", false, testLinks, []step{opens(noCulprit())}},
		{"bare incident no links", false, noLinks, []step{opens(bare())}},
		{"hostile log text", false, testLinks, []step{opens(hostileIncident())}},
		{"hostile log text grouped", false, noLinks, []step{opens(hostileIncident(), bare())}},
		{"huge", false, testLinks, []step{opens(hugeIncident())}},
		{"huge grouped", false, testLinks, []step{opens(hugeIncident(), hugeIncident())}},
		{"grouped one job", false, testLinks, []step{opens(burst(2)...)}},
		{"grouped one job no dashboard", false, noLinks, []step{opens(burst(2)...)}},
		{"grouped one job runbook only", false, runbookOnly, []step{opens(burst(2)...)}},
		{"grouped two jobs no dashboard", false, noLinks, []step{opens(twoJobs()...)}},
		{"grouped burst", false, testLinks, []step{opens(burst(500)...)}},
		{"resolved webhook", false, noLinks, []step{{[]incident.Incident{resolved(sampleMismatch(), time.Minute)}, EventResolve}}},
		{"resolved grouped webhook", false, noLinks, []step{{[]incident.Incident{resolved(bare(), time.Minute), resolved(noCulprit(), time.Minute)}, EventResolve}}},
		{"bot open, update, resolve", true, noLinks, []step{
			opens(sampleMismatch()),
			{[]incident.Incident{sampleMismatch()}, EventUpdate},
			{[]incident.Incident{resolved(sampleMismatch(), time.Minute)}, EventResolve},
		}},
		{"bot bare open, update, resolve", true, noLinks, []step{
			opens(bare()), {[]incident.Incident{bare()}, EventUpdate}, {[]incident.Incident{resolved(bare(), time.Second)}, EventResolve},
		}},
		{"bot grouped open, update, resolve", true, noLinks, []step{
			opens(burst(3)...), {burst(3), EventUpdate}, {[]incident.Incident{resolved(burst(3)[0], time.Minute), resolved(burst(3)[1], time.Minute)}, EventResolve},
		}},
		{"bot huge update", true, testLinks, []step{opens(hugeIncident()), {[]incident.Incident{hugeIncident()}, EventUpdate}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				rec *recorder
				s   *Slack
				err error
			)
			if tc.bot {
				rec = newRecorder(t, slackAPI)
				rec.token = "xoxb-test-token"
				s, err = NewSlackBot(rec.URL+"/api/", rec.token, "#gpu", SlackOptions{Links: tc.links})
			} else {
				rec = newRecorder(t, slackWebhook)
				s, err = NewSlackWebhook(rec.URL+"/hook", SlackOptions{Links: tc.links})
			}
			if err != nil {
				t.Fatal(err)
			}
			// What each incident was delivered as, so that updates and resolves find
			// the message (bot mode) as the dispatcher would hand it over.
			prev := map[string]*Delivery{}
			for _, st := range tc.steps {
				var ns []*Notification
				for _, inc := range st.incs {
					ns = append(ns, note(inc, st.ev, prev[inc.ID]))
				}
				if _, err := notify(t, s, ns...); err != nil {
					t.Fatal(err)
				}
				for _, n := range ns {
					if n.ref != nil {
						prev[n.Incident.ID] = &Delivery{Revision: n.Incident.Revision, State: n.Incident.State, Message: n.ref}
					}
				}
			}
			checkSlackValid(t, rec)
		})
	}
}

// checkSlackValid validates every message the recorder received.
func checkSlackValid(t *testing.T, rec *recorder) {
	t.Helper()
	msgs := sentMessages(t, rec)
	if len(msgs) == 0 {
		t.Fatal("nothing sent")
	}
	for i, m := range msgs {
		for _, err := range validateSlackMessage(m.text, m.blocks) {
			t.Errorf("message %d (%s): %v", i, m.path, err)
		}
	}
}

// TestValidateSlackMessage: the validator itself catches what Slack refuses.
func TestValidateSlackMessage(t *testing.T) {
	ok := section("fine")
	for _, tc := range []struct {
		name   string
		text   string
		blocks []slack.Block
	}{
		{"empty context", "x", []slack.Block{ok, slack.NewContextBlock("", mrkdwnText(""))}},
		{"no context elements", "x", []slack.Block{ok, slack.NewContextBlock("")}},
		{"11 context elements", "x", []slack.Block{ok, slack.NewContextBlock("", func() []slack.MixedElement {
			var els []slack.MixedElement
			for range 11 {
				els = append(els, mrkdwnText("a"))
			}
			return els
		}()...)}},
		{"long section", "x", []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, strings.Repeat("é", 3001), false, true), nil, nil)}},
		{"long header", "x", []slack.Block{slack.NewHeaderBlock(plainTextObject(strings.Repeat("h", 151)))}},
		{"mrkdwn header", "x", []slack.Block{slack.NewHeaderBlock(mrkdwnText("h"))}},
		{"empty section", "x", []slack.Block{slack.NewSectionBlock(nil, nil, nil)}},
		{"11 fields", "x", []slack.Block{slack.NewSectionBlock(nil, func() []*slack.TextBlockObject {
			var fs []*slack.TextBlockObject
			for range 11 {
				fs = append(fs, mrkdwnText("f"))
			}
			return fs
		}(), nil)}},
		{"51 blocks", "x", func() []slack.Block {
			var bs []slack.Block
			for range 51 {
				bs = append(bs, ok)
			}
			return bs
		}()},
		{"no blocks", "x", nil},
		{"no fallback", "", []slack.Block{ok}},
		{"cut link", "x", []slack.Block{section("see <https://grafana.example.com/d/x|Dash…")}},
	} {
		if errs := validateSlackMessage(tc.text, tc.blocks); len(errs) == 0 {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if errs := validateSlackMessage("x", []slack.Block{ok, slack.NewContextBlock("", mrkdwnText(slackLink("https://a.example/?a=1&b=2", "A")))}); len(errs) > 0 {
		t.Errorf("a valid message: %v", errs)
	}
}
