// Package etcdroles is the least-privilege etcd setup of the watchdog (docs/security.md):
// the detector's role owns everything under the watchdog's prefix, and a sidecar's role
// may only write node keys and their bases (snapshot.JobsPrefix, which holds nothing
// else): of every job, or, the default of the chart and the Slurm units, of one job.
// Nothing the detectors decide with (incidents, page records, delivery state, owners,
// heartbeats, the election, outage records, the incident key: snapshot.DetectorPrefix)
// lies in any sidecar role's range. A Plan is printed as
// etcdctl commands (`watchdog etcd-roles --print`) or applied through a client with the
// root role (`--apply`); both are idempotent.
package etcdroles

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Names of the roles and users; a per-job sidecar's add "-<job>".
const (
	Detector = "ncclwatch-detector"
	Sidecar  = "ncclwatch-sidecar"
)

// Perm is one key-range permission of a role.
type Perm struct {
	Type   string // read, write or readwrite
	Key    string
	Prefix bool
}

// Role is an etcd role with its permissions; User names the etcd user holding it alone.
type Role struct {
	Name  string
	Perms []Perm
	// Why says in a sentence what the role is for (printed as a comment).
	Why string
}

// Plan is the set of roles (each with a user of the same name) to create.
type Plan struct {
	Roles []Role
	// SetPasswords: Apply sets the password of a user that exists already to the one
	// given (a per-job user, whose password the prolog or chart hook gives anew each time);
	// without it an existing user keeps its password.
	SetPasswords bool
}

// NewPlan returns the roles: the detector's, and one sidecar role for every job (no jobs)
// or one per job named.
func NewPlan(jobs []string) (Plan, error) {
	p := Plan{Roles: []Role{{Name: Detector, Why: "the detector: reads node keys, owns everything under " + snapshot.DetectorPrefix + " (incidents, delivery state, the election, the incident key)",
		Perms: []Perm{{Type: "readwrite", Key: snapshot.Prefix, Prefix: true}}}}}
	if len(jobs) == 0 {
		p.Roles = append(p.Roles, Role{Name: Sidecar,
			Why:   "every sidecar: writes node keys and their bases under any job (nothing else lies there); reads nothing",
			Perms: []Perm{{Type: "write", Key: snapshot.JobsPrefix, Prefix: true}}})
		return p, nil
	}
	for _, j := range jobs {
		if err := snapshot.ValidJob(j); err != nil {
			return Plan{}, fmt.Errorf("job: %w (a role name and a key segment)", err)
		}
		// A publisher writes its node key and the base its values are compressed against
		// (snapshot.BaseKey) in one transaction: both, or nothing reaches the detector.
		p.Roles = append(p.Roles, Role{Name: JobUser(j), Why: "the sidecars of job " + j + ": write only that job's node keys and their bases",
			Perms: []Perm{{Type: "write", Key: snapshot.NodeKey(j, ""), Prefix: true}, {Type: "write", Key: snapshot.BaseKey(j, ""), Prefix: true}}})
	}
	return p, nil
}

// JobUser is the etcd user (and role) of the sidecars of one job.
func JobUser(job string) string { return Sidecar + "-" + job }

// JobPlan returns only the per-job sidecar roles of jobs: what a Slurm prolog or the
// chart's hook creates for each job (with etcd's root) and removes when it ends, while
// the detector's role and the generic one stay as `etcd-roles --apply` made them.
func JobPlan(jobs []string) (Plan, error) {
	if len(jobs) == 0 {
		return Plan{}, errors.New("no jobs")
	}
	p, err := NewPlan(jobs)
	if err != nil {
		return Plan{}, err
	}
	return Plan{Roles: p.Roles[1:], SetPasswords: true}, nil
}

// JobPassword derives the password of a per-job sidecar user from a site key: the node
// that runs a job's sidecar writes it from the key (no channel from the controller that
// creates the user is needed), and the key reaches what the generic sidecar role reaches
// (node keys of any job), never the detectors' keys.
func JobPassword(key []byte, job string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("ncclwatch etcd password of " + JobUser(job)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// RandomPassword is a password no one keeps: for a per-job user that logs in by its
// client certificate alone (etcd 3.4 has no users without a password).
func RandomPassword() (string, error) {
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// Remove deletes the plan's users and roles (one that is gone already is no error). Only
// per-job plans are removed: the detector's and the generic sidecar's roles outlive jobs.
func (p Plan) Remove(ctx context.Context, cli *clientv3.Client) error {
	for _, r := range p.Roles {
		if !strings.HasPrefix(r.Name, Sidecar+"-") {
			return fmt.Errorf("role %s: only per-job roles are removed", r.Name)
		}
		if _, err := cli.UserDelete(ctx, r.Name); err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrUserNotFound) {
			return fmt.Errorf("user %s: %w", r.Name, err)
		}
		if _, err := cli.RoleDelete(ctx, r.Name); err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrRoleNotFound) {
			return fmt.Errorf("role %s: %w", r.Name, err)
		}
	}
	return nil
}

// Script returns the etcdctl commands of the plan, with comments, as a POSIX shell script.
// Passwords are read from files under passwordDir named after each user (mode 0600,
// written beforehand), never put on a command line.
func (p Plan) Script(passwordDir string) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
# The watchdog's etcd roles (watchdog etcd-roles --print). Run with etcdctl 3.4+ as root
# (ETCDCTL_ENDPOINTS, ETCDCTL_CACERT/CERT/KEY, ETCDCTL_USER as needed). Idempotent: an
# existing user or role is kept; its permissions are granted again.
set -eu
: "${ETCDCTL_API:=3}"; export ETCDCTL_API
`)
	fmt.Fprintf(&b, "pwdir=%s\n", shellQuote(passwordDir))
	for _, r := range p.Roles {
		fmt.Fprintf(&b, "\n# %s\n", r.Why)
		fmt.Fprintf(&b, "etcdctl role get %s >/dev/null 2>&1 || etcdctl role add %s\n", r.Name, r.Name)
		for _, pm := range r.Perms {
			pfx := ""
			if pm.Prefix {
				pfx = " --prefix"
			}
			fmt.Fprintf(&b, "etcdctl role grant-permission%s %s %s %s\n", pfx, r.Name, pm.Type, shellQuote(pm.Key))
		}
		fmt.Fprintf(&b, "etcdctl user get %s >/dev/null 2>&1 || etcdctl user add %s --interactive=false < \"$pwdir/%s\"\n", r.Name, r.Name, r.Name)
		fmt.Fprintf(&b, "etcdctl user grant-role %s %s\n", r.Name, r.Name)
	}
	b.WriteString(`
# Authentication must be on for roles to matter; it needs a root user first:
#   etcdctl user add root --interactive=false < "$pwdir/root" && etcdctl user grant-role root root
#   etcdctl auth enable
`)
	return b.String()
}

// Apply creates what is missing of the plan through cli (a root client, or any client
// while auth is off), sets the given passwords (user name -> password) of users it
// creates, and grants every permission again. It does not enable auth.
func (p Plan) Apply(ctx context.Context, cli *clientv3.Client, passwords map[string]string) error {
	for _, r := range p.Roles {
		if _, err := cli.RoleAdd(ctx, r.Name); err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrRoleAlreadyExist) {
			return fmt.Errorf("role %s: %w", r.Name, err)
		}
		for _, pm := range r.Perms {
			end := ""
			if pm.Prefix {
				end = clientv3.GetPrefixRangeEnd(pm.Key)
			}
			if _, err := cli.RoleGrantPermission(ctx, r.Name, pm.Key, end, permType(pm.Type)); err != nil {
				return fmt.Errorf("role %s: grant %s %s: %w", r.Name, pm.Type, pm.Key, err)
			}
		}
		pw, ok := passwords[r.Name]
		if !ok || pw == "" {
			return fmt.Errorf("user %s: no password given", r.Name)
		}
		_, err := cli.UserAdd(ctx, r.Name, pw)
		switch {
		case err == nil:
		case errors.Is(rpctypes.Error(err), rpctypes.ErrUserAlreadyExist):
			if p.SetPasswords {
				if _, err := cli.UserChangePassword(ctx, r.Name, pw); err != nil {
					return fmt.Errorf("user %s: password: %w", r.Name, err)
				}
			}
		default:
			return fmt.Errorf("user %s: %w", r.Name, err)
		}
		if _, err := cli.UserGrantRole(ctx, r.Name, r.Name); err != nil {
			return fmt.Errorf("user %s: grant role: %w", r.Name, err)
		}
	}
	return nil
}

func permType(t string) clientv3.PermissionType {
	switch t {
	case "read":
		return clientv3.PermissionType(authpb.READ)
	case "write":
		return clientv3.PermissionType(authpb.WRITE)
	}
	return clientv3.PermissionType(authpb.READWRITE)
}

// EnableAuth adds the root user with the root role (if missing) and turns auth on: the
// last step of a setup, for tests and for `etcd-roles --apply --enable-auth`.
func EnableAuth(ctx context.Context, cli *clientv3.Client, rootPassword string) error {
	if _, err := cli.UserAdd(ctx, "root", rootPassword); err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("user root: %w", err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("user root: grant role root: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("auth enable: %w", err)
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
