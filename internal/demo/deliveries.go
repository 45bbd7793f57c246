package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/ncclwatch/watchdog/alert"
)

// recorded is one of the demo's real notifiers (--slack-webhook, --slack-api-url,
// --pagerduty-url) with its deliveries counted: the demo's log is discarded, so without this
// a webhook that refuses every message would look like a demo that sent nothing.
type recorded struct {
	alert.Notifier
	story *storyWriter

	mu      sync.Mutex
	sent    int
	failed  int             // failed attempts
	pending map[string]bool // notifications attempted and not yet delivered
	lastErr string
}

func newRecorded(n alert.Notifier, story *storyWriter) *recorded {
	return &recorded{Notifier: n, story: story, pending: map[string]bool{}}
}

// Accepts keeps the wrapped notifier's choice of events (PagerDuty takes no updates).
func (r *recorded) Accepts(e alert.Event) bool {
	if f, ok := r.Notifier.(alert.EventFilter); ok {
		return f.Accepts(e)
	}
	return true
}

func (r *recorded) Notify(ctx context.Context, batch ...*alert.Notification) (bool, error) {
	retry, err := r.Notifier.Notify(ctx, batch...)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range batch {
		key := fmt.Sprintf("%s %s rev %d", n.Incident.ID, n.Event, n.Incident.Revision)
		if err == nil {
			delete(r.pending, key)
			r.sent++
			continue
		}
		r.pending[key] = true
		r.failed++
	}
	if err != nil {
		r.lastErr = err.Error()
		next := "will retry"
		if !retry {
			next = "given up"
		}
		r.story.printf("! delivery to %s failed (%s): %v", r.Name(), next, err)
	}
	return retry, err
}

// delivery is what one real notifier did during the demo.
type delivery struct {
	name                      string
	sent, failed, undelivered int
	lastErr                   string
}

func (r *recorded) report() delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return delivery{name: r.Name(), sent: r.sent, failed: r.failed, undelivered: len(r.pending), lastErr: r.lastErr}
}

// writeDeliveries prints each real notifier's deliveries and returns an error naming those
// that failed to deliver something.
func writeDeliveries(w io.Writer, recs []*recorded) error {
	if len(recs) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nDeliveries")
	var failed []string
	ds := make([]delivery, 0, len(recs))
	for _, r := range recs {
		ds = append(ds, r.report())
	}
	sort.Slice(ds, func(a, b int) bool { return ds[a].name < ds[b].name })
	for _, d := range ds {
		line := fmt.Sprintf("  %-16s %d delivered, %d failed attempt(s)", d.name, d.sent, d.failed)
		if d.undelivered > 0 {
			line += fmt.Sprintf(", %d never delivered", d.undelivered)
			failed = append(failed, fmt.Sprintf("%s (%d never delivered: %s)", d.name, d.undelivered, d.lastErr))
		}
		if d.lastErr != "" {
			line += "; last error: " + d.lastErr
		}
		fmt.Fprintln(w, line)
	}
	if len(failed) > 0 {
		return fmt.Errorf("deliveries failed: %s", strings.Join(failed, "; "))
	}
	return nil
}
