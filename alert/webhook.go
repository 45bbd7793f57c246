package alert

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Headers of the generic webhook.
const (
	// WebhookEventHeader says open, update or resolve.
	WebhookEventHeader = "X-Ncclwatch-Event"
	// WebhookSignatureHeader is "sha256=" + hex(HMAC-SHA256(secret, body)), when a
	// secret is configured.
	WebhookSignatureHeader = "X-Ncclwatch-Signature-256"
)

// Webhook POSTs each incident state change as the incident's JSON.
type Webhook struct {
	name   string
	url    string
	secret []byte
	http   *http.Client
	redact redactor
}

// WebhookOptions configure a Webhook notifier.
type WebhookOptions struct {
	// Name identifies the notifier in delivery state and metrics; default "webhook".
	Name string
	// Secret, when set, signs each body (WebhookSignatureHeader).
	Secret     []byte
	HTTPClient *http.Client
}

// NewWebhook returns a generic JSON webhook notifier.
func NewWebhook(endpoint string, o WebhookOptions) (*Webhook, error) {
	if err := checkURL(endpoint); err != nil {
		return nil, fmt.Errorf("webhook URL: %w", err)
	}
	if o.Name == "" {
		o.Name = "webhook"
	}
	return &Webhook{
		name:   o.Name,
		url:    endpoint,
		secret: o.Secret,
		http:   httpClient(o.HTTPClient),
		redact: newRedactor(endpoint, string(o.Secret)),
	}, nil
}

// Name implements Notifier.
func (w *Webhook) Name() string { return w.name }

// Notify implements Notifier.
func (w *Webhook) Notify(ctx context.Context, batch ...*Notification) (bool, error) {
	for _, n := range batch {
		body, err := json.Marshal(n.Incident)
		if err != nil {
			return false, fmt.Errorf("webhook: encode incident %s: %w", n.Incident.ID, err)
		}
		if retry, err := w.post(ctx, body, n.Event); err != nil {
			return retry, fmt.Errorf("webhook %s %s: %w", n.Event, n.Incident.ID, err)
		}
		n.Delivered(nil)
	}
	return false, nil
}

func (w *Webhook) post(ctx context.Context, body []byte, ev Event) (bool, error) {
	ctx, resp := withResponse(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return false, w.redact.Error(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ncclwatch-alert")
	req.Header.Set(WebhookEventHeader, string(ev))
	if len(w.secret) > 0 {
		req.Header.Set(WebhookSignatureHeader, Sign(w.secret, body))
	}
	r, err := w.http.Do(req)
	if err != nil {
		retry, err := classify(err, resp)
		return retry, w.redact.Error(err)
	}
	defer r.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<10))
	if r.StatusCode/100 != 2 {
		retry, err := classify(fmt.Errorf("HTTP %s", r.Status), resp)
		return retry, w.redact.Error(err)
	}
	return false, nil
}

// Sign returns the webhook signature of body: "sha256=" + hex HMAC-SHA256.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
