package doctor

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/alert"
	"github.com/ncclwatch/watchdog/internal/etcdconn"
	"github.com/ncclwatch/watchdog/internal/etcdembed"
	"github.com/ncclwatch/watchdog/internal/etcdroles"
	"github.com/ncclwatch/watchdog/internal/etcdtest"
	"github.com/ncclwatch/watchdog/internal/procstat"
	"github.com/ncclwatch/watchdog/snapshot"
)

// expect checks that results hold a line of each level with each text, and nothing worse
// than worst.
func expect(t *testing.T, rs []Result, worst Level, want ...string) {
	t.Helper()
	var b bytes.Buffer
	if err := Report(rs).Write(&b); err != nil {
		t.Fatal(err)
	}
	if got := Report(rs).Worst(); got != worst {
		t.Errorf("worst %s, want %s:\n%s", got, worst, b.String())
	}
	for _, w := range want {
		if !strings.Contains(b.String(), w) {
			t.Errorf("report lacks %q:\n%s", w, b.String())
		}
	}
}

var goodLogsEnv = map[string]string{"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL,NET",
	"NCCL_DEBUG_FILE": "/var/log/nccl/nccl.%h.%p.log", "NCCL_DEBUG_TIMESTAMP_LEVELS": "ALL",
	"NCCL_DEBUG_TIMESTAMP_FORMAT": "[%F %T.%6f] "}

func with(env map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "<unset>" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

func TestNCCLLogsMode(t *testing.T) {
	globs := []string{"/var/log/nccl/*.log"}
	for _, c := range []struct {
		name  string
		env   map[string]string
		globs []string
		worst Level
		want  []string
	}{
		{"as the chart sets it", goodLogsEnv, globs, OK, []string{"NCCL_DEBUG=INFO", "which the sidecar's --logs follows"}},
		{"warn level, no plugin", with(goodLogsEnv, "NCCL_DEBUG", "WARN"), globs, Fail, []string{"sees no collective", "fix: NCCL_DEBUG=INFO"}},
		{"subsystems unset", with(goodLogsEnv, "NCCL_DEBUG_SUBSYS", "<unset>"), globs, Fail, []string{"NCCL's default (INIT,BOOTSTRAP,ENV) prints no collective"}},
		{"COLL excluded", with(goodLogsEnv, "NCCL_DEBUG_SUBSYS", "^COLL"), globs, Fail, []string{"leaves out COLL"}},
		{"all but proxy", with(goodLogsEnv, "NCCL_DEBUG_SUBSYS", "^PROXY"), globs, OK, nil},
		{"ALL", with(goodLogsEnv, "NCCL_DEBUG_SUBSYS", "ALL"), globs, Warn, []string{"volume the rules do not use"}},
		{"no NET", with(goodLogsEnv, "NCCL_DEBUG_SUBSYS", "init,coll"), globs, Warn, []string{"without NET"}},
		{"one file for all", with(goodLogsEnv, "NCCL_DEBUG_FILE", "/var/log/nccl/nccl.log"), globs, Fail, []string{"has no %p"}},
		{"no file", with(goodLogsEnv, "NCCL_DEBUG_FILE", "<unset>"), globs, Fail, []string{"writes its lines to the job's stdout"}},
		{"elsewhere than the sidecar reads", with(goodLogsEnv, "NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p.log"), globs, Fail,
			[]string{"/tmp/nccl.node0.12345.log", "does not match"}},
		{"no host in the name", with(goodLogsEnv, "NCCL_DEBUG_FILE", "/var/log/nccl/nccl.%p.log"), globs, Warn, []string{"has no %h"}},
		{"no timestamps", with(goodLogsEnv, "NCCL_DEBUG_TIMESTAMP_LEVELS", "<unset>"), nil, Warn, []string{"about 10 ms off"}},
		{"whole seconds", with(goodLogsEnv, "NCCL_DEBUG_TIMESTAMP_FORMAT", "[%F %T] "), nil, Warn, []string{"whole seconds only"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			expect(t, NCCL(NCCLCheck{Env: c.env, Source: "test", LogGlobs: c.globs}), c.worst, c.want...)
		})
	}
}

// TestNCCLPluginMode: the plugin is found as NCCL finds it (a path, or a name in
// LD_LIBRARY_PATH), and must be a profiler plugin built for this machine.
func TestNCCLPluginMode(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "libnccl-profiler-text.so")
	os.WriteFile(notELF, []byte("not a library"), 0o644)
	env := with(goodLogsEnv, "NCCL_DEBUG", "WARN", "NCCLWATCH_PROFILER_DIR", "/run/ncclwatch")
	expect(t, NCCL(NCCLCheck{Env: with(env, "NCCL_PROFILER_PLUGIN", filepath.Join(dir, "missing.so")), Source: "test"}), Fail, "not found")
	expect(t, NCCL(NCCLCheck{Env: with(env, "NCCL_PROFILER_PLUGIN", "text", "LD_LIBRARY_PATH", dir), Source: "test"}), Fail, "not an ELF shared object")

	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to build the plugin")
	}
	so := filepath.Join(dir, "libnccl-profiler-ncclwatch.so")
	if out, err := exec.Command(gcc, "-std=gnu11", "-O0", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread", "-o", so, "../../profiler/plugin.c", "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("build the plugin: %v\n%s", err, out)
	}
	expect(t, NCCL(NCCLCheck{Env: with(env, "NCCL_PROFILER_PLUGIN", "ncclwatch", "LD_LIBRARY_PATH", "/nowhere:"+dir), Source: "test"}), OK,
		"loads here: exports ncclProfiler_v", "/run/ncclwatch")
	expect(t, NCCL(NCCLCheck{Env: with(env, "NCCL_PROFILER_PLUGIN", so, "NCCLWATCH_PROFILER_DIR", "<unset>"), Source: "test"}), Warn,
		"NCCLWATCH_PROFILER_DIR is unset")
	if runtime.GOARCH == "amd64" {
		foreign := filepath.Join(dir, "foreign.so")
		b, _ := os.ReadFile(so)
		b[18] = 0xb7 // e_machine: EM_AARCH64
		os.WriteFile(foreign, b, 0o644)
		expect(t, NCCL(NCCLCheck{Env: with(env, "NCCL_PROFILER_PLUGIN", foreign), Source: "test"}), Fail, "built for EM_AARCH64")
	}
}

func TestReadEnviron(t *testing.T) {
	dir := t.TempDir()
	nul := filepath.Join(dir, "environ")
	os.WriteFile(nul, []byte("NCCL_DEBUG=INFO\x00PATH=/bin\x00EMPTY=\x00"), 0o600)
	lines := filepath.Join(dir, "env")
	os.WriteFile(lines, []byte("# from srun\nexport NCCL_DEBUG=\"INFO\"\nNCCL_DEBUG_FILE='/x/%h.%p'\n"), 0o600)
	for path, want := range map[string]map[string]string{nul: {"NCCL_DEBUG": "INFO", "PATH": "/bin", "EMPTY": ""},
		lines: {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/x/%h.%p"}} {
		env, err := ReadEnviron(path)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s: %s=%q, want %q", path, k, env[k], v)
			}
		}
	}
}

func TestAlerts(t *testing.T) {
	env := func(kv map[string]string) alert.BuildOptions {
		return alert.BuildOptions{LookupEnv: func(k string) (string, bool) { v, ok := kv[k]; return v, ok }}
	}
	pd := &alert.Config{Notifiers: []alert.NotifierConfig{{Name: "pagerduty", Type: "pagerduty"}}}
	expect(t, Alerts(pd, "alerts.yaml", env(nil)), Fail, `"pagerduty" cannot be built`, "PAGERDUTY_ROUTING_KEY")
	expect(t, Alerts(pd, "alerts.yaml", env(map[string]string{"PAGERDUTY_ROUTING_KEY": "0123456789abcdef0123456789abcdef"})), OK, `notifier "pagerduty" (pagerduty) builds`)
	expect(t, Alerts(&alert.Config{}, "the environment", env(nil)), Warn, "nobody is paged")
	bad := &alert.Config{Notifiers: []alert.NotifierConfig{{Name: "x", Type: "carrier-pigeon"}}}
	expect(t, Alerts(bad, "alerts.yaml", env(nil)), Fail, "unknown type")
}

// TestEtcd: against a real etcd with the watchdog's roles: each component's credentials
// pass for their role, a sidecar given the detector's credentials is told it can read the
// incident key, and an unreachable or auth-less etcd is named.
func TestEtcd(t *testing.T) {
	ctx := context.Background()
	addr, err := procstat.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	expect(t, Etcd(ctx, EtcdCheck{Config: etcdconn.Config{Endpoints: []string{"http://" + addr}}}), Fail, "nothing listens there")

	srv, err := etcdembed.Start(t.Context(), etcdembed.Options{ClientAddr: addr, Logger: slog.New(slog.DiscardHandler), BcryptCost: 4 /* bcrypt.MinCost: fast under -race */})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	expect(t, Etcd(ctx, EtcdCheck{Config: etcdconn.Config{Endpoints: srv.Endpoints()}}), Warn, "authentication is off", "etcd-roles --apply --enable-auth")

	plan, _ := etcdroles.NewPlan(nil)
	perJob, _ := etcdroles.NewPlan([]string{"llama"})
	// A sidecar role that lets it write node keys but not their bases: its publisher's
	// transactions would all be refused.
	nodesOnly := etcdroles.Role{Name: "sidecar-nodes-only", Why: "test",
		Perms: []etcdroles.Perm{{Type: "write", Key: snapshot.NodeKey("llama", ""), Prefix: true}}}
	plan.Roles = append(plan.Roles, perJob.Roles[1], nodesOnly)
	dir := t.TempDir()
	pw := map[string]string{}
	for _, u := range []string{etcdroles.Detector, etcdroles.Sidecar, perJob.Roles[1].Name, nodesOnly.Name} {
		pw[u] = u + "-pw"
		os.WriteFile(filepath.Join(dir, u), []byte(pw[u]), 0o600)
	}
	admin, err := etcdconn.New(etcdconn.Config{Endpoints: srv.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := plan.Apply(actx, admin, pw); err != nil {
		t.Fatal(err)
	}
	if err := etcdroles.EnableAuth(actx, admin, "root-pw"); err != nil {
		t.Fatal(err)
	}
	as := func(user, role string) EtcdCheck {
		return EtcdCheck{Config: etcdconn.Config{Endpoints: srv.Endpoints(), Username: user, PasswordFile: filepath.Join(dir, user)}, Role: role, Job: "llama"}
	}
	expect(t, Etcd(ctx, as(etcdroles.Detector, "detector")), OK, "authenticated as ncclwatch-detector by the password", "writes under /ncclwatch/v1/")
	expect(t, Etcd(ctx, as(etcdroles.Sidecar, "sidecar")), OK, "writes node keys and their bases of job llama", "least privilege")
	expect(t, Etcd(ctx, as(perJob.Roles[1].Name, "sidecar")), OK, "writes node keys and their bases of job llama", "least privilege")
	expect(t, Etcd(ctx, as(nodesOnly.Name, "sidecar")), Fail, "cannot write its node key", "and its base")
	expect(t, Etcd(ctx, as(etcdroles.Sidecar, "detector")), Fail, "cannot read /ncclwatch/v1/jobs/", "ncclwatch-detector")
	expect(t, Etcd(ctx, as(etcdroles.Detector, "sidecar")), Fail, "can read the detectors' incident key", "can write what the detectors decide with")
	wrong := filepath.Join(dir, "wrong")
	os.WriteFile(wrong, []byte("nope"), 0o600)
	c := as(etcdroles.Detector, "detector")
	c.Config.PasswordFile = wrong
	expect(t, Etcd(ctx, c), Fail, "the password of ncclwatch-detector in "+wrong+" was refused")
}

// TestEtcdSecured: doctor, on etcd 3.4 (no AuthStatus) as on the embedded etcd, with TLS,
// client certificates and auth, passes each part's own credentials (password, or the
// certificate alone) for its role, and fails a part given another's certificate.
func TestEtcdSecured(t *testing.T) {
	for _, backend := range etcdtest.Backends {
		t.Run(backend, func(t *testing.T) {
			e := etcdtest.StartSecured(t, backend, "llama")
			ctx := context.Background()
			check := func(cfg etcdconn.Config, role string) EtcdCheck {
				return EtcdCheck{Config: cfg, Role: role, Job: "llama"}
			}
			version := "etcd 3.7"
			if backend == "etcd 3.4" {
				version = "etcd 3.4."
			}
			expect(t, Etcd(ctx, check(e.Config(etcdroles.Detector), "detector")), OK, version, "authenticated as ncclwatch-detector by the password", "writes under /ncclwatch/v1/")
			expect(t, Etcd(ctx, check(e.CertOnly(etcdroles.Detector), "detector")), OK, "authenticated as ncclwatch-detector by the client certificate CN")
			for _, u := range []string{etcdroles.Sidecar, etcdroles.Sidecar + "-llama"} {
				expect(t, Etcd(ctx, check(e.Config(u), "sidecar")), OK, "authenticated as "+u+" by the password", "least privilege")
				expect(t, Etcd(ctx, check(e.CertOnly(u), "sidecar")), OK, "authenticated as "+u+" by the client certificate CN", "least privilege")
			}
			shared := e.Config(etcdroles.Sidecar)
			det := e.CertOnly(etcdroles.Detector)
			shared.CertFile, shared.KeyFile = det.CertFile, det.KeyFile
			expect(t, Etcd(ctx, check(shared, "sidecar")), Fail, "an etcd identity of its own")
		})
	}
}
