package alert

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/slack-go/slack"

	"github.com/ncclwatch/watchdog/incident"
)

// Slack posts incidents to a channel, through an incoming webhook (post only) or a bot
// token (post, then edit the original message on resolve and thread updates under it).
type Slack struct {
	name          string
	links         Links
	webhookURL    string
	api           *slack.Client
	channel       string
	threadUpdates bool
	http          *http.Client
	redact        redactor
}

// SlackOptions configure a Slack notifier.
type SlackOptions struct {
	// Name identifies the notifier in delivery state and metrics; default "slack".
	Name  string
	Links Links
	// HTTPClient is used for all requests (a timeout and Retry-After recording are added).
	HTTPClient *http.Client
	// NoThreadUpdates stops replies in the thread for revisions of an open incident.
	NoThreadUpdates bool
}

// NewSlackWebhook returns a notifier that posts through an incoming webhook. Webhook
// messages cannot be edited: a resolve is a new message.
func NewSlackWebhook(webhookURL string, o SlackOptions) (*Slack, error) {
	if err := checkURL(webhookURL); err != nil {
		return nil, fmt.Errorf("slack webhook URL: %w", err) // checkURL never quotes the URL
	}
	s := newSlack(o)
	s.webhookURL = webhookURL
	s.redact = newRedactor(webhookURL)
	return s, nil
}

// NewSlackBot returns a notifier that posts with a bot token (chat:write) to channel.
// apiURL is the Web API base, "" for https://slack.com/api/ (tests point it elsewhere).
func NewSlackBot(apiURL, token, channel string, o SlackOptions) (*Slack, error) {
	if token == "" {
		return nil, errors.New("slack: empty bot token")
	}
	if channel == "" {
		return nil, errors.New("slack: a bot token needs a channel")
	}
	if apiURL == "" {
		apiURL = slack.APIURL
	}
	if err := checkURL(apiURL); err != nil {
		return nil, fmt.Errorf("slack API URL: %w", err)
	}
	if !strings.HasSuffix(apiURL, "/") {
		apiURL += "/"
	}
	s := newSlack(o)
	s.channel = channel
	s.api = slack.New(token, slack.OptionAPIURL(apiURL), slack.OptionHTTPClient(s.http))
	s.redact = newRedactor(token)
	return s, nil
}

func newSlack(o SlackOptions) *Slack {
	if o.Name == "" {
		o.Name = "slack"
	}
	return &Slack{name: o.Name, links: o.Links, threadUpdates: !o.NoThreadUpdates, http: httpClient(o.HTTPClient)}
}

// checkURL validates an endpoint without ever putting it in the error (it may be secret).
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an absolute http(s) URL")
	}
	return nil
}

// Name implements Notifier.
func (s *Slack) Name() string { return s.name }

// Accepts implements EventFilter: updates need a thread, which only the bot mode has.
func (s *Slack) Accepts(ev Event) bool {
	return ev != EventUpdate || (s.api != nil && s.threadUpdates)
}

// Notify implements Notifier: a burst of new incidents is one message listing them.
func (s *Slack) Notify(ctx context.Context, batch ...*Notification) (bool, error) {
	var opens, updates, resolves []*Notification
	for _, n := range batch {
		switch n.Event {
		case EventOpen:
			opens = append(opens, n)
		case EventUpdate:
			updates = append(updates, n)
		case EventResolve:
			resolves = append(resolves, n)
		}
	}
	if len(opens) > 0 {
		if retry, err := s.postNew(ctx, opens, EventOpen); err != nil {
			return retry, err
		}
	}
	if len(resolves) > 0 {
		if retry, err := s.resolve(ctx, resolves); err != nil {
			return retry, err
		}
	}
	if len(updates) > 0 {
		if retry, err := s.reply(ctx, updates, EventUpdate); err != nil {
			return retry, err
		}
	}
	return false, nil
}

// postNew posts one message for ns: the full incident, or a list when there are several.
func (s *Slack) postNew(ctx context.Context, ns []*Notification, ev Event) (bool, error) {
	incs := incidentsOf(ns)
	blocks, text := groupBlocks(incs, ev, s.links), groupFallback(incs, ev)
	if len(ns) == 1 {
		blocks, text = incidentBlocks(incs[0], ev, s.links), incidentFallback(incs[0], ev)
	}
	ref, retry, err := s.post(ctx, blocks, text, "")
	if err != nil {
		return retry, err
	}
	for _, n := range ns {
		if ref == nil || ev != EventOpen {
			n.Delivered(nil)
			continue
		}
		r := *ref
		r.Grouped = len(ns) > 1
		n.Delivered(&r)
	}
	return false, nil
}

// resolve rewrites each incident's own message as resolved and says so in its thread;
// incidents listed in a shared message get a reply in its thread; incidents without a
// message to edit (webhook mode) get a new one.
func (s *Slack) resolve(ctx context.Context, ns []*Notification) (bool, error) {
	var loose, threaded []*Notification
	for _, n := range ns {
		ref := previousMessage(n)
		switch {
		case s.api == nil || ref == nil:
			loose = append(loose, n)
		case ref.Grouped:
			threaded = append(threaded, n)
		default:
			edited, retry, err := s.update(ctx, *ref, incidentBlocks(n.Incident, EventResolve, s.links), incidentFallback(n.Incident, EventResolve))
			if err != nil {
				return retry, err
			}
			if !edited {
				loose = append(loose, n)
				continue
			}
			one := []incident.Incident{n.Incident}
			if _, retry, err := s.postTo(ctx, ref.Channel, threadBlocks(one, EventResolve), threadFallback(one, EventResolve), ref.TS); err != nil {
				return retry, err
			}
			n.Delivered(nil)
		}
	}
	if len(threaded) > 0 {
		if retry, err := s.reply(ctx, threaded, EventResolve); err != nil {
			return retry, err
		}
	}
	if len(loose) > 0 {
		return s.postNew(ctx, loose, EventResolve)
	}
	return false, nil
}

// reply posts one message per thread listing the notifications of that thread.
func (s *Slack) reply(ctx context.Context, ns []*Notification, ev Event) (bool, error) {
	threads := map[MessageRef][]*Notification{}
	for _, n := range ns {
		ref := previousMessage(n)
		if ref == nil {
			n.Delivered(nil) // nothing to reply to; the original went out another way
			continue
		}
		key := MessageRef{Channel: ref.Channel, TS: ref.TS}
		threads[key] = append(threads[key], n)
	}
	keys := make([]MessageRef, 0, len(threads))
	for k := range threads {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].TS < keys[j].TS })
	for _, k := range keys {
		incs := incidentsOf(threads[k])
		if _, retry, err := s.postTo(ctx, k.Channel, threadBlocks(incs, ev), threadFallback(incs, ev), k.TS); err != nil {
			return retry, err
		}
		for _, n := range threads[k] {
			n.Delivered(nil)
		}
	}
	return false, nil
}

func (s *Slack) post(ctx context.Context, blocks []slack.Block, text, threadTS string) (*MessageRef, bool, error) {
	return s.postTo(ctx, s.channel, blocks, text, threadTS)
}

func (s *Slack) postTo(ctx context.Context, channel string, blocks []slack.Block, text, threadTS string) (*MessageRef, bool, error) {
	ctx, resp := withResponse(ctx)
	if s.api == nil {
		no := false
		msg := &slack.WebhookMessage{
			Text:        text,
			Blocks:      &slack.Blocks{BlockSet: blocks},
			UnfurlLinks: &no,
			UnfurlMedia: &no,
		}
		if err := slack.PostWebhookCustomHTTPContext(ctx, s.webhookURL, s.http, msg); err != nil {
			retry, err := s.classify(err, resp)
			return nil, retry, fmt.Errorf("slack webhook: %w", err)
		}
		return nil, false, nil
	}
	opts := []slack.MsgOption{
		slack.MsgOptionText(text, false), // escaped by us
		slack.MsgOptionBlocks(blocks...),
		slack.MsgOptionDisableLinkUnfurl(),
		slack.MsgOptionDisableMediaUnfurl(),
	}
	if threadTS != "" {
		opts = append(opts, slack.MsgOptionTS(threadTS))
	}
	ch, ts, err := s.api.PostMessageContext(ctx, channel, opts...)
	if err != nil {
		retry, err := s.classify(err, resp)
		return nil, retry, fmt.Errorf("slack chat.postMessage: %w", err)
	}
	return &MessageRef{Channel: ch, TS: ts}, false, nil
}

// update rewrites a posted message. edited is false when the message is gone or can no
// longer be edited: the caller posts a new one instead.
func (s *Slack) update(ctx context.Context, ref MessageRef, blocks []slack.Block, text string) (edited, retry bool, err error) {
	ctx, resp := withResponse(ctx)
	_, _, _, err = s.api.UpdateMessageContext(ctx, ref.Channel, ref.TS,
		slack.MsgOptionText(text, false), slack.MsgOptionBlocks(blocks...))
	if err == nil {
		return true, false, nil
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		switch se.Err {
		case "message_not_found", "cant_update_message", "edit_window_closed", "channel_not_found", "is_archived":
			return false, false, nil
		}
	}
	retry, err = s.classify(err, resp)
	return false, retry, fmt.Errorf("slack chat.update: %w", err)
}

// slackRetryableErrors are Web API errors (HTTP 200, ok=false) worth another attempt.
var slackRetryableErrors = map[string]bool{
	"ratelimited": true, "internal_error": true, "fatal_error": true,
	"service_unavailable": true, "request_timeout": true,
}

// classify decides whether a Slack failure is worth a retry and removes secrets from it.
func (s *Slack) classify(err error, resp *response) (bool, error) {
	var rl *slack.RateLimitedError
	var se slack.SlackErrorResponse
	var sc slack.StatusCodeError
	retry := false
	switch {
	case errors.As(err, &rl):
		return true, s.redact.Error(&RetryAfterError{After: min(rl.RetryAfter, maxRetryAfter), Err: err})
	case errors.As(err, &se):
		retry = slackRetryableErrors[se.Err]
	case errors.As(err, &sc):
		retry = sc.Retryable()
	default:
		retry, err = classify(err, resp)
		return retry, s.redact.Error(err)
	}
	if retry && resp.retryAfter > 0 {
		err = &RetryAfterError{After: resp.retryAfter, Err: err}
	}
	return retry, s.redact.Error(err)
}

func previousMessage(n *Notification) *MessageRef {
	if n.Previous == nil || n.Previous.Message == nil || n.Previous.Message.TS == "" {
		return nil
	}
	return n.Previous.Message
}

func incidentsOf(ns []*Notification) []incident.Incident {
	out := make([]incident.Incident, len(ns))
	for i, n := range ns {
		out[i] = n.Incident
	}
	return out
}
