package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	psapi "k8s.io/pod-security-admission/api"
	psa "k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/ncclwatch/watchdog/alert"
)

const (
	chartDir         = "helm/ncclwatch"
	productionValues = "kubernetes/values-production.yaml"
)

// manifestSet is one set of objects a user applies: the committed files, or a helm render.
type manifestSet struct {
	name  string
	files []string // committed files, read as they are
	args  []string // helm template arguments after the release and the chart
	// trainingPodDenied: the training pod must fail Pod Security "baseline" for this
	// reason (an opt-in the chart documents as needing a privileged namespace).
	trainingPodDenied string
	// ncclDebug is the NCCL_DEBUG the training container gets; pluginMode: it loads the
	// profiler plugin (profilerPlugin.enabled).
	ncclDebug  string
	pluginMode bool
}

var manifestSets = []manifestSet{
	{name: "committed", files: []string{"kubernetes/ncclwatch.yaml", "kubernetes/training-pod.yaml"}, ncclDebug: "WARN", pluginMode: true},
	{name: "default", ncclDebug: "INFO"},
	{name: "default with example pod: INFO logs, no plugin", args: []string{"--set", "examplePod.enabled=true"}, ncclDebug: "INFO"},
	{name: "production", args: []string{"-f", productionValues}, ncclDebug: "WARN", pluginMode: true},
	{name: "production with example pod and dashboards", args: []string{"-f", productionValues,
		"--set", "examplePod.enabled=true,grafanaDashboards.enabled=true"}, ncclDebug: "WARN", pluginMode: true},
	{name: "embedded etcd, every option on", args: []string{"--set", "examplePod.enabled=true,examplePod.nativeSidecar=false," +
		"grafanaDashboards.enabled=true,monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true," +
		"monitoring.prometheusRule.enabled=true,etcd.tls.enabled=true,etcd.tls.certManager.enabled=true,etcd.tls.certManager.issuerRef.name=ca," +
		"etcd.auth.user=u,etcd.auth.passwordSecret.name=pw,etcd.auth.root.passwordSecret.name=root,sidecar.jobs={a,b}," +
		"detector.podLabels.team=ml,detector.podLabels.app\\.kubernetes\\.io/name=other,detector.podAnnotations.note=x," +
		"profilerPlugin.enabled=true,profilerPlugin.ncclDebug=INFO,profilerPlugin.dir=/usr/lib/nccl-plugins/,profilerPlugin.regionDir=/dev/ncclwatch," +
		"detector.config.fleet.actions.kubernetes.taint=true,detector.config.fleet.actions.kubernetes.condition=true"},
		ncclDebug: "INFO", pluginMode: true},
	{name: "shared sidecar role, Secrets of your own", args: []string{"--set", "examplePod.enabled=true,etcd.endpoints[0]=https://e:2379," +
		"etcd.tls.enabled=true,etcd.tls.secretPrefix=etcd-,etcd.auth.user=ncclwatch-detector,etcd.auth.passwordSecret.name=pw," +
		"sidecar.etcdRole=shared,etcd.auth.sidecar.user=ncclwatch-sidecar,etcd.auth.sidecar.passwordSecret.name=spw"}, ncclDebug: "INFO"},
	{name: "IB ports through hostPath", args: []string{"--set", "examplePod.enabled=true,sidecar.infinibandHostPath=true"},
		trainingPodDenied: "hostPath volumes", ncclDebug: "INFO"},
}

// TestKubernetesManifests decodes every object of the committed manifests and of the
// chart's renders strictly into the Kubernetes API's own types (duplicate keys and
// unknown fields are errors, as kubectl apply --validate=strict and kubeconform make
// them), runs the Pod Security admission checks (detector: restricted; training pod:
// baseline), and checks that the objects hang together.
func TestKubernetesManifests(t *testing.T) {
	for _, set := range manifestSets {
		t.Run(set.name, func(t *testing.T) {
			var docs []byte
			if set.files != nil {
				for _, f := range set.files {
					b, err := os.ReadFile(f)
					if err != nil {
						t.Fatal(err)
					}
					docs = append(append(docs, "\n---\n"...), b...)
				}
			} else {
				docs = helmTemplate(t, set.args...)
			}
			objs := decodeStrict(t, docs)
			checkManifests(t, set, objs)
		})
	}
}

// helmTemplate renders the chart with the helm binary the Makefile pins.
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	helm := helmBinary(t)
	cmd := exec.Command(helm, append([]string{"template", "ncclwatch", chartDir, "--namespace", "ncclwatch"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// helmBinary is $NCCLWATCH_HELM (make helm-check sets it), else the Makefile's pinned
// helm-<version> in its HELM_CACHE (the user's cache directory) if it was built; without
// either the renders are skipped and only the committed manifests are checked.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NCCLWATCH_HELM"); p != "" {
		return p
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HELM_VERSION\s*:=\s*(\S+)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no HELM_VERSION in the Makefile")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no cache directory (%v): only the committed manifests are checked", err)
	}
	p := filepath.Join(cache, "ncclwatch", "helm-"+string(m[1]))
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s not built (make tools builds it): only the committed manifests are checked", p)
	}
	return p
}

// object is one decoded document.
type object struct {
	kind, name string
	obj        runtime.Object
}

var (
	scheme  = newScheme()
	decoder = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
)

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
		policyv1.AddToScheme, rbacv1.AddToScheme, monitoringv1.AddToScheme, certmanagerv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// decodeStrict decodes every YAML document; a kind the scheme does not know is an error
// too, so that a new kind gets a type here before it ships.
func decodeStrict(t *testing.T, docs []byte) []object {
	t.Helper()
	objs, errs := decodeDocuments(docs)
	for _, err := range errs {
		t.Error(err)
	}
	return objs
}

func decodeDocuments(docs []byte) ([]object, []error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(docs)))
	var (
		objs []object
		errs []error
	)
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, errs
		}
		if err != nil {
			return objs, append(errs, fmt.Errorf("document %d: %w", i, err))
		}
		if j, err := yaml.YAMLToJSON(doc); err == nil && string(j) == "null" {
			continue // only comments
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		where := fmt.Sprintf("document %d", i)
		if gvk != nil {
			where += " (" + gvk.Kind
			if m, ok := obj.(metav1.Object); ok {
				where += " " + m.GetName()
			}
			where += ")"
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			if !runtime.IsStrictDecodingError(err) {
				continue
			}
			// The object decoded all the same: check the rest of it too.
		}
		m := obj.(metav1.Object)
		if m.GetName() == "" {
			errs = append(errs, fmt.Errorf("%s: no name", where))
		}
		objs = append(objs, object{kind: gvk.Kind, name: m.GetName(), obj: obj})
	}
}

// TestStrictDecoding: the decoder refuses what the old yaml.Node-based test let through.
func TestStrictDecoding(t *testing.T) {
	for name, doc := range map[string]string{
		"duplicate label": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    x: \"1\"\n    x: \"1\"\n",
		"unknown field":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\nspec: {}\n",
		"unknown kind":    "apiVersion: v1\nkind: Podd\nmetadata:\n  name: a\n",
	} {
		if _, errs := decodeDocuments([]byte(doc)); len(errs) == 0 {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

var podSecurity = func() psa.Evaluator {
	e, err := psa.NewEvaluator(psa.DefaultChecks(), nil)
	if err != nil {
		panic(err)
	}
	return e
}()

// admitted returns why Pod Security admission at level would refuse a pod ("" if not).
func admitted(level psapi.Level, meta *metav1.ObjectMeta, spec *corev1.PodSpec) string {
	res := psa.AggregateCheckResults(podSecurity.EvaluatePod(psapi.LevelVersion{Level: level, Version: psapi.LatestVersion()}, meta, spec))
	if res.Allowed {
		return ""
	}
	return res.ForbiddenDetail()
}

// checkManifests checks what the API server accepts but a user would not: references that
// resolve, selectors that select, containers that are limited and locked down, the NCCL
// settings the docs name, the rule file inside the PrometheusRule.
func checkManifests(t *testing.T, set manifestSet, objs []object) {
	t.Helper()
	kinds := map[string]int{}
	configMaps := map[string]*corev1.ConfigMap{}
	var detectorPod *corev1.PodTemplateSpec
	var services []*corev1.Service
	for _, o := range objs {
		kinds[o.kind]++
		switch v := o.obj.(type) {
		case *corev1.ConfigMap:
			configMaps[v.Name] = v
		case *corev1.Service:
			services = append(services, v)
		case *appsv1.Deployment:
			detectorPod = &v.Spec.Template
			sel, err := metav1.LabelSelectorAsSelector(v.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(v.Spec.Template.Labels)) {
				t.Errorf("Deployment %s: selector %v does not select its pod template's labels %v (%v)", v.Name, v.Spec.Selector, v.Spec.Template.Labels, err)
			}
		}
	}
	want := []string{"Deployment", "Service", "ServiceAccount", "ConfigMap"}
	if set.files != nil {
		want = append(want, "PodDisruptionBudget", "Pod", "PodMonitor", "ServiceMonitor", "PrometheusRule", "Job", "Certificate")
	}
	for _, k := range want {
		if kinds[k] == 0 {
			t.Errorf("no %s", k)
		}
	}
	if detectorPod == nil {
		t.Fatal("no detector Deployment")
	}
	selects := func(what string, sel *metav1.LabelSelector, target map[string]string) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(labels.Set(target)) {
			t.Errorf("%s: selector %v does not select %v (%v)", what, sel, target, err)
		}
	}
	for _, svc := range services {
		selects("Service "+svc.Name, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, detectorPod.Labels)
	}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *policyv1.PodDisruptionBudget:
			selects("PodDisruptionBudget "+v.Name, v.Spec.Selector, detectorPod.Labels)
		case *monitoringv1.ServiceMonitor:
			for _, svc := range services {
				selects("ServiceMonitor "+v.Name, &v.Spec.Selector, svc.Labels)
			}
		case *appsv1.Deployment:
			checkPod(t, "Deployment "+v.Name, &v.Spec.Template.Spec, configMaps)
			checkProbes(t, "Deployment "+v.Name, v.Spec.Template.Spec.Containers, "/readyz")
			if why := admitted(psapi.LevelRestricted, &v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec); why != "" {
				t.Errorf("Deployment %s: Pod Security \"restricted\" refuses its pods: %s", v.Name, why)
			}
		case *batchv1.Job:
			checkPod(t, "Job "+v.Name, &v.Spec.Template.Spec, configMaps)
			if why := admitted(psapi.LevelRestricted, &v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec); why != "" {
				t.Errorf("Job %s: Pod Security \"restricted\" refuses its pods: %s", v.Name, why)
			}
		case *corev1.Pod:
			checkPod(t, "Pod "+v.Name, &v.Spec, configMaps)
			checkProbes(t, "Pod "+v.Name, longRunning(&v.Spec), "")
			checkLogBound(t, v, configMaps)
			checkProfilerPlugin(t, "Pod "+v.Name, &v.Spec, configMaps, set.pluginMode)
			why := admitted(psapi.LevelBaseline, &v.ObjectMeta, &v.Spec)
			switch {
			case set.trainingPodDenied == "" && why != "":
				t.Errorf("Pod %s: Pod Security \"baseline\" refuses it: %s", v.Name, why)
			case set.trainingPodDenied != "" && !strings.Contains(why, set.trainingPodDenied):
				t.Errorf("Pod %s: Pod Security \"baseline\" says %q, want a refusal for %s", v.Name, why, set.trainingPodDenied)
			}
			if v.Labels["ncclwatch.io/scrape-job"] == "" || v.Labels["ncclwatch.io/job"] == "" {
				t.Errorf("Pod %s: labels %v lack ncclwatch.io/job or ncclwatch.io/scrape-job", v.Name, v.Labels)
			}
		case *monitoringv1.PrometheusRule:
			if !reflect.DeepEqual(v.Spec, rulesFileSpec(t)) {
				t.Errorf("PrometheusRule %s differs from %s: run make k8s-manifests", v.Name, rulesFile)
			}
		}
	}
	checkCredentials(t, objs, configMaps)
	checkRBAC(t, objs)
	// The training container gets exactly the NCCL settings the docs name.
	nccl, ok := configMaps["ncclwatch-nccl"]
	if !ok {
		t.Fatal("no ConfigMap ncclwatch-nccl")
	}
	wantEnv := map[string]string{"NCCL_DEBUG": set.ncclDebug,
		"NCCL_DEBUG_FILE": "/var/log/nccl/nccl.%h.%p.log", "NCCL_DEBUG_TIMESTAMP_LEVELS": "ALL",
		"NCCL_DEBUG_TIMESTAMP_FORMAT": "[%F %T.%6f] "}
	if set.ncclDebug == "INFO" {
		wantEnv["NCCL_DEBUG_SUBSYS"] = "INIT,COLL,NET" // WARN ignores it
	}
	if set.pluginMode {
		// Paths: checkProfilerPlugin checks that the pod's volumes serve them.
		wantEnv["NCCL_PROFILER_PLUGIN"] = nccl.Data["NCCL_PROFILER_PLUGIN"]
		wantEnv["NCCLWATCH_PROFILER_DIR"] = nccl.Data["NCCLWATCH_PROFILER_DIR"]
		if path.Base(wantEnv["NCCL_PROFILER_PLUGIN"]) != pluginFile || !path.IsAbs(wantEnv["NCCLWATCH_PROFILER_DIR"]) {
			t.Errorf("ConfigMap ncclwatch-nccl: NCCL_PROFILER_PLUGIN %q, NCCLWATCH_PROFILER_DIR %q: want an absolute path to %s and a directory",
				wantEnv["NCCL_PROFILER_PLUGIN"], wantEnv["NCCLWATCH_PROFILER_DIR"], pluginFile)
		}
		if sc := configMaps["ncclwatch-sidecar"]; sc == nil || sc.Data["NCCLWATCH_PROFILER_DIR"] != wantEnv["NCCLWATCH_PROFILER_DIR"] {
			t.Errorf("ConfigMap ncclwatch-sidecar does not point the sidecar at the plugin's files (%s)", wantEnv["NCCLWATCH_PROFILER_DIR"])
		}
	} else if sc := configMaps["ncclwatch-sidecar"]; sc != nil && sc.Data["NCCLWATCH_PROFILER_DIR"] != "" {
		t.Errorf("ConfigMap ncclwatch-sidecar names profiler files %q without plugin mode", sc.Data["NCCLWATCH_PROFILER_DIR"])
	}
	if !reflect.DeepEqual(nccl.Data, wantEnv) {
		t.Errorf("ConfigMap ncclwatch-nccl holds %q, want %q", nccl.Data, wantEnv)
	}
}

// pluginFile is the plugin's file name (profiler/README.md, watchdog install-plugin).
const pluginFile = "libnccl-profiler-ncclwatch.so"

// checkProfilerPlugin: in plugin mode an init container of the watchdog image runs
// `install-plugin DIR` into a volume the trainer mounts read-only at DIR, where its
// NCCL_PROFILER_PLUGIN points; the trainer's NCCLWATCH_PROFILER_DIR is a memory-backed
// volume that the sidecar mounts read-only at the path it is told. Without plugin mode the
// pod has none of it.
func checkProfilerPlugin(t *testing.T, where string, spec *corev1.PodSpec, configMaps map[string]*corev1.ConfigMap, pluginMode bool) {
	t.Helper()
	var trainer, sidecar, install *corev1.Container
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		switch {
		case c.Name == "ncclwatch-sidecar":
			sidecar = c
		case len(c.Args) > 0 && c.Args[0] == "install-plugin":
			if c.RestartPolicy != nil {
				t.Errorf("%s: init container %s has restartPolicy %s: it must finish before the trainer starts", where, c.Name, *c.RestartPolicy)
			}
			install = c
		}
	}
	for i := range spec.Containers {
		switch c := &spec.Containers[i]; c.Name {
		case "trainer":
			trainer = c
		case "ncclwatch-sidecar":
			sidecar = c
		}
	}
	if trainer == nil || sidecar == nil {
		t.Fatalf("%s: no trainer or no ncclwatch-sidecar container", where)
	}
	trainerEnv, sidecarEnv := containerEnv(trainer, configMaps), containerEnv(sidecar, configMaps)
	so := trainerEnv["NCCL_PROFILER_PLUGIN"]
	if !pluginMode {
		if install != nil || so != "" {
			t.Errorf("%s: no plugin mode, yet an install container (%v) or NCCL_PROFILER_PLUGIN %q", where, install != nil, so)
		}
		return
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	dir := path.Dir(so)
	switch {
	case install == nil:
		t.Errorf("%s: plugin mode without an init container running install-plugin", where)
	case install.Image != sidecar.Image:
		t.Errorf("%s: %s copies the plugin out of %s, not the watchdog image %s", where, install.Name, install.Image, sidecar.Image)
	case len(install.Args) != 2 || path.Clean(install.Args[1]) != dir:
		t.Errorf("%s: %s runs %v: want [install-plugin %s], the folder of NCCL_PROFILER_PLUGIN", where, install.Name, install.Args, dir)
	default:
		m := mountAt(install, dir)
		tm := mountAt(trainer, dir)
		if m == nil || m.ReadOnly || tm == nil || tm.Name != m.Name || !tm.ReadOnly || volumes[m.Name].EmptyDir == nil {
			t.Errorf("%s: the plugin folder %s: install container mount %+v, trainer mount %+v: want one emptyDir, written by the installer, read-only in the trainer", where, dir, m, tm)
		}
	}
	rd := trainerEnv["NCCLWATCH_PROFILER_DIR"]
	tm, sm := mountAt(trainer, rd), mountAt(sidecar, rd)
	if tm == nil || tm.ReadOnly || sm == nil || sm.Name != tm.Name || !sm.ReadOnly || sidecarEnv["NCCLWATCH_PROFILER_DIR"] != rd {
		t.Errorf("%s: the plugin's files at %s: trainer mount %+v, sidecar mount %+v and NCCLWATCH_PROFILER_DIR %q: want one volume, writable in the trainer, read-only in the sidecar at the same path",
			where, rd, tm, sm, sidecarEnv["NCCLWATCH_PROFILER_DIR"])
	} else if ed := volumes[tm.Name].EmptyDir; ed == nil || ed.Medium != corev1.StorageMediumMemory {
		t.Errorf("%s: volume %s for the plugin's files is not a memory-backed emptyDir", where, tm.Name)
	}
}

// containerEnv is a container's environment from its ConfigMaps and plain values.
func containerEnv(c *corev1.Container, configMaps map[string]*corev1.ConfigMap) map[string]string {
	env := map[string]string{}
	for _, e := range c.EnvFrom {
		if e.ConfigMapRef != nil && configMaps[e.ConfigMapRef.Name] != nil {
			for k, v := range configMaps[e.ConfigMapRef.Name].Data {
				env[e.Prefix+k] = v
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

// mountAt is the container's volume mount at exactly dir, or nil.
func mountAt(c *corev1.Container, dir string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if dir != "" && path.Clean(c.VolumeMounts[i].MountPath) == path.Clean(dir) {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// checkPod: every volume mount names a volume of the pod, every envFrom a ConfigMap of the
// release, and every container of ours has requests, limits and a locked-down
// securityContext.
func checkPod(t *testing.T, where string, spec *corev1.PodSpec, configMaps map[string]*corev1.ConfigMap) {
	t.Helper()
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		vols[v.Name] = true
	}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		cw := where + " container " + c.Name
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				t.Errorf("%s mounts volume %q, which the pod does not define", cw, m.Name)
			}
		}
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil && configMaps[e.ConfigMapRef.Name] == nil {
				t.Errorf("%s loads ConfigMap %q, which the release does not define", cw, e.ConfigMapRef.Name)
			}
		}
		if c.Name == "trainer" {
			continue // the user's container
		}
		if len(c.Resources.Requests) == 0 || len(c.Resources.Limits) == 0 {
			t.Errorf("%s: no requests or limits", cw)
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: securityContext %+v, want allowPrivilegeEscalation false and readOnlyRootFilesystem true", cw, sc)
		}
	}
}

// checkProbes: each of our containers has a liveness probe on /healthz (which never asks
// etcd); its readiness probe is on readyPath, or it has none when readyPath is empty (the
// sidecar: its readiness would be the training pod's, and it must not hang on etcd).
// Startup probes would gate the trainer on the sidecar: none.
// longRunning lists a pod's containers that run for its whole life: its containers and its
// native sidecars (init containers that restart always); an init container that runs to
// completion, such as the plugin installer, needs no probe.
func longRunning(spec *corev1.PodSpec) []corev1.Container {
	var out []corev1.Container
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return append(out, spec.Containers...)
}

func checkProbes(t *testing.T, where string, containers []corev1.Container, readyPath string) {
	t.Helper()
	path := func(p *corev1.Probe) string {
		if p == nil || p.HTTPGet == nil {
			return ""
		}
		return p.HTTPGet.Path
	}
	for _, c := range containers {
		if c.Name == "trainer" {
			continue
		}
		cw := where + " container " + c.Name
		if got := path(c.LivenessProbe); got != "/healthz" {
			t.Errorf("%s: liveness probe on %q, want /healthz (not tied to etcd)", cw, got)
		}
		switch got := path(c.ReadinessProbe); {
		case readyPath == "" && c.ReadinessProbe != nil:
			t.Errorf("%s: a readiness probe (%q) makes the training pod's readiness depend on the watchdog", cw, got)
		case readyPath != "" && got != readyPath:
			t.Errorf("%s: readiness probe on %q, want %s", cw, got, readyPath)
		}
		if c.StartupProbe != nil {
			t.Errorf("%s: a startup probe", cw)
		}
	}
}

// checkLogBound: the training pod's log volume holds every rank's bounded log (ranks x (the
// sidecar's NCCLWATCH_LOG_KEEP_MIB + a 16 MiB header + 1 MiB of writes between two rounds)
// fits its sizeLimit), the sidecar may write the logs (to free what it read), and the
// trainer runs as the sidecar's user (NCCL creates its logs mode 0644).
func checkLogBound(t *testing.T, pod *corev1.Pod, configMaps map[string]*corev1.ConfigMap) {
	t.Helper()
	var sidecar, trainer *corev1.Container
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			switch cs[i].Name {
			case "ncclwatch-sidecar":
				sidecar = &cs[i]
			case "trainer":
				trainer = &cs[i]
			}
		}
	}
	if sidecar == nil || trainer == nil {
		t.Fatalf("Pod %s: no sidecar or trainer container", pod.Name)
	}
	var keep string
	for _, e := range sidecar.EnvFrom {
		if e.ConfigMapRef == nil {
			continue
		}
		if cm := configMaps[e.ConfigMapRef.Name]; cm != nil && cm.Data["NCCLWATCH_LOG_KEEP_MIB"] != "" {
			keep = cm.Data["NCCLWATCH_LOG_KEEP_MIB"]
		}
	}
	keepMiB, err := strconv.ParseInt(keep, 10, 64)
	if err != nil || keepMiB <= 0 {
		t.Errorf("Pod %s: the sidecar's NCCLWATCH_LOG_KEEP_MIB is %q: its logs are not bounded", pod.Name, keep)
		return
	}
	gpus := trainer.Resources.Limits[corev1.ResourceName("nvidia.com/gpu")]
	ranks := gpus.Value()
	for _, v := range pod.Spec.Volumes {
		if v.Name != "nccl-logs" {
			continue
		}
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil {
			t.Errorf("Pod %s: volume nccl-logs is not an emptyDir with a sizeLimit", pod.Name)
			continue
		}
		need := ranks * (keepMiB + 16 + 1) << 20
		if limit := v.EmptyDir.SizeLimit.Value(); need > limit {
			t.Errorf("Pod %s: %d ranks x (%d MiB kept + header + a round) = %d MiB, over the log volume's %s",
				pod.Name, ranks, keepMiB, need>>20, v.EmptyDir.SizeLimit.String())
		}
	}
	for _, m := range sidecar.VolumeMounts {
		if m.Name == "nccl-logs" && m.ReadOnly {
			t.Errorf("Pod %s: the sidecar mounts the logs read-only: it cannot free what it read", pod.Name)
		}
	}
	uid := func(c *corev1.Container) int64 {
		if c.SecurityContext == nil || c.SecurityContext.RunAsUser == nil {
			return -1
		}
		return *c.SecurityContext.RunAsUser
	}
	if uid(trainer) != uid(sidecar) {
		t.Errorf("Pod %s: trainer runs as %d, sidecar as %d: the sidecar cannot free the trainer's logs", pod.Name, uid(trainer), uid(sidecar))
	}
}

// rulesFileSpec is the rule file decoded strictly as the PrometheusRule's spec.
func rulesFileSpec(t *testing.T) monitoringv1.PrometheusRuleSpec {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		t.Fatalf("%s as a PrometheusRule spec: %v", rulesFile, err)
	}
	return spec
}

// TestExamples: the example alert routing parses, and the shell scripts are valid.
func TestExamples(t *testing.T) {
	if _, err := alert.LoadConfig("examples/alerts.yaml"); err != nil {
		t.Error(err)
	}
	scripts, _ := filepath.Glob("slurm/*.sh")
	scripts = append(scripts, "tools/install-prometheus.sh")
	for _, s := range scripts {
		shell := "sh"
		if b, err := os.ReadFile(s); err == nil && strings.HasPrefix(string(b), "#!/bin/bash") {
			shell = "bash"
		}
		if out, err := exec.Command(shell, "-n", s).CombinedOutput(); err != nil {
			t.Errorf("%s -n %s: %v\n%s", shell, s, err, out)
		}
		if st, err := os.Stat(s); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable", s)
		}
	}
}
