package alert

import (
	"errors"
	"net/url"
	"strings"
)

// redactor removes secrets (webhook URLs, tokens, routing keys) from error text. Client
// libraries quote the request URL in transport errors, and a Slack webhook URL is a secret.
type redactor struct{ secrets []string }

const redacted = "[REDACTED]"

func newRedactor(secrets ...string) redactor {
	var r redactor
	seen := map[string]bool{}
	add := func(s string) {
		if len(s) >= 4 && !seen[s] {
			seen[s] = true
			r.secrets = append(r.secrets, s)
		}
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		add(s)
		add(url.QueryEscape(s))
		add(url.PathEscape(s))
		if u, err := url.Parse(s); err == nil && u.Host != "" {
			// The path of a webhook URL (T…/B…/secret) is the secret part.
			if len(u.Path) > 1 {
				add(u.Path)
				add(u.EscapedPath())
			}
			if u.RawQuery != "" {
				add(u.RawQuery)
			}
		}
	}
	// Longest first, so a URL is replaced whole before its path.
	for i := 1; i < len(r.secrets); i++ {
		for j := i; j > 0 && len(r.secrets[j]) > len(r.secrets[j-1]); j-- {
			r.secrets[j], r.secrets[j-1] = r.secrets[j-1], r.secrets[j]
		}
	}
	return r
}

func (r redactor) String(s string) string {
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, redacted)
	}
	return s
}

// Error returns an error with the same text minus secrets. It deliberately does not wrap
// err: anything that unwrapped it could print the secret again.
func (r redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	return redactedError{msg: r.String(err.Error()), retryAfter: retryAfterOf(err)}
}

type redactedError struct {
	msg        string
	retryAfter *RetryAfterError
}

func (e redactedError) Error() string { return e.msg }

func retryAfterOf(err error) *RetryAfterError {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return &RetryAfterError{After: ra.After, Err: errors.New("rate limited")}
	}
	return nil
}

// As lets errors.As still find the RetryAfterError of a redacted error.
func (e redactedError) As(target any) bool {
	if p, ok := target.(**RetryAfterError); ok && e.retryAfter != nil {
		*p = e.retryAfter
		return true
	}
	return false
}
