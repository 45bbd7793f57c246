package etcdroles_test

import (
	"testing"

	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
)

// TestNoSidecarCredentialReachesTheDetectors: with TLS and client certificates required
// and auth on, every credential a sidecar is given (the generic role and a per-job one, by
// password with its own certificate, or by its certificate alone, whose CN etcd takes as
// the user) is refused every key the detectors decide with: incidents, their page
// records, delivery state, the incident key, owners, replica heartbeats, the election and
// the outage records; it may publish its node key and its base, as the publisher does.
// On the embedded etcd and on Debian's 3.4. (deploy's TestChartAndSlurmCredentials does
// the same with the credentials the chart and the Slurm units create.)
func TestNoSidecarCredentialReachesTheDetectors(t *testing.T) {
	for _, backend := range etcdtest.Backends {
		t.Run(backend, func(t *testing.T) {
			const job = "llama"
			e := etcdtest.StartSecured(t, backend, job)
			keys := e.DetectorKeys(t, job)
			for _, user := range e.SidecarUsers() {
				want := etcdtest.Reach{Publishes: true, AnyJob: user == etcdroles.Sidecar}
				e.RefusesDetectorKeys(t, user+" (password)", e.Config(user), job, keys, want)
				e.RefusesDetectorKeys(t, user+" (certificate only)", e.CertOnly(user), job, keys, want)
			}
		})
	}
}
