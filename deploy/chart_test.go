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

// TestSidecarCredentials: with a sidecar user the training pod mounts its Secret, never
// the detector's, and its settings name that user.
func TestSidecarCredentials(t *testing.T) {
	out, err := helmTemplateErr(t, "-f", "kubernetes/values-production.yaml", "--set", "examplePod.enabled=true", "--show-only", "templates/example-pod.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "secretName: ncclwatch-etcd-sidecar") || strings.Contains(out, "ncclwatch-etcd-detector") {
		t.Errorf("the training pod's secrets:\n%s", out)
	}
	out, err = helmTemplateErr(t, "-f", "kubernetes/values-production.yaml", "--show-only", "templates/sidecar-configmap.yaml")
	if err != nil || !strings.Contains(out, `NCCLWATCH_ETCD_USER: "ncclwatch-sidecar"`) {
		t.Errorf("sidecar settings (%v):\n%s", err, out)
	}
	if out, err := helmTemplateErr(t, "--set", "etcd.endpoints[0]=https://e:2379,etcd.auth.sidecar.user=s,examplePod.enabled=true"); err == nil ||
		!strings.Contains(out, "etcd.auth.sidecar.passwordSecret.name must name its Secret") {
		t.Errorf("a sidecar user without its Secret rendered (%v)", err)
	}
}
