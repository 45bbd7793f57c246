package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/incidentkey"
	"github.com/ncclwatch/watchdog/snapshot"
)

// EtcdCheck says how to reach etcd and what the credentials are for.
type EtcdCheck struct {
	Config etcdconn.Config
	// Role is what the credentials are for: "detector", "sidecar", or "" (only reach etcd).
	Role string
	// Job is the job a sidecar's write is tried under (its role may be per job).
	Job string
}

// Etcd checks that every endpoint answers with the given TLS, that the user authenticates,
// whether etcd's auth is on, and that the role can do what its component needs (and, for
// a sidecar, no more).
func Etcd(ctx context.Context, c EtcdCheck) []Result {
	if len(c.Config.Endpoints) == 0 {
		return []Result{{Check: "etcd", Level: Skip, Say: "no --etcd-endpoints: etcd not checked"}}
	}
	if err := etcdconn.Explain(ctx, c.Config); err != nil {
		return []Result{problem("etcd", Fail, err.Error(), "the message names the file or setting; docs/security.md#tls")}
	}
	var out []Result
	out = append(out, ok("etcd", "every endpoint answers gRPC with the given TLS settings: %v", c.Config.Endpoints))
	cli, err := etcdconn.New(c.Config)
	if err != nil {
		return append(out, problem("etcd", Fail, err.Error(), "check --etcd-* settings"))
	}
	defer cli.Close()
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// What this etcd can answer is detected, not assumed from a version: AuthStatus exists
	// from 3.5 on, and WhoAmI asks with what every version has (etcdconn/identity.go).
	if st, err := cli.Status(octx, c.Config.Endpoints[0]); err == nil {
		out = append(out, ok("etcd", "etcd %s at %s", st.Version, c.Config.Endpoints[0]))
	}
	id, err := etcdconn.WhoAmI(octx, cli, c.Config)
	switch {
	case err != nil:
		return append(out, problem("etcd", Fail, fmt.Sprintf("etcd answers the connection but not a request: %v", err),
			"check etcd's health (etcdctl endpoint health)"))
	case id.AuthOff:
		out = append(out, problem("roles", Warn, "etcd's authentication is off: whoever reaches etcd can write node keys of any job, and delete incidents",
			"watchdog etcd-roles --apply --enable-auth --password-dir DIR (docs/security.md)"))
	case id.User == "":
		return append(out, problem("etcd", Fail, id.String(), "check --etcd-user and --etcd-password-file, or the client certificate (docs/security.md)"))
	case id.Problem != "":
		out = append(out, problem("etcd", Fail, id.String(), "one client certificate per part, its CN the part's etcd user (docs/security.md#one-identity-per-part)"))
	default:
		out = append(out, ok("etcd", "authentication is on; %s", id))
	}
	switch c.Role {
	case "detector":
		out = append(out, detectorRole(octx, cli, c)...)
	case "sidecar":
		out = append(out, sidecarRole(octx, cli, c)...)
	case "":
		out = append(out, Result{Check: "roles", Level: Skip, Say: "no --role: what the credentials may do not checked"})
	}
	return out
}

func denied(err error) bool {
	return errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied)
}

func roleFix(role string) string {
	return fmt.Sprintf("give the user the role %s: watchdog etcd-roles --print (or --apply)", role)
}

// detectorRole: the detector reads every job and writes under its own prefix.
func detectorRole(ctx context.Context, cli *clientv3.Client, c EtcdCheck) []Result {
	var out []Result
	if _, err := cli.Get(ctx, snapshot.JobsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		r := problem("roles", Fail, fmt.Sprintf("the detector's user cannot read %s: %v", snapshot.JobsPrefix, err), roleFix(etcdroles.Detector))
		return append(out, r)
	}
	probe := snapshot.Prefix + "detector/doctor-probe"
	if _, err := cli.Put(ctx, probe, "doctor"); err != nil {
		return append(out, problem("roles", Fail, fmt.Sprintf("the detector's user cannot write %s: %v", probe, err), roleFix(etcdroles.Detector)))
	}
	_, _ = cli.Delete(ctx, probe)
	return append(out, ok("roles", "the detector's user reads %s and writes under %s", snapshot.JobsPrefix, snapshot.Prefix))
}

// sidecarRole: a sidecar writes its node key and its base (what its values are compressed
// against) under a lease in one transaction, as its publisher does, and should not be able
// to read the incident key nor write the detector's state.
func sidecarRole(ctx context.Context, cli *clientv3.Client, c EtcdCheck) []Result {
	var out []Result
	host, _ := os.Hostname()
	node := "doctor-probe-" + host
	key, base := snapshot.NodeKey(c.Job, node), snapshot.BaseKey(c.Job, node)
	g, err := cli.Grant(ctx, 10)
	if err != nil {
		return append(out, problem("roles", Fail, fmt.Sprintf("the sidecar's user cannot take a lease: %v", err), roleFix(etcdroles.Sidecar)))
	}
	defer cli.Revoke(context.WithoutCancel(ctx), g.ID)
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut(base, "{}", clientv3.WithLease(g.ID)),
		clientv3.OpPut(key, "{}", clientv3.WithLease(g.ID))).Commit(); err != nil {
		return append(out, problem("roles", Fail, fmt.Sprintf("the sidecar's user cannot write its node key %s and its base %s: %v", key, base, err),
			roleFix(etcdroles.Sidecar+" (or "+etcdroles.Sidecar+"-"+c.Job+")")))
	}
	out = append(out, ok("roles", "the sidecar's user writes node keys and their bases of job %s", c.Job))
	if _, err := cli.Get(ctx, incidentkey.EtcdKey); err == nil {
		out = append(out, problem("roles", Warn, "the sidecar's user can read the detectors' incident key "+incidentkey.EtcdKey+": a trainer that steals it can forge incidents",
			"give sidecars the role "+etcdroles.Sidecar+" alone (watchdog etcd-roles), or the detectors --incident-key-file"))
	} else if !denied(err) {
		out = append(out, problem("roles", Warn, fmt.Sprintf("reading the incident key failed otherwise than denied: %v", err), ""))
	}
	// Every key the detectors decide with must be out of the sidecar's reach. The probes
	// are keys no detector uses (a job no sidecar may name), so a wrongly permitted write
	// overwrites nothing. A sidecar cannot read, so a conditional write would be refused
	// for its comparison: a plain put, deleted again when it was permitted.
	const probeJob = "_doctor-probe"
	var reachable []string
	for _, k := range []string{snapshot.DeliveryKey("doctor", "probe"), snapshot.IncidentKey(probeJob, "probe"),
		snapshot.PageKey(probeJob, "probe"), snapshot.OwnerKey(probeJob), snapshot.ReplicaKey(probeJob),
		snapshot.LeaderKey + "/" + probeJob, snapshot.OutageKey(probeJob)} {
		_, err := cli.Put(ctx, k, "{}")
		switch {
		case err == nil:
			_, _ = cli.Delete(ctx, k)
			reachable = append(reachable, k)
		case !denied(err):
			out = append(out, problem("roles", Warn, fmt.Sprintf("writing %s failed otherwise than denied: %v", k, err), ""))
		}
	}
	if len(reachable) > 0 {
		return append(out, problem("roles", Fail, fmt.Sprintf("the sidecar's user can write what the detectors decide with (%s): it could silence, repeat or stall pages", strings.Join(reachable, ", ")),
			"give sidecars the role "+etcdroles.Sidecar+"-<job> or "+etcdroles.Sidecar+" alone (watchdog etcd-roles)"))
	}
	return append(out, ok("roles", "the sidecar's user cannot read the incident key nor write incidents, page records, delivery state, owners, heartbeats, the election or outage records (least privilege)"))
}
