// Package etcdexec runs a real etcd server binary as a child process for tests: Debian's
// etcd-server 3.4 (what many clusters still run, and whose auth differs from the embedded
// 3.7 server's), installed by `make test` (deploy/tools/install-etcd.sh). A test that
// needs it is skipped with a clear message where the binary is missing, unless
// NCCLWATCH_REQUIRE_ETCD34=1 (set by the Makefile) makes that a failure.
package etcdexec

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options configure a server.
type Options struct {
	// Bin is the etcd binary (default $NCCLWATCH_ETCD34_BIN, else /usr/bin/etcd).
	Bin string
	// CertFile and KeyFile serve TLS; ClientCAFile, when set, requires client
	// certificates signed by it (--client-cert-auth).
	CertFile, KeyFile, ClientCAFile string
	// BcryptCost of the users' password hashes (0: etcd's default, 10); tests of password
	// auth use 4, at which a busy machine checks a password in milliseconds, not seconds.
	BcryptCost int
}

// Server is a running etcd process.
type Server struct {
	t       testing.TB
	bin     string
	args    []string
	client  string
	version string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	stderr *bytes.Buffer
}

// versionLine matches `etcd --version`'s first line.
var versionLine = regexp.MustCompile(`etcd Version: (\d+\.\d+\.\d+)`)

// Start starts an etcd 3.4 server on free loopback ports and a fresh data directory, and
// waits until it serves clients; it is stopped when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := opts.Bin
	if bin == "" {
		bin = os.Getenv("NCCLWATCH_ETCD34_BIN")
	}
	if bin == "" {
		bin = "/usr/bin/etcd"
	}
	out, err := exec.Command(bin, "--version").Output()
	m := versionLine.FindSubmatch(out)
	if err != nil || m == nil || !bytes.HasPrefix(m[1], []byte("3.4.")) {
		msg := fmt.Sprintf("no etcd 3.4 server at %s (%v, %q): `make test` installs Debian's etcd-server (deploy/tools/install-etcd.sh), or set NCCLWATCH_ETCD34_BIN", bin, err, bytes.TrimSpace(out))
		if os.Getenv("NCCLWATCH_REQUIRE_ETCD34") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	clientPort, peerPort := freePort(t), freePort(t)
	scheme := "http"
	if opts.CertFile != "" {
		scheme = "https"
	}
	s := &Server{t: t, bin: bin, version: string(m[1]),
		client: fmt.Sprintf("%s://127.0.0.1:%d", scheme, clientPort)}
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	s.args = []string{"--name", "ncclwatch-test", "--data-dir", t.TempDir(),
		"--listen-client-urls", s.client, "--advertise-client-urls", s.client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "ncclwatch-test=" + peer, "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"}
	if opts.CertFile != "" {
		s.args = append(s.args, "--cert-file", opts.CertFile, "--key-file", opts.KeyFile)
	}
	if opts.BcryptCost > 0 {
		s.args = append(s.args, "--bcrypt-cost", fmt.Sprint(opts.BcryptCost))
	}
	if opts.ClientCAFile != "" {
		s.args = append(s.args, "--client-cert-auth", "--trusted-ca-file", opts.ClientCAFile)
	}
	s.Resume()
	t.Cleanup(s.Stop)
	return s
}

// Version is the server's version (3.4.x).
func (s *Server) Version() string { return s.version }

// Endpoints returns the client URL.
func (s *Server) Endpoints() []string { return []string{s.client} }

// Stop stops the server (SIGTERM, then SIGKILL after 10 s), keeping its data directory
// and ports for Resume: a full restart of etcd, as an upgrade or a crash does.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Resume starts the server (again) and waits until its client port accepts connections
// and it answers /health.
func (s *Server) Resume() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatal("etcd is running")
	}
	cmd := exec.Command(s.bin, s.args...)
	s.stderr = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.bin, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host := s.client[len("http://"):]
	if s.client[4] == 's' {
		host = s.client[len("https://"):]
	}
	for {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-s.done:
			s.t.Fatalf("etcd %s exited at start: %s", s.version, s.stderr.String())
		case <-ctx.Done():
			s.t.Fatalf("etcd %s did not listen on %s within 30 s: %s", s.version, host, s.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
