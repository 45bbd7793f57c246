package etcdconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// authenticateMethod is the one RPC that must go without a token: etcd 3.4 checks a token
// sent with it, and refuses one that a restart invalidated, so a client that sends its
// stale token to fetch a new one never recovers (etcd's own client does that).
const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

// tokenAuth keeps an etcd password-auth token in place of etcd's client. It fetches the
// token on first use, not at dial (so an unreachable etcd at start is no error), sends it
// with every RPC but Authenticate, and fetches a new one once when etcd says the token is
// invalid (a restart, a token TTL) before retrying the RPC.
type tokenAuth struct {
	user, passwordFile string
	log                *slog.Logger
	authenticate       func(ctx context.Context, user, password string) (string, error)

	mu       sync.Mutex    // guards the fields below
	inflight chan struct{} // closed when the fetch under way ends (nil: none)
	tok      string
	disabled bool      // etcd said auth is not enabled: send no token
	failAt   time.Time // last failed fetch, so a wrong password is not retried in a busy loop
	failErr  error
	logged   string // the last problem logged, so each is logged once
}

// authRetryAfter spaces fetches after a refusal (a wrong password, a user that does not exist).
const authRetryAfter = time.Second

func newTokenAuth(user, passwordFile string, log *slog.Logger) *tokenAuth {
	return &tokenAuth{user: user, passwordFile: passwordFile, log: log}
}

// bind makes the token fetches go through c (its Authenticate RPC carries no token).
func (a *tokenAuth) bind(c *clientv3.Client) {
	a.authenticate = func(ctx context.Context, user, password string) (string, error) {
		resp, err := c.Auth.Authenticate(ctx, user, password)
		if err != nil {
			return "", err
		}
		return resp.Token, nil
	}
}

func (a *tokenAuth) token() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tok
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (a *tokenAuth) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if ri, ok := credentials.RequestInfoFromContext(ctx); ok && ri.Method == authenticateMethod {
		return nil, nil
	}
	if tok := a.token(); tok != "" {
		return map[string]string{rpctypes.TokenFieldNameGRPC: tok}, nil
	}
	return nil, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: password auth over
// plain TCP is etcd's choice to allow (it warns), not the client's.
func (a *tokenAuth) RequireTransportSecurity() bool { return false }

// authTimeout bounds one token fetch. etcd checks the password with bcrypt, which takes
// long on a loaded server; the fetch runs apart from the RPC that asked for it, so an RPC
// with a short deadline gives up waiting without cancelling it, and the next RPC finds the
// token.
const authTimeout = 15 * time.Second

// refresh fetches a new token unless someone did since stale was read, and waits for it
// (or for ctx). It returns the fetch's error: the caller's RPC then fails with it, which
// says more than "invalid token".
func (a *tokenAuth) refresh(ctx context.Context, stale string) error {
	a.mu.Lock()
	if a.tok != stale {
		a.mu.Unlock()
		return nil
	}
	if a.failErr != nil && time.Since(a.failAt) < authRetryAfter {
		err := a.failErr
		a.mu.Unlock()
		return err
	}
	done := a.inflight
	if done == nil {
		done = make(chan struct{})
		a.inflight = done
		go a.fetch(done)
	}
	a.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok != stale || a.disabled {
		return nil
	}
	return a.failErr
}

// fetch authenticates once and records the outcome, then closes done. It ends within
// authTimeout, or as soon as the client is closed.
func (a *tokenAuth) fetch(done chan struct{}) {
	defer close(done)
	pw, err := readPassword(a.passwordFile)
	var tok string
	if err == nil {
		actx, cancel := context.WithTimeout(context.Background(), authTimeout)
		tok, err = a.authenticate(actx, a.user, pw)
		cancel()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight = nil
	switch {
	case errors.Is(rpctypes.Error(err), rpctypes.ErrAuthNotEnabled):
		a.tok, a.disabled, a.failErr = "", true, nil
	case err != nil:
		if errors.Is(rpctypes.Error(err), rpctypes.ErrAuthFailed) {
			err = fmt.Errorf("etcd refused user %q with the password in %s: %w", a.user, a.passwordFile, err)
		} else if !strings.HasPrefix(err.Error(), "etcd password file") {
			err = fmt.Errorf("etcd authentication of user %q: %w", a.user, err)
		}
		a.failed(err)
	default:
		if a.logged != "" {
			a.log.Info("etcd authentication works again", "user", a.user)
		}
		a.tok, a.disabled, a.failErr, a.logged = tok, false, nil, ""
	}
}

// failed records a fetch that did not work; a refusal is logged once per distinct error
// (an unreachable etcd is the connection monitor's to explain).
func (a *tokenAuth) failed(err error) {
	a.failAt, a.failErr = time.Now(), err
	if isUnreachable(err) || err.Error() == a.logged {
		return
	}
	a.logged = err.Error()
	a.log.Error("etcd authentication failed", "user", a.user, "err", err)
}

// isTokenError says whether etcd refused an RPC for its token: one a restart or the token
// TTL invalidated, none at all, or one older than the auth store.
func isTokenError(err error) bool {
	if err == nil {
		return false
	}
	e := rpctypes.Error(err)
	return errors.Is(e, rpctypes.ErrInvalidAuthToken) || errors.Is(e, rpctypes.ErrUserEmpty) ||
		errors.Is(e, rpctypes.ErrAuthOldRevision)
}

// needsFirstToken says whether an RPC should fetch a token before it goes out.
func (a *tokenAuth) needsFirstToken() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tok == "" && !a.disabled, a.tok
}

func (a *tokenAuth) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == authenticateMethod {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if first, stale := a.needsFirstToken(); first {
		// An unreachable etcd: the RPC goes and fails as etcd's absence says. A refused
		// password: the RPC does not go, since without a token an etcd with client
		// certificate authentication takes it as the certificate's CN (identity.go).
		if err := a.refresh(ctx, stale); refusal(ctx, err) {
			return err
		}
	}
	stale := a.token()
	err := invoker(ctx, method, req, reply, cc, opts...)
	if !isTokenError(err) {
		return err
	}
	if rerr := a.refresh(ctx, stale); rerr != nil {
		return rerr
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (a *tokenAuth) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if first, stale := a.needsFirstToken(); first {
		if err := a.refresh(ctx, stale); refusal(ctx, err) {
			return nil, err
		}
	}
	stale := a.token()
	s, err := streamer(ctx, desc, cc, method, opts...)
	if isTokenError(err) {
		if rerr := a.refresh(ctx, stale); rerr != nil {
			return nil, rerr
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	if err != nil {
		return nil, err
	}
	return &tokenStream{ClientStream: s, auth: a, stale: stale, ctx: ctx}, nil
}

// tokenStream fetches a new token when a stream (a watch) ends for its token, so that the
// stream the caller opens next carries a valid one.
type tokenStream struct {
	grpc.ClientStream
	auth  *tokenAuth
	stale string
	ctx   context.Context
}

func (s *tokenStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if isTokenError(err) {
		_ = s.auth.refresh(s.ctx, s.stale)
	}
	return err
}

// refusal says whether a token fetch failed for the credentials (a refused password, an
// unreadable password file), not for an unreachable etcd or the caller's deadline.
func refusal(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !isUnreachable(err)
}

func readPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("etcd password file: %w", err)
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("etcd password file %s is empty", path)
	}
	return pw, nil
}
