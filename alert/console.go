package alert

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/ncclwatch/watchdog/incident"
)

// Console writes one readable line per incident state change (watchdog demo).
type Console struct {
	name string
	mu   sync.Mutex
	w    io.Writer
}

// NewConsole returns a console notifier named "console" writing to w.
func NewConsole(w io.Writer) *Console { return &Console{name: "console", w: w} }

// Name implements Notifier.
func (c *Console) Name() string { return c.name }

// Notify implements Notifier.
func (c *Console) Notify(_ context.Context, batch ...*Notification) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range batch {
		if _, err := io.WriteString(c.w, ConsoleLine(n.Incident, n.Event)+"\n"); err != nil {
			return false, fmt.Errorf("console: %w", err)
		}
		n.Delivered(nil)
	}
	return false, nil
}

// ConsoleLine formats a state change, e.g.
// "2025-01-02T03:04:05Z OPEN    critical mismatch inc-1 job=train culprit=rank 3 on n1 (pid 7): summary".
func ConsoleLine(inc incident.Incident, ev Event) string {
	var b strings.Builder
	t := eventTime(inc, ev)
	if !t.IsZero() {
		b.WriteString(t.UTC().Format(time.RFC3339) + " ")
	}
	fmt.Fprintf(&b, "%-7s %-8s %s %s job=%s", strings.ToUpper(string(ev)), inc.Severity, inc.Kind, inc.ID, inc.Job)
	if len(inc.Culprits) > 0 {
		b.WriteString(" culprit=" + culpritText(inc.Culprits[0]))
		if len(inc.Culprits) > 1 {
			fmt.Fprintf(&b, " (+%d)", len(inc.Culprits)-1)
		}
	}
	if inc.Victims > 0 {
		fmt.Fprintf(&b, " victims=%d", inc.Victims)
	}
	if ev == EventResolve && inc.ResolvedAt != nil && !inc.OpenedAt.IsZero() {
		b.WriteString(" after=" + fmtDuration(inc.ResolvedAt.Sub(inc.OpenedAt)))
	}
	if inc.Summary != "" {
		b.WriteString(": " + inc.Summary)
	}
	// A log line with a newline must not forge a second console line.
	return truncate(oneLine(b.String()), 2000)
}
