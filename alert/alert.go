// Package alert delivers incident state changes to people and systems: Slack, PagerDuty,
// a generic JSON webhook, Prometheus Alertmanager and the console.
//
// One Dispatcher routes each submitted incident (by severity, kind and job) to notifiers.
// Every notifier has its own worker and bounded queue, so a slow or failing endpoint never
// delays detection or another notifier. A worker coalesces revisions of one incident, groups
// a burst into one batch, rate limits, and retries with backoff (honouring Retry-After).
// What each notifier has delivered lives in a Store (etcd in production), so a restart or a
// leader failover neither pages twice nor misses a resolve.
package alert

import (
	"context"
	"fmt"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// Event is the state change a notification announces.
type Event string

const (
	// EventOpen is the first delivery of an incident (or of a reopened one).
	EventOpen Event = "open"
	// EventUpdate is a later revision of an incident that is still open.
	EventUpdate Event = "update"
	// EventResolve says the incident cleared.
	EventResolve Event = "resolve"
)

// Notifier delivers notifications to one destination.
//
// Notify gets a batch (a burst grouped by the dispatcher). A notifier that sends item by
// item calls Notification.Delivered after each success, so that a failure part way through
// retries only what was not delivered; when Notify returns a nil error every item counts as
// delivered. retry says whether the failure is worth another attempt (HTTP 429, 5xx, a
// network error); wrap the error in a RetryAfterError to ask for a specific wait.
type Notifier interface {
	Name() string
	Notify(ctx context.Context, batch ...*Notification) (retry bool, err error)
}

// EventFilter is implemented by notifiers that want only some events. Events a notifier
// does not accept are recorded as seen without calling Notify (PagerDuty takes no updates).
type EventFilter interface {
	Accepts(Event) bool
}

// Notification is one state change of one incident, as one notifier should deliver it.
type Notification struct {
	Incident incident.Incident
	Event    Event
	// Previous is what this notifier delivered for the incident before (nil: nothing).
	// Slack finds its original message here.
	Previous *Delivery

	delivered bool
	ref       *MessageRef
	ack       func(*Notification)
}

// Delivered records that n reached its destination. ref says where the message lives when
// it can be edited or threaded later (Slack channel and ts); nil keeps the previous one.
// Call it from the goroutine running Notify, before Notify returns.
func (n *Notification) Delivered(ref *MessageRef) {
	if n.delivered {
		return
	}
	n.delivered, n.ref = true, ref
	if n.ack != nil {
		n.ack(n)
	}
}

// MessageRef locates a posted message that later notifications edit or reply to.
type MessageRef struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
	// Grouped is true when the message lists several incidents: a resolve then replies in
	// its thread instead of rewriting it.
	Grouped bool `json:"grouped,omitempty"`
}

// RetryAfterError asks the dispatcher to wait at least After before the next attempt and
// to send nothing else to that notifier meanwhile (Slack and PagerDuty rate limits).
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.After)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// eventTime is when the change a notification announces happened.
func eventTime(inc incident.Incident, ev Event) time.Time {
	switch {
	case ev == EventResolve && inc.ResolvedAt != nil:
		return *inc.ResolvedAt
	case ev == EventUpdate && !inc.LastSeen.IsZero():
		return inc.LastSeen
	default:
		return inc.OpenedAt
	}
}
