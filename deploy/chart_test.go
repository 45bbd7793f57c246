package deploy_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// helmTemplateErr renders the chart and returns its error output (nil error: it rendered).
func helmTemplateErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), append([]string{"template", "ncclwatch", chartDir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return string(out) + stderr.String(), err
}

// TestValuesSchema: values.schema.json refuses a key the chart does not know and a value
// of the wrong type, naming it, where they would otherwise be ignored: etcd.endpoint (for
// endpoints) silently selected the embedded trial etcd.
func TestValuesSchema(t *testing.T) {
	for _, c := range []struct {
		set, says string
	}{
		{"etcd.endpoint=https://etcd:2379", "additional properties 'endpoint' not allowed"},
		{"detector.replica=3", "additional properties 'replica' not allowed"},
		{"sidecar.logKeepMib=64", "additional properties 'logKeepMib' not allowed"},
		{"detector.replicas=two", "/detector/replicas"},
		{"detector.logLevel=verbose", "/detector/logLevel"},
		{"sidecar.leaseTTL=10", "/sidecar/leaseTTL"},
		{"profilerPlugin.ncclDebug=TRACE", "/profilerPlugin/ncclDebug"},
		{"detector.config.fleet.actions.kubernetes.taint=yes", "/detector/config/fleet/actions/kubernetes/taint"},
		{"detector.config.fleet.actions.kubernetes.taints=true", "additional properties 'taints' not allowed"},
	} {
		out, err := helmTemplateErr(t, "--set", c.set)
		if err == nil || !strings.Contains(out, c.says) {
			t.Errorf("--set %s: rendered (%v), want a schema error saying %q:\n%.600s", c.set, err, c.says, out)
		}
	}
	// Free-form maps stay free.
	if out, err := helmTemplateErr(t, "--set", "detector.podLabels.team=ml,detector.resources.limits.cpu=4,detector.config.rules.hang_k=5"); err != nil {
		t.Errorf("free-form values refused: %v\n%s", err, out)
	}
}

// TestPodDisruptionBudgetOnlyWithReplicas: the PDB exists with 2 or more replicas; with
// one, minAvailable 1 would block every node drain.
func TestPodDisruptionBudgetOnlyWithReplicas(t *testing.T) {
	ext := "etcd.endpoints[0]=https://etcd:2379"
	for _, c := range []struct {
		set  string
		want bool
	}{{ext + ",detector.replicas=1", false}, {ext + ",detector.replicas=2", true}, {"detector.replicas=3", false}} {
		out, err := helmTemplateErr(t, "--set", c.set)
		if err != nil {
			t.Fatalf("--set %s: %v\n%s", c.set, err, out)
		}
		if got := strings.Contains(out, "kind: PodDisruptionBudget"); got != c.want {
			t.Errorf("--set %s: PodDisruptionBudget rendered %t, want %t", c.set, got, c.want)
		}
	}
}

// TestSidecarCredentials: by default each job's training pods mount their job's client
// certificate and nothing else (no password: they log in by its CN); the detector's and
// root's Secrets stay out of them; a hook creates the job's role. Settings that would put
// the detector's credential into training pods, or leave the per-job hook without what it
// needs, fail the render and say why.
func TestSidecarCredentials(t *testing.T) {
	out, err := helmTemplateErr(t, "-f", "kubernetes/values-production.yaml", "--set", "examplePod.enabled=true", "--show-only", "templates/example-pod.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "secretName: ncclwatch-etcd-tls-sidecar-llama-train") || strings.Contains(out, "ncclwatch-etcd-detector") ||
		strings.Contains(out, "ncclwatch-etcd-tls-detector") || strings.Contains(out, "root") {
		t.Errorf("the training pod's secrets:\n%s", out)
	}
	out, err = helmTemplateErr(t, "-f", "kubernetes/values-production.yaml", "--show-only", "templates/sidecar-configmap.yaml")
	if err != nil || strings.Contains(out, "NCCLWATCH_ETCD_USER") || !strings.Contains(out, "NCCLWATCH_ETCD_CERT_FILE") {
		t.Errorf("sidecar settings (%v): want a certificate and no user\n%s", err, out)
	}
	out, err = helmTemplateErr(t, "-f", "kubernetes/values-production.yaml", "--set", "sidecar.jobs={a,b}", "--show-only", "templates/etcd-roles-hook.yaml")
	if err != nil || !strings.Contains(out, "--jobs=a,b") || !strings.Contains(out, "--remove") {
		t.Errorf("the roles hook (%v):\n%s", err, out)
	}
	prod := "etcd.endpoints[0]=https://e:2379,etcd.auth.user=ncclwatch-detector,etcd.auth.passwordSecret.name=pw,examplePod.enabled=true,"
	for _, c := range []struct{ set, says string }{
		{prod + "sidecar.etcdRole=shared,etcd.auth.sidecar.user=s", "etcd.auth.sidecar.passwordSecret.name must name its Secret"},
		{prod + "sidecar.etcdRole=shared", "etcd.auth.sidecar.user must name the sidecars' own user"},
		{prod + "sidecar.etcdRole=shared,etcd.auth.sidecar.user=ncclwatch-detector,etcd.auth.sidecar.passwordSecret.name=pw", "is the detector's user"},
		{prod + "etcd.auth.root.passwordSecret.name=r", "so etcd.tls must be enabled"},
		{prod + "etcd.tls.enabled=true", "etcd.auth.root.passwordSecret.name must name the Secret"},
		{prod + "etcd.tls.enabled=true,etcd.tls.certManager.enabled=true", "issuerRef.name must name the issuer"},
		{prod + "sidecar.jobs={Llama_1}", "/sidecar/jobs/0"},
	} {
		if out, err := helmTemplateErr(t, "--set", c.set); err == nil || !strings.Contains(out, c.says) {
			t.Errorf("--set %s rendered (%v), want it to fail saying %q:\n%.400s", c.set, err, c.says, out)
		}
	}
}
