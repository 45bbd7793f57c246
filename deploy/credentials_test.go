package deploy_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/snapshot"
)

// Where the chart mounts a part's etcd credentials.
const (
	tlsMount  = "/etc/ncclwatch/etcd-tls"
	authMount = "/etc/ncclwatch/etcd-auth"
)

// etcdCredential is what one container of the manifests logs in to etcd with.
type etcdCredential struct {
	where string
	// part: detector, sidecar or etcd-roles (the hook Jobs); job: a sidecar's job label.
	part, job string
	// user is its --etcd-user ("" logs in by the client certificate alone); cert and
	// password are the Secrets mounted at tlsMount and authMount ("": none).
	user, cert, password string
	// cn is the certificate's CN where a cert-manager Certificate issues it ("" else).
	cn   string
	args []string
}

// identity is the etcd user the credential acts as: its user, else its certificate's CN.
func (c etcdCredential) identity() string {
	if c.user != "" {
		return c.user
	}
	return c.cn
}

// etcdCredentials lists the etcd credential of every container of ours in objs, and fails
// the test for a trainer container that mounts one.
func etcdCredentials(t *testing.T, objs []object, configMaps map[string]*corev1.ConfigMap) []etcdCredential {
	t.Helper()
	cns := map[string]string{}
	for _, o := range objs {
		if c, ok := o.obj.(*certmanagerv1.Certificate); ok {
			cns[c.Spec.SecretName] = c.Spec.CommonName
		}
	}
	var out []etcdCredential
	pod := func(where string, labels map[string]string, spec *corev1.PodSpec) {
		secrets := map[string]string{}
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				secrets[v.Name] = v.Secret.SecretName
			}
		}
		for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
			cred := etcdCredential{where: where + " container " + c.Name, part: labels["app.kubernetes.io/component"], job: labels["ncclwatch.io/job"], args: c.Args}
			for _, m := range c.VolumeMounts {
				switch m.MountPath {
				case tlsMount:
					cred.cert = secrets[m.Name]
				case authMount:
					cred.password = secrets[m.Name]
				}
			}
			if c.Name == "trainer" {
				if cred.cert != "" || cred.password != "" {
					t.Errorf("%s: the trainer mounts etcd credentials (%s %s)", cred.where, cred.cert, cred.password)
				}
				continue
			}
			if c.Name == "ncclwatch-sidecar" {
				cred.part = "sidecar"
			}
			cred.user = containerEnv(&c, configMaps)["NCCLWATCH_ETCD_USER"]
			for _, a := range c.Args {
				if u, ok := strings.CutPrefix(a, "--etcd-user="); ok {
					cred.user = u
				}
			}
			if cred.part == "detector" {
				cred.user, _ = detectorConfig(t, configMaps)["etcd_user"].(string)
			}
			if cred.cert != "" || cred.password != "" || cred.user != "" {
				cred.cn = cns[cred.cert]
				out = append(out, cred)
			}
		}
	}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			pod("Deployment "+v.Name, v.Spec.Template.Labels, &v.Spec.Template.Spec)
		case *batchv1.Job:
			pod("Job "+v.Name, v.Spec.Template.Labels, &v.Spec.Template.Spec)
		case *corev1.Pod:
			pod("Pod "+v.Name, v.Labels, &v.Spec)
		}
	}
	mounted := map[string]bool{}
	for _, c := range out {
		mounted[c.cert] = true
	}
	for _, o := range objs {
		if c, ok := o.obj.(*certmanagerv1.Certificate); ok && !mounted[c.Spec.SecretName] && c.Labels["app.kubernetes.io/component"] == "sidecar" {
			out = append(out, etcdCredential{where: "Certificate " + c.Name + " (no pod of the chart mounts it)", part: "sidecar",
				job: c.Labels["ncclwatch.io/job"], cert: c.Spec.SecretName, cn: c.Spec.CommonName})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

// detectorConfig is the detector's detector.yaml as rendered into its ConfigMap.
func detectorConfig(t *testing.T, configMaps map[string]*corev1.ConfigMap) map[string]any {
	t.Helper()
	for _, cm := range configMaps {
		if y, ok := cm.Data["detector.yaml"]; ok {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(y), &m); err != nil {
				t.Fatalf("ConfigMap %s detector.yaml: %v", cm.Name, err)
			}
			return m
		}
	}
	t.Fatal("no detector.yaml")
	return nil
}

// checkCredentials: one identity per part (docs/security.md#one-identity-per-part). No
// client certificate or password Secret is mounted by two parts, nor by the sidecars of
// two jobs; a certificate cert-manager issues has the CN of the user its part logs in as;
// a sidecar is never the detector nor root, and with a per-job role it is its own job's.
func checkCredentials(t *testing.T, objs []object, configMaps map[string]*corev1.ConfigMap) {
	t.Helper()
	owner := map[string]string{} // Secret -> part (and job)
	for _, c := range etcdCredentials(t, objs, configMaps) {
		who := c.part
		if c.part == "sidecar" {
			who += " of job " + c.job
		}
		for _, s := range []string{c.cert, c.password} {
			if s == "" {
				continue
			}
			// The shared sidecar role is one credential for every job, on purpose.
			key := who
			if c.part == "sidecar" && strings.HasPrefix(c.identity(), etcdroles.Sidecar) && c.identity() == etcdroles.Sidecar {
				key = c.part
			}
			if prev, ok := owner[s]; ok && prev != key {
				t.Errorf("%s: Secret %s is mounted by the %s and by the %s: one certificate for two parts", c.where, s, prev, key)
			}
			owner[s] = key
		}
		if c.cn != "" && c.user != "" && c.cn != c.user {
			t.Errorf("%s: logs in as %s with a certificate for CN %s (an identity of its own for requests without a token)", c.where, c.user, c.cn)
		}
		id := c.identity()
		switch c.part {
		case "sidecar":
			if id == etcdroles.Detector || id == "root" || id == detectorConfig(t, configMaps)["etcd_user"] {
				t.Errorf("%s: a training pod holds the %s's credential", c.where, id)
			}
			if id != "" && strings.HasPrefix(id, etcdroles.Sidecar+"-") && id != etcdroles.JobUser(c.job) {
				t.Errorf("%s: the sidecar of job %s logs in as %s", c.where, c.job, id)
			}
		case "etcd-roles":
			if c.user != "root" {
				t.Errorf("%s: the roles hook logs in as %q, want etcd's root", c.where, c.user)
			}
		}
	}
}

// watchdogBinary builds the watchdog once per test binary ($WATCHDOG_BIN if set).
func watchdogBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("WATCHDOG_BIN"); bin != "" {
		return bin
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ncclwatch-deploy-test")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "watchdog")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/watchdog").CombinedOutput(); err != nil {
			binErr = &buildError{err: err, out: string(out)}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// TestChartAndSlurmCredentials: every credential the Helm chart and the Slurm units create
// for sidecars, set up the way they set it up (the chart's hook Job run with its own
// arguments, as etcd's root; the Slurm controller prolog and a node's prolog), is refused
// the incident, page record, delivery, incident key, owner, heartbeat, election and outage
// keys, and may publish its own job's node key; the uninstall hook and the epilogs remove
// the per-job users. Against the embedded etcd and Debian's 3.4, with TLS, client
// certificates required and auth on.
func TestChartAndSlurmCredentials(t *testing.T) {
	helmBinary(t) // skips without helm
	bin := watchdogBinary(t)
	renders := []struct {
		name string
		args []string
	}{
		{"chart: per-job sidecars (values-production)", []string{"-f", productionValues, "--set", "examplePod.enabled=true,sidecar.jobs={llama-train,gpt-pretrain}"}},
		{"chart: the shared sidecar role", []string{"--set", "examplePod.enabled=true,etcd.endpoints[0]=https://e:2379," +
			"etcd.tls.enabled=true,etcd.tls.certManager.enabled=true,etcd.tls.certManager.issuerRef.name=ca," +
			"etcd.auth.user=ncclwatch-detector,etcd.auth.passwordSecret.name=pw,sidecar.etcdRole=shared," +
			"etcd.auth.sidecar.user=ncclwatch-sidecar,etcd.auth.sidecar.passwordSecret.name=spw"}},
	}
	for _, backend := range etcdtest.Backends {
		t.Run(backend, func(t *testing.T) {
			e := etcdtest.StartSecured(t, backend)
			for _, r := range renders {
				t.Run(r.name, func(t *testing.T) {
					objs := decodeStrict(t, helmTemplate(t, r.args...))
					configMaps := map[string]*corev1.ConfigMap{}
					for _, o := range objs {
						if cm, ok := o.obj.(*corev1.ConfigMap); ok {
							configMaps[cm.Name] = cm
						}
					}
					creds := etcdCredentials(t, objs, configMaps)
					for _, c := range creds {
						t.Logf("%s: part %s job %q user %q cn %q cert %q password %q", c.where, c.part, c.job, c.user, c.cn, c.cert, c.password)
					}
					var hooks, sidecars []etcdCredential
					for _, c := range creds {
						switch c.part {
						case "etcd-roles":
							hooks = append(hooks, c)
						case "sidecar":
							sidecars = append(sidecars, c)
						}
					}
					if len(sidecars) == 0 {
						t.Fatal("no sidecar credential rendered")
					}
					// Install: the hook Job that applies (pre-install), as rendered.
					for _, h := range hooks {
						if strings.Contains(strings.Join(h.args, " "), "--apply") {
							runHook(t, e, bin, h)
						}
					}
					jobs := map[string]bool{}
					for _, c := range sidecars {
						jobs[c.job] = true
						checkSidecarCredential(t, e, c)
					}
					if strings.Contains(r.name, "per-job") {
						for _, j := range []string{"llama-train", "gpt-pretrain"} {
							if len(hooks) == 0 || !strings.Contains(strings.Join(hooks[0].args, " "), j) {
								t.Errorf("the roles hook does not create job %s's role: %v", j, hooks)
							}
						}
					}
					// Uninstall: the post-delete Job; a per-job sidecar is refused from then on.
					for _, h := range hooks {
						if strings.Contains(strings.Join(h.args, " "), "--remove") {
							runHook(t, e, bin, h)
							for _, c := range sidecars {
								e.RefusesDetectorKeys(t, c.where+" after uninstall", sidecarConfig(t, e, c), c.job, e.DetectorKeys(t, c.job), etcdtest.Reach{})
							}
						}
					}
				})
			}
			t.Run("slurm", func(t *testing.T) { checkSlurmCredentials(t, e, bin) })
		})
	}
}

// sidecarConfig is how the sidecar of c connects to e: its certificate is one for the CN
// the chart's Certificate names, its password the user's.
func sidecarConfig(t *testing.T, e *etcdtest.Secured, c etcdCredential) etcdconn.Config {
	t.Helper()
	if c.cn == "" {
		t.Fatalf("%s: no Certificate issues its client certificate %q", c.where, c.cert)
	}
	cfg := e.CertOnly(c.cn)
	if c.user != "" {
		if c.password == "" {
			t.Fatalf("%s: user %s without a password Secret", c.where, c.user)
		}
		cfg.Username, cfg.PasswordFile = c.user, e.PasswordFile(c.user)
	}
	return cfg
}

// checkSidecarCredential: the sidecar credential c reaches no detector key and publishes
// its own job's node key; so does its certificate alone.
func checkSidecarCredential(t *testing.T, e *etcdtest.Secured, c etcdCredential) {
	t.Helper()
	keys := e.DetectorKeys(t, c.job)
	want := etcdtest.Reach{Publishes: true, AnyJob: c.identity() == etcdroles.Sidecar}
	cfg := sidecarConfig(t, e, c)
	e.RefusesDetectorKeys(t, c.where+" as "+c.identity(), cfg, c.job, keys, want)
	if c.user != "" {
		certOnly := cfg
		certOnly.Username, certOnly.PasswordFile = "", ""
		e.RefusesDetectorKeys(t, c.where+" by its certificate alone", certOnly, c.job, keys, want)
	}
}

// runHook runs the watchdog with a hook container's arguments, its mounted files
// replaced by e's: the CA, a certificate for the CN its Certificate names, the user's
// password file; its endpoints by e's.
func runHook(t *testing.T, e *etcdtest.Secured, bin string, h etcdCredential) {
	t.Helper()
	if h.cn == "" || h.cn != h.user {
		t.Fatalf("%s: logs in as %q with a certificate for CN %q", h.where, h.user, h.cn)
	}
	pair := e.CertOnly(h.cn)
	files := map[string]string{tlsMount + "/ca.crt": e.CAFile, tlsMount + "/tls.crt": pair.CertFile,
		tlsMount + "/tls.key": pair.KeyFile, authMount + "/password": e.PasswordFile(h.user)}
	var args []string
	for _, a := range h.args {
		name, val, ok := strings.Cut(a, "=")
		switch {
		case ok && name == "--etcd-endpoints":
			val = strings.Join(e.Endpoints, ",")
		case ok && files[val] != "":
			val = files[val]
		case ok && strings.HasPrefix(val, "/etc/ncclwatch/"):
			t.Fatalf("%s: %s names %s, which the test does not know", h.where, name, val)
		}
		if ok {
			a = name + "=" + val
		}
		args = append(args, a)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: watchdog %s: %v\n%s", h.where, strings.Join(args, " "), err, out)
	}
}

// cleanEnv is the test's environment without NCCLWATCH_* settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NCCLWATCH_") {
			env = append(env, kv)
		}
	}
	return env
}

// checkSlurmCredentials: the controller prolog creates the job's user, the node prolog
// hands the sidecar its derived password with the node's certificate (whose CN names no
// etcd user); that credential and that certificate alone reach no detector key; the
// epilogs remove the password file and the user.
func checkSlurmCredentials(t *testing.T, e *etcdtest.Secured, bin string) {
	dir := t.TempDir()
	key := filepath.Join(dir, "job-password.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("k", 48)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := e.CertOnly("ncclwatch-node")
	root := e.Config("root")
	conf := writeConf(t, dir, "NCCLWATCH_BIN="+bin, "NCCLWATCH_SUPERVISOR=background",
		"NCCLWATCH_RUN_DIR="+dir+"/run", "NCCLWATCH_LOG_ROOT="+dir+"/logs", "NCCLWATCH_STATE_ROOT="+dir+"/state",
		"NCCLWATCH_ETCD_ENDPOINTS="+strings.Join(e.Endpoints, ","), "NCCLWATCH_ETCD_CA_FILE="+e.CAFile,
		"NCCLWATCH_ETCD_CERT_FILE="+node.CertFile, "NCCLWATCH_ETCD_KEY_FILE="+node.KeyFile,
		"NCCLWATCH_JOB_PASSWORD_KEY="+key, "NCCLWATCH_ROLES_ETCD_PASSWORD_FILE="+root.PasswordFile,
		"NCCLWATCH_ROLES_ETCD_CERT_FILE="+root.CertFile, "NCCLWATCH_ROLES_ETCD_KEY_FILE="+root.KeyFile,
		"NCCLWATCH_HTTP_PORT=0")
	const job = "4242"
	env := append(cleanEnv(), "NCCLWATCH_CONF="+conf, "SLURM_JOB_ID="+job, "SLURMD_NODENAME=n1", "SLURM_JOB_UID=")
	run := func(script string) string {
		t.Helper()
		cmd := exec.Command("bash", script)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return string(out)
	}
	if out := run("slurm/prolog-slurmctld.sh"); !strings.Contains(out, "ncclwatch-sidecar-"+job+" created") {
		t.Fatalf("prolog-slurmctld.sh:\n%s", out)
	}
	run("slurm/prolog.sh")
	pidFile := filepath.Join(dir, "run", job+".n1.pid")
	t.Cleanup(func() {
		if _, err := os.Stat(pidFile); err == nil {
			stopBackground(t, pidFile)
		}
	})
	// The sidecar the prolog started publishes with the job's credential.
	det := e.Client(t, e.Config(etcdroles.Detector))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r, err := det.Get(t.Context(), snapshot.NodeKey(job, "n1"))
		if err == nil && len(r.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "run", job+".n1.log"))
			t.Fatalf("the Slurm sidecar of job %s published nothing in 20 s (%v):\n%s", job, err, log)
		}
	}
	// It says which identity etcd took, and the node's certificate is no problem.
	sidecarLog := filepath.Join(dir, "run", job+".n1.log")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		log, _ := os.ReadFile(sidecarLog)
		if strings.Contains(string(log), `"msg":"etcd identity"`) {
			if !strings.Contains(string(log), "authenticated as "+etcdroles.JobUser(job)+" by the password; the client certificate's CN") ||
				strings.Contains(string(log), `"level":"ERROR"`) {
				t.Errorf("the Slurm sidecar's log:\n%s", log)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no identity line in the Slurm sidecar's log:\n%s", log)
		}
	}
	sidecarEnv := readEnvFile(t, filepath.Join(dir, "run", job+".n1.env"))
	for _, k := range []string{"NCCLWATCH_JOB_PASSWORD_KEY", "NCCLWATCH_ROLES_ETCD_PASSWORD_FILE", "NCCLWATCH_ROLES_ETCD_CERT_FILE"} {
		if _, ok := sidecarEnv[k]; ok {
			t.Errorf("the sidecar's environment holds %s", k)
		}
	}
	cfg := etcdconn.Config{Endpoints: e.Endpoints, CAFile: sidecarEnv["NCCLWATCH_ETCD_CA_FILE"],
		CertFile: sidecarEnv["NCCLWATCH_ETCD_CERT_FILE"], KeyFile: sidecarEnv["NCCLWATCH_ETCD_KEY_FILE"],
		Username: sidecarEnv["NCCLWATCH_ETCD_USER"], PasswordFile: sidecarEnv["NCCLWATCH_ETCD_PASSWORD_FILE"]}
	if cfg.Username != etcdroles.JobUser(job) {
		t.Fatalf("the sidecar logs in as %q, want %s\n%v", cfg.Username, etcdroles.JobUser(job), sidecarEnv)
	}
	keys := e.DetectorKeys(t, job)
	e.RefusesDetectorKeys(t, "the Slurm sidecar of job "+job, cfg, job, keys, etcdtest.Reach{Publishes: true})
	certOnly := cfg
	certOnly.Username, certOnly.PasswordFile = "", ""
	e.RefusesDetectorKeys(t, "the Slurm node's certificate alone", certOnly, job, keys, etcdtest.Reach{})
	stopBackground(t, pidFile)
	run("slurm/epilog.sh")
	if _, err := os.Stat(cfg.PasswordFile); err == nil {
		t.Errorf("the epilog left %s", cfg.PasswordFile)
	}
	if out := run("slurm/epilog-slurmctld.sh"); !strings.Contains(out, "removed") {
		t.Fatalf("epilog-slurmctld.sh:\n%s", out)
	}
	cli := e.Client(t, certOnly)
	if _, err := cli.Auth.Authenticate(t.Context(), etcdroles.JobUser(job), etcdroles.JobPassword([]byte(strings.Repeat("k", 48)), job)); err == nil {
		t.Error("the job's user logs in after the controller's epilog")
	}
}

// readEnvFile reads NAME=value lines.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env
}

// stopBackground stops the sidecar the prolog started in the background and drops its pid
// file (a zombie no init reaps would keep the epilog waiting).
func stopBackground(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	waitBackground(t, pidFile)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

type buildError struct {
	err error
	out string
}

func (b *buildError) Error() string {
	return "go build ./cmd/watchdog: " + b.err.Error() + "\n" + b.out
}
