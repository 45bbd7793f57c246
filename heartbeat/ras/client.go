// Package ras is a client of NCCL's RAS service (NCCL 2.24+): it asks the local RAS port
// (default 127.0.0.1:28028) for a STATUS report and parses it into a snapshot.RAS. The
// report is NCCL's job-wide view: per communicator, the ranks that answered, the missing
// and dead ones, and how many collectives each rank launched.
//
// The package only reports. Counts that differ in one report are normal (ranks a step
// apart); deciding that a difference persists is the detector's job.
package ras

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// DefaultAddr is where NCCL's RAS service listens unless NCCL_RAS_ADDR says otherwise.
const DefaultAddr = "127.0.0.1:28028"

// DefaultTimeout bounds one STATUS exchange: NCCL's own collection waits up to 5 s per leg.
const DefaultTimeout = 10 * time.Second

// MaxReply is the default cap on the bytes read for one report. A JSON report costs about
// 600 bytes per (communicator, rank) pair: 4 MiB holds about 7000 pairs, e.g. a 1024-rank
// job with 6 communicators per rank. Larger jobs need Client.MaxBytes raised.
const MaxReply = 4 << 20

// maxLine caps one handshake reply line.
const maxLine = 4096

// Errors a caller tells apart with errors.Is.
var (
	// ErrNotListening: nothing accepts connections at the address. Normal on a node
	// without a running NCCL process, or when RAS is disabled.
	ErrNotListening = errors.New("ras: nothing listening")
	// ErrProtocol: the peer does not speak the RAS client protocol, or its report is
	// malformed or truncated.
	ErrProtocol = errors.New("ras: protocol error")
	// ErrTimeout: the exchange did not finish within the client's timeout.
	ErrTimeout = errors.New("ras: timeout")
)

// Dialer opens the TCP connection; *net.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Client asks one RAS service for STATUS reports. The zero value is ready to use.
type Client struct {
	Addr    string        // host:port; DefaultAddr if empty
	Timeout time.Duration // whole exchange; DefaultTimeout if zero
	Dialer  Dialer        // nil: a *net.Dialer
	// ServerTimeout, when positive, is sent as TIMEOUT (whole seconds, at least 1): how
	// long NCCL waits for other processes while it gathers the report. Keep it below
	// Timeout. Zero leaves NCCL's default (5 s per leg).
	ServerTimeout time.Duration
	// Text skips SET FORMAT json and asks for the text report.
	Text bool
	// Keep filters the per-rank counts of JSON reports (see Keep); nil keeps all.
	Keep Keep
	// MaxBytes caps one report; MaxReply if zero.
	MaxBytes int
	// Now stamps reports; nil means time.Now.
	Now func() time.Time
}

func (c *Client) addr() string {
	if c.Addr == "" {
		return DefaultAddr
	}
	return c.Addr
}

func (c *Client) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

// Status runs one STATUS exchange: handshake, optional TIMEOUT, SET FORMAT json (text when
// the server does not know it), STATUS, and reads the report to EOF. Errors wrap
// ErrNotListening, ErrProtocol or ErrTimeout where one applies, or ctx's error.
func (c *Client) Status(ctx context.Context) (*snapshot.RAS, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, ErrTimeout)
	defer cancel()

	addr := c.addr()
	var d Dialer = c.Dialer
	if d == nil {
		d = &net.Dialer{}
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, c.classify(ctx, addr, "connect", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// A cancelled ctx unblocks reads and writes at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	rep, err := c.exchange(conn)
	if err != nil {
		return nil, c.classify(ctx, addr, "status", err)
	}
	rep.T = snapshot.MicrosOf(c.now())
	return rep, nil
}

func (c *Client) exchange(conn net.Conn) (*snapshot.RAS, error) {
	br := bufio.NewReaderSize(conn, 16<<10)
	ask := func(cmd string) (string, error) {
		if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
			return "", fmt.Errorf("send %s: %w", cmd, err)
		}
		line, err := readLine(br)
		if err != nil {
			return "", fmt.Errorf("reply to %s: %w", cmd, err)
		}
		return line, nil
	}

	hello, err := ask("CLIENT PROTOCOL 2")
	if err != nil {
		return nil, err
	}
	if !hasPrefixFold(hello, "SERVER PROTOCOL ") {
		return nil, fmt.Errorf("%w: greeting %s", ErrProtocol, quote(hello))
	}
	if c.ServerTimeout > 0 {
		secs := max(int64(c.ServerTimeout/time.Second), 1)
		r, err := ask(fmt.Sprintf("TIMEOUT %d", secs))
		if err != nil {
			return nil, err
		}
		if !strings.EqualFold(r, "OK") {
			return nil, fmt.Errorf("%w: TIMEOUT answered %s", ErrProtocol, quote(r))
		}
	}
	useJSON := false
	if !c.Text {
		r, err := ask("SET FORMAT json")
		if err != nil {
			return nil, err
		}
		switch {
		case strings.EqualFold(r, "OK"):
			useJSON = true
		case hasPrefixFold(r, "ERROR"):
			// Before 2.28.7: "ERROR: Unknown command"; the connection stays usable.
		default:
			return nil, fmt.Errorf("%w: SET FORMAT answered %s", ErrProtocol, quote(r))
		}
	}
	if _, err := io.WriteString(conn, "STATUS\n"); err != nil {
		return nil, fmt.Errorf("send STATUS: %w", err)
	}
	limit := c.MaxBytes
	if limit <= 0 {
		limit = MaxReply
	}
	body, err := io.ReadAll(io.LimitReader(br, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read report (%d bytes so far): %w", len(body), err)
	}
	if len(body) > limit {
		return nil, fmt.Errorf("%w: report larger than %d bytes", ErrProtocol, limit)
	}
	if hasPrefixFold(string(body[:min(len(body), 6)]), "ERROR") {
		line, _, _ := strings.Cut(string(body[:min(len(body), 200)]), "\n")
		return nil, fmt.Errorf("%w: STATUS answered %s", ErrProtocol, quote(line))
	}
	var rep *snapshot.RAS
	if useJSON {
		rep, err = ParseJSONKeep(body, c.Keep)
	} else {
		rep, err = ParseText(body)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return rep, nil
}

// classify wraps err with the sentinel that says what went wrong.
func (c *Client) classify(ctx context.Context, addr, stage string, err error) error {
	switch {
	case errors.Is(err, ErrProtocol):
		return fmt.Errorf("ras %s %s: %w", stage, addr, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("ras %s %s: %w: %w", stage, addr, ErrNotListening, err)
	case errors.Is(context.Cause(ctx), ErrTimeout), errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("ras %s %s: %w: %w", stage, addr, ErrTimeout, err)
	case ctx.Err() != nil:
		return fmt.Errorf("ras %s %s: %w", stage, addr, context.Cause(ctx))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("ras %s %s: %w: %w", stage, addr, ErrTimeout, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, errLineTooLong):
		return fmt.Errorf("ras %s %s: %w: %w", stage, addr, ErrProtocol, err)
	}
	return fmt.Errorf("ras %s %s: %w", stage, addr, err)
}

var errLineTooLong = errors.New("reply line too long")

// readLine reads one '\n'-terminated line, without the terminator or a trailing '\r'.
func readLine(br *bufio.Reader) (string, error) {
	var sb strings.Builder
	for {
		frag, err := br.ReadSlice('\n')
		if sb.Len()+len(frag) > maxLine {
			return "", errLineTooLong
		}
		sb.Write(frag)
		switch {
		case err == nil:
			return strings.TrimRight(sb.String(), "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if sb.Len() == 0 {
				return "", io.EOF
			}
			return "", io.ErrUnexpectedEOF
		default:
			return "", err
		}
	}
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// quote renders untrusted reply text for an error message: escaped and cut short.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return fmt.Sprintf("%q", s)
}
