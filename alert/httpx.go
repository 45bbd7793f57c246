package alert

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// defaultRequestTimeout bounds one HTTP request to a notification endpoint.
const defaultRequestTimeout = 10 * time.Second

// maxRetryAfter caps a server's Retry-After, so a bogus value cannot mute a notifier.
const maxRetryAfter = 15 * time.Minute

// response is what the transport saw of the last response to a request made with a
// context from withResponse: client libraries drop the Retry-After header.
type response struct {
	status     int
	retryAfter time.Duration
}

type responseKey struct{}

func withResponse(ctx context.Context) (context.Context, *response) {
	r := &response{}
	return context.WithValue(ctx, responseKey{}, r), r
}

// recordingTransport notes each response's status and Retry-After into the request
// context's *response.
type recordingTransport struct{ base http.RoundTripper }

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if r, ok := req.Context().Value(responseKey{}).(*response); ok && resp != nil {
		r.status = resp.StatusCode
		r.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return resp, err
}

// httpClient returns a client with a request timeout whose transport records responses.
func httpClient(c *http.Client) *http.Client {
	out := &http.Client{Timeout: defaultRequestTimeout}
	if c != nil {
		cp := *c
		out = &cp
		if out.Timeout == 0 {
			out.Timeout = defaultRequestTimeout
		}
	}
	base := out.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	if _, ok := base.(recordingTransport); !ok {
		out.Transport = recordingTransport{base: base}
	}
	return out
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// retryableStatus says whether an HTTP status is worth another attempt.
func retryableStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= 500
}

// retryableTransportError is true for errors that never reached a definitive answer:
// timeouts, refused or reset connections.
func retryableTransportError(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded)
}

// classify turns a failed attempt into the notifier's (retry, err) answer: retryable
// statuses and transport errors retry, honouring Retry-After.
func classify(err error, resp *response) (bool, error) {
	if resp != nil && resp.status != 0 && resp.status < 300 {
		// The server accepted; what failed is reading its answer. Retrying could duplicate.
		return false, err
	}
	// No status at all: the request never got an answer (refused, reset, timed out).
	retry := retryableTransportError(err) || resp == nil || resp.status == 0 || retryableStatus(resp.status)
	if retry && resp != nil && resp.retryAfter > 0 {
		return true, &RetryAfterError{After: resp.retryAfter, Err: err}
	}
	return retry, err
}
