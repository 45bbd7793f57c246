package etcdconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// Explain dials every endpoint as the client does (TCP, then TLS where the endpoint or the
// configuration asks for it, then an HTTP/2 preface) and says, per endpoint, what fails:
// nothing listens, the server's certificate is not signed by the CA file or not for the
// endpoint's name, the server wants a client certificate or refuses it, TLS spoken to a
// plain port or plain text to a TLS one. nil: every endpoint answers as gRPC expects, so a
// failure is elsewhere (authentication, permissions, quorum).
func Explain(ctx context.Context, cfg Config) error {
	var errs []error
	for _, ep := range cfg.Endpoints {
		if err := CheckEndpoint(ctx, cfg, ep); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckEndpoint is Explain for one endpoint.
func CheckEndpoint(ctx context.Context, cfg Config, endpoint string) error {
	scheme, addr, err := splitEndpoint(endpoint)
	if err != nil {
		return err
	}
	useTLS := scheme == "https" || scheme == "unixs" || (scheme == "" && (cfg.CAFile != "" || cfg.CertFile != ""))
	network := "tcp"
	if strings.HasPrefix(scheme, "unix") {
		network = "unix"
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(dctx, network, addr)
	if err != nil {
		hint := ""
		if errors.Is(err, syscall.ECONNREFUSED) {
			hint = ": nothing listens there (is etcd running, is the port its client port?)"
		}
		return fmt.Errorf("etcd %s: cannot connect: %w%s", endpoint, err, hint)
	}
	defer raw.Close()
	deadline, _ := dctx.Deadline()
	_ = raw.SetDeadline(deadline)
	conn := raw
	if useTLS {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return fmt.Errorf("etcd %s: %w", endpoint, err)
		}
		host := addr
		if h, _, err := net.SplitHostPort(addr); err == nil {
			host = h
		}
		tc.ServerName, tc.NextProtos = host, []string{"h2"}
		t := tls.Client(raw, tc)
		if err := t.HandshakeContext(dctx); err != nil {
			return fmt.Errorf("etcd %s: %s", endpoint, tlsProblem(err, cfg, host))
		}
		conn = t
	}
	// gRPC speaks HTTP/2: a server that is one answers the client preface with a SETTINGS
	// frame. A TLS 1.3 server that refuses the client certificate says so here, after the
	// handshake.
	if _, err := conn.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		return fmt.Errorf("etcd %s: %s", endpoint, tlsProblem(err, cfg, ""))
	}
	head := make([]byte, 9)
	n, err := io.ReadFull(conn, head)
	head = head[:n]
	switch {
	case n == 9 && head[3] == 4:
		return nil // an HTTP/2 SETTINGS frame
	case !useTLS && len(head) >= 2 && head[0] == 0x15 && head[1] == 3,
		!useTLS && bytes.HasPrefix(head, []byte("HTTP/1")):
		return fmt.Errorf("etcd %s: the server speaks TLS, the endpoint says plain text: use https:// (with --etcd-ca-file for its CA)", endpoint)
	case !useTLS && n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return fmt.Errorf("etcd %s: the server closed a plain-text connection at once: it probably speaks TLS; use https:// (with --etcd-ca-file for its CA)", endpoint)
	case useTLS && err != nil && !isTimeout(err):
		return fmt.Errorf("etcd %s: %s", endpoint, tlsProblem(err, cfg, ""))
	case err != nil:
		return fmt.Errorf("etcd %s: connected, but no HTTP/2 answer (%v): is it etcd's client port?", endpoint, err)
	}
	return fmt.Errorf("etcd %s: connected, but the answer %q is not HTTP/2: is it etcd's client port?", endpoint, head)
}

// splitEndpoint splits an etcd endpoint (http://h:p, https://h:p, unix://path, h:p).
func splitEndpoint(ep string) (scheme, addr string, err error) {
	if !strings.Contains(ep, "://") {
		if rest, ok := strings.CutPrefix(ep, "unix:"); ok {
			return "unix", rest, nil
		}
		return "", ep, nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", "", fmt.Errorf("etcd endpoint %q: %w", ep, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Port() == "" {
			return "", "", fmt.Errorf("etcd endpoint %q: no port (etcd's client port is usually 2379)", ep)
		}
		return u.Scheme, u.Host, nil
	case "unix", "unixs":
		return u.Scheme, u.Host + u.Path, nil
	}
	return "", "", fmt.Errorf("etcd endpoint %q: scheme %q (want http, https, unix or unixs)", ep, u.Scheme)
}

// tlsProblem names a TLS failure: which check, which file, and what to do.
func tlsProblem(err error, cfg Config, host string) string {
	caSource := "the system's CAs (no --etcd-ca-file)"
	if cfg.CAFile != "" {
		caSource = "--etcd-ca-file " + cfg.CAFile
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	var alert tls.AlertError
	switch {
	case errors.As(err, &ua):
		issuer := "an unknown issuer"
		if ua.Cert != nil {
			issuer = fmt.Sprintf("%q", ua.Cert.Issuer.String())
		}
		return fmt.Sprintf("unknown CA: the server's certificate is signed by %s, which is not in %s: give the CA that signed etcd's --cert-file", issuer, caSource)
	case errors.As(err, &he):
		var names []string
		if he.Certificate != nil {
			names = append(names, he.Certificate.DNSNames...)
			for _, ip := range he.Certificate.IPAddresses {
				names = append(names, ip.String())
			}
		}
		return fmt.Sprintf("wrong server name: the server's certificate is for [%s], not %q (the endpoint's host): use an endpoint with one of those names, or reissue etcd's certificate with %q in its subject alternative names",
			strings.Join(names, " "), he.Host, he.Host)
	case errors.As(err, &ci):
		return fmt.Sprintf("the server's certificate is not valid: %v", ci)
	case errors.As(err, &rh):
		return "the server does not speak TLS, the endpoint or --etcd-ca-file asks for it: use http://" + host + " or enable TLS on etcd"
	case errors.As(err, &alert):
		return alertProblem(uint8(alert), err, cfg)
	}
	// Before Go's AlertError, and through net.OpError, alerts read "remote error: tls: ...".
	if msg := err.Error(); strings.Contains(msg, "remote error: tls: ") {
		for code, text := range map[uint8]string{116: "certificate required", 42: "bad certificate", 48: "unknown certificate authority",
			45: "expired certificate", 46: "unknown certificate", 40: "handshake failure"} {
			if strings.Contains(msg, "tls: "+text) {
				return alertProblem(code, err, cfg)
			}
		}
	}
	return fmt.Sprintf("TLS: %v", err)
}

// alertProblem explains a TLS alert the server sent.
func alertProblem(code uint8, err error, cfg Config) string {
	switch code {
	case 116, 40:
		if cfg.CertFile == "" {
			return "missing client certificate: etcd wants one (it runs with --client-cert-auth): give --etcd-cert-file and --etcd-key-file"
		}
		// Go's client sends no certificate that the server's list of CAs does not accept.
		return fmt.Sprintf("etcd refused the client certificate %s (%v): etcd wants one signed by a CA in its --trusted-ca-file, and this one is not", cfg.CertFile, err)
	case 42, 48, 46, 45:
		if cfg.CertFile == "" {
			return "missing client certificate: etcd wants one (it runs with --client-cert-auth): give --etcd-cert-file and --etcd-key-file"
		}
		return fmt.Sprintf("etcd refused the client certificate %s (%v): it must be signed by a CA in etcd's --trusted-ca-file, be valid now and allow client authentication", cfg.CertFile, err)
	}
	return fmt.Sprintf("TLS: %v", err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isUnreachable says whether err means etcd could not be reached (as opposed to refusing).
func isUnreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	if s, ok := status.FromError(errors.Unwrap(err)); ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded) {
		return true
	}
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded)
}

// explainEvery spaces the diagnoses of one failing connection (each dials every endpoint).
const explainEvery = 10 * time.Second

// monitor logs why c's connection fails, once per distinct cause, and when it works again,
// until c is closed.
func monitor(c *clientv3.Client, cfg Config, log *slog.Logger) {
	ctx := c.Ctx()
	conn := c.ActiveConnection()
	var cause string
	var explained time.Time
	failing := false
	for {
		state := conn.GetState()
		switch state {
		case connectivity.TransientFailure:
			failing = true
			if time.Since(explained) < explainEvery {
				break
			}
			explained = time.Now()
			err := Explain(ctx, cfg)
			if err == nil || ctx.Err() != nil || err.Error() == cause {
				break
			}
			cause = err.Error()
			log.Error("etcd connection fails", "endpoints", cfg.Endpoints, "cause", cause)
		case connectivity.Ready:
			if failing {
				log.Info("etcd connection established", "endpoints", cfg.Endpoints)
			}
			failing, cause, explained = false, "", time.Time{}
		}
		if !conn.WaitForStateChange(ctx, state) {
			return
		}
	}
}

// fileProblem names a TLS file that cannot be used, for errors at start.
func fileProblem(what, path string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("etcd %s %s: no such file", what, path)
	}
	return fmt.Errorf("etcd %s %s: %w", what, path, err)
}
