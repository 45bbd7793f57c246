package ras

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Source gives one RAS report; *Client is one.
type Source interface {
	Status(ctx context.Context) (*snapshot.RAS, error)
}

// DefaultMaxBackoff is the longest pause between polls while nothing listens.
const DefaultMaxBackoff = 30 * time.Second

// maxErrLen caps the error text put into a published report.
const maxErrLen = 240

// Poller asks a Source for a report every few seconds.
type Poller struct {
	Source Source
	Logger *slog.Logger // nil: discard
	// MaxBackoff caps the pause while nothing listens (the pause doubles from every);
	// DefaultMaxBackoff if zero.
	MaxBackoff time.Duration
	Now        func() time.Time // stamps error reports; nil means time.Now
}

// Run polls until ctx is done; call it in its own goroutine. One exchange never outlasts
// the Source's timeout, and cancelling ctx interrupts it. The sink runs on Run's goroutine
// and must not block for long. It receives:
//   - each report;
//   - a report with only T and Err set when an exchange fails for another reason than
//     nothing listening (a timeout, a garbled or truncated reply);
//   - nil once each time the service goes away (nothing listening: no NCCL process on
//     this node, or RAS disabled), so the previous report can be dropped.
func (p *Poller) Run(ctx context.Context, every time.Duration, sink func(*snapshot.RAS)) {
	if every <= 0 {
		every = 5 * time.Second
	}
	maxBackoff := p.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = DefaultMaxBackoff
	}
	maxBackoff = max(maxBackoff, every)
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := p.Now
	if now == nil {
		now = time.Now
	}

	var (
		delay     = every
		absent    bool   // the last exchange found nothing listening
		lastErr   string // text of the last failure logged, to log each kind once
		timer     = time.NewTimer(0)
		firstPass = true
	)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		rep, err := p.Source.Status(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			if absent || lastErr != "" {
				log.Info("ras: service answering", "nccl", rep.Version, "comms", len(rep.Comms))
			}
			absent, lastErr, delay = false, "", every
			sink(rep)
		case errors.Is(err, ErrNotListening):
			if !absent || firstPass {
				log.Debug("ras: nothing listening; backing off", "err", err)
				sink(nil)
				delay = every
			} else {
				delay = min(delay*2, maxBackoff)
			}
			absent, lastErr = true, ""
		default:
			msg := err.Error()
			if len(msg) > maxErrLen {
				msg = msg[:maxErrLen]
			}
			if msg != lastErr {
				log.Info("ras: status failed", "err", msg)
			}
			absent, lastErr, delay = false, msg, every
			sink(&snapshot.RAS{T: snapshot.MicrosOf(now()), Err: msg})
		}
		firstPass = false
		timer.Reset(delay)
	}
}
