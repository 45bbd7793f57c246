package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// serve serves h on addr until ctx ends or the returned stop is called; it returns the
// address it listens on (addr with ":0" gets a free port). An address in use (another
// detector, another demo) falls back to a free port on the same host, said in the output.
func serve(ctx context.Context, addr string, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(addr)
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return "", nil, fmt.Errorf("demo: --http %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	return ln.Addr().String(), stop, nil
}

// writeTryNext says what to try while the demo runs.
func writeTryNext(w io.Writer, program, addr string, stay bool) {
	if program == "" {
		program = "watchdog"
	}
	url := "http://" + addr
	fmt.Fprintf(w, "The detector's API, /metrics and /healthz are served at %s. Try, in another terminal:\n", url)
	fmt.Fprintf(w, "  %s status --detector %s   # every job's ranks and incidents, live\n", program, url)
	fmt.Fprintf(w, "  curl -s %s/api/v1/incidents    # the incidents as JSON\n", url)
	fmt.Fprintf(w, "  curl -s %s/metrics | grep ^ncclwatch_    # what Prometheus would scrape\n", url)
	if !stay {
		fmt.Fprintln(w, "  (add --stay to keep them up after the summary)")
	}
	fmt.Fprintln(w)
}
