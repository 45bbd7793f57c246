package etcdconn

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/snapshot"
)

// An etcd with client certificate authentication (--client-cert-auth) takes a request
// that carries no token as the user the certificate's CN names: the certificate is a
// credential of its own, beside the password. A part given another part's certificate, or
// one shared by all, acts as that user whenever its password is refused or absent (issue
// 34: with the detector's certificate and no password, delivery records were written).
// So each part gets a certificate whose CN is its own etcd user, the client never falls
// back from a refused password to the certificate (auth.go sends nothing then), and at
// start each part says in one line which identity etcd accepted.

// Identity is who etcd takes a client's requests to come from.
type Identity struct {
	// User is the etcd user ("" when auth is off or nothing was accepted).
	User string
	// By is how: "password", "client certificate CN", or "" (auth off, or refused).
	By string
	// AuthOff says etcd's authentication is off: every request is accepted.
	AuthOff bool
	// CN is the client certificate's common name ("" without one).
	CN string
	// Problem, when set, says what is wrong (a refused password, a CN that is not the
	// user and reaches a watchdog key alone); the parts log it as an error and doctor
	// fails on it.
	Problem string
	// Note, when set, says something that is no problem: a client certificate of another
	// CN that reaches nothing alone (a node's certificate beside a per-job password).
	Note string
}

// String is the line a part logs at start.
func (id Identity) String() string {
	switch {
	case id.AuthOff:
		return "etcd's authentication is off: every request is accepted, whoever sends it"
	case id.User == "":
		return "etcd accepted no identity: " + id.Problem
	case id.Problem != "":
		return fmt.Sprintf("authenticated as %s by the %s; %s", id.User, id.By, id.Problem)
	case id.Note != "":
		return fmt.Sprintf("authenticated as %s by the %s; %s", id.User, id.By, id.Note)
	}
	return fmt.Sprintf("authenticated as %s by the %s", id.User, id.By)
}

// certCN reads the common name of the client certificate file ("" without one).
func certCN(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fileProblem("client certificate", path, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", fmt.Errorf("etcd client certificate %s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", fmt.Errorf("etcd client certificate %s: %w", path, err)
	}
	return c.Subject.CommonName, nil
}

// probeUser is a user no site creates: logging in as it tells whether auth is on (etcd
// answers "authentication is not enabled" when off, "authentication failed" when on), on
// every version; AuthStatus exists from 3.5 only.
const probeUser = "ncclwatch-no-such-user"

// WhoAmI asks etcd (through cli, made by New from cfg) which identity it accepts for
// cfg's settings. It returns an error only when etcd could not be asked.
func WhoAmI(ctx context.Context, cli *clientv3.Client, cfg Config) (Identity, error) {
	var id Identity
	cn, err := certCN(cfg.CertFile)
	if err != nil {
		return id, err
	}
	id.CN = cn
	if cfg.Username != "" {
		refused := func(why string) Identity {
			id.Problem = why + ": nothing is sent to etcd"
			if cn != "" {
				id.Problem += fmt.Sprintf(" (without a token etcd would take the requests as %s, the client certificate's CN)", cn)
			}
			return id
		}
		pw, err := readPassword(cfg.PasswordFile)
		if err != nil {
			return refused(err.Error()), nil
		}
		_, err = cli.Auth.Authenticate(ctx, cfg.Username, pw)
		switch {
		case err == nil:
			id.User, id.By = cfg.Username, "password"
			if cn != "" && cn != cfg.Username {
				reach, err := certReach(ctx, cfg)
				switch {
				case err == nil && len(reach) == 0:
					id.Note = fmt.Sprintf("the client certificate's CN %q writes no watchdog key alone", cn)
				case err == nil:
					id.Problem = fmt.Sprintf("the client certificate's CN is %q, an etcd identity of its own for any request without a token (it may write %s): give this part a certificate whose CN is %s, or one whose CN names no etcd user (docs/security.md)", cn, strings.Join(reach, ", "), cfg.Username)
				default:
					id.Problem = fmt.Sprintf("the client certificate's CN is %q, an etcd identity of its own for any request without a token (what it may do could not be asked: %v): give this part a certificate whose CN is %s (docs/security.md)", cn, err, cfg.Username)
				}
			}
			return id, nil
		case errors.Is(rpctypes.Error(err), rpctypes.ErrAuthNotEnabled):
			id.AuthOff = true
			return id, nil
		case errors.Is(rpctypes.Error(err), rpctypes.ErrAuthFailed):
			return refused(fmt.Sprintf("the password of %s in %s was refused", cfg.Username, cfg.PasswordFile)), nil
		default:
			return id, err
		}
	}
	_, err = cli.Auth.Authenticate(ctx, probeUser, "x")
	switch {
	case errors.Is(rpctypes.Error(err), rpctypes.ErrAuthNotEnabled):
		id.AuthOff = true
	case errors.Is(rpctypes.Error(err), rpctypes.ErrAuthFailed):
		if cn == "" {
			id.Problem = "authentication is on, and neither a user (--etcd-user) nor a client certificate was given"
		} else {
			id.User, id.By = cn, "client certificate CN"
		}
	case err != nil:
		return id, err
	}
	return id, nil
}

// certReach says which watchdog keys the client certificate of cfg may write alone (as
// its CN, without a token): a node key of any job, a key of the detectors. Each is asked
// by a transaction whose only put stands in the branch that never runs (no comparison,
// so the other runs): etcd checks the permissions of both branches, and writes nothing.
func certReach(ctx context.Context, cfg Config) ([]string, error) {
	certOnly := cfg
	certOnly.Username, certOnly.PasswordFile, certOnly.Logger = "", "", nil
	cli, err := New(certOnly)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	var reach []string
	for _, k := range []string{snapshot.NodeKey("_identity-probe", "node"), snapshot.DetectorPrefix + "identity-probe"} {
		_, err := cli.Txn(ctx).Else(clientv3.OpPut(k, "")).Commit()
		switch {
		case err == nil:
			reach = append(reach, k)
		case !errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) && !errors.Is(rpctypes.Error(err), rpctypes.ErrUserNotFound):
			return nil, err
		}
	}
	return reach, nil
}

// logIdentity logs once, when etcd first answers, which identity it accepted.
func logIdentity(cli *clientv3.Client, cfg Config, log *slog.Logger) {
	ctx := cli.Ctx()
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		id, err := WhoAmI(octx, cli, cfg)
		cancel()
		if err == nil {
			switch {
			case id.Problem != "":
				log.Error("etcd identity", "identity", id.String())
			case id.AuthOff:
				log.Warn("etcd identity", "identity", id.String())
			default:
				log.Info("etcd identity", "identity", id.String())
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}
