package deploy_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	dockerfile       = "docker/Dockerfile"
	dockerignoreFile = "docker/Dockerfile.dockerignore"
)

// instruction is one Dockerfile instruction, continuation lines joined; stage counts the
// FROMs before it (-1: before the first, where only ARG may stand).
type instruction struct {
	cmd, args string
	stage     int
}

func readDockerfile(t *testing.T) []instruction {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	stage := -1
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, instruction{cmd: cmd, args: strings.TrimSpace(args), stage: stage})
	}
	return out
}

var (
	dockerVar   = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
	pluginRule  = regexp.MustCompile(`\bmake BIN=/out/lib/ncclwatch /out/lib/ncclwatch/libnccl-profiler-ncclwatch\.so\b`)
	dockerLabel = regexp.MustCompile(`([A-Za-z0-9_.\-]+)=("(?:[^"\\]|\\.)*"|\S+)`)
)

// TestDockerImage: the image carries OCI labels with its version and revision, the binary
// gets them through -X (main.version and main.revision), every build argument a stage
// uses is declared in that stage (an ARG does not cross FROM), and the profiler plugin,
// built by the Makefile's rule (its flags), lands where `watchdog install-plugin` looks:
// ../lib/ncclwatch/ from the binary.
func TestDockerImage(t *testing.T) {
	ins := readDockerfile(t)
	last := ins[len(ins)-1].stage
	declared := map[int]map[string]bool{}
	labels := map[string]string{}
	var goBuild, binDir string
	copiesPluginDir, buildsPlugin := false, false
	for _, in := range ins {
		if declared[in.stage] == nil {
			declared[in.stage] = map[string]bool{}
		}
		switch in.cmd {
		case "ARG", "ENV":
			name, _, _ := strings.Cut(in.args, "=")
			declared[in.stage][strings.Fields(name)[0]] = true
			continue
		case "LABEL":
			if in.stage != last {
				t.Errorf("LABEL in build stage %d: only the final stage's labels reach the image", in.stage)
			}
			for _, m := range dockerLabel.FindAllStringSubmatch(in.args, -1) {
				labels[m[1]] = strings.Trim(m[2], `"`)
			}
		case "RUN":
			if strings.Contains(in.args, "go build") && strings.Contains(in.args, "./cmd/watchdog") {
				goBuild = in.args
			}
			if in.stage != last && pluginRule.MatchString(in.args) {
				buildsPlugin = true
			}
		case "COPY":
			f := strings.Fields(in.args)
			if in.stage == last && len(f) > 1 && slices.Contains(f, "--from=build") {
				switch dst := f[len(f)-1]; {
				case slices.Contains(f, "/out/bin/watchdog"):
					binDir = strings.TrimSuffix(dst, "/")
					if !strings.HasSuffix(dst, "/") {
						binDir = path.Dir(dst)
					}
				case dst == "/usr/local/lib/ncclwatch/" && slices.Contains(f, "/out/lib/ncclwatch/"):
					copiesPluginDir = true
				}
			}
		default:
			continue
		}
		for _, m := range dockerVar.FindAllStringSubmatch(in.args, -1) {
			if !declared[in.stage][m[1]] {
				t.Errorf("%s %q uses $%s, which stage %d does not declare (ARG)", in.cmd, in.args, m[1], in.stage)
			}
		}
	}
	for _, flag := range []string{`-X main.version=${VERSION}`, `-X main.revision=${REVISION}`} {
		if !strings.Contains(goBuild, flag) {
			t.Errorf("go build %q lacks %s", goBuild, flag)
		}
	}
	for k, want := range map[string]string{
		"title": "", "description": "", "url": "", "source": "", "documentation": "",
		"version": "${VERSION}", "revision": "${REVISION}", "created": "${CREATED}",
	} {
		got, ok := labels["org.opencontainers.image."+k]
		if !ok || got == "" || (want != "" && got != want) {
			t.Errorf("label org.opencontainers.image.%s = %q, want %q", k, got, cmpOr(want, "a value"))
		}
	}
	if !buildsPlugin {
		t.Errorf("no build stage runs `make BIN=/out/lib/ncclwatch /out/lib/ncclwatch/libnccl-profiler-ncclwatch.so` (the Makefile's plugin rule)")
	}
	if !copiesPluginDir {
		t.Errorf("the final stage does not copy /out/lib/ncclwatch/ to /usr/local/lib/ncclwatch/")
	}
	if got := path.Join(binDir, "../lib/ncclwatch"); got != "/usr/local/lib/ncclwatch" {
		t.Errorf("the binary goes to %q: install-plugin would look for the plugin in %s, not /usr/local/lib/ncclwatch", binDir, got)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ignoreRule is one line of a .dockerignore as BuildKit reads it: a path glob relative to
// the context root (*, ?, **), which also covers everything under a matching directory; a
// leading ! keeps what earlier lines left out; the last matching line wins.
type ignoreRule struct {
	re      *regexp.Regexp
	exclude bool
}

func readDockerignore(t *testing.T) []ignoreRule {
	t.Helper()
	b, err := os.ReadFile(dockerignoreFile)
	if err != nil {
		t.Fatalf("%v: docker build would send bin/ and .git to the daemon", err)
	}
	var rules []ignoreRule
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{exclude: true}
		if p, ok := strings.CutPrefix(line, "!"); ok {
			line, r.exclude = p, false
		}
		if strings.ContainsAny(line, "[\\") {
			t.Fatalf("%s: %q: this test's matcher knows *, ? and ** only", dockerignoreFile, line)
		}
		r.re = regexp.MustCompile("^" + globRegexp(path.Clean(strings.TrimPrefix(line, "/"))) + "(/.*)?$")
		rules = append(rules, r)
	}
	return rules
}

func globRegexp(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i++
		case p[i] == '*':
			b.WriteString("[^/]*")
		case p[i] == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	return b.String()
}

func ignored(rules []ignoreRule, file string) bool {
	out := false
	for _, r := range rules {
		if r.re.MatchString(file) {
			out = r.exclude
		}
	}
	return out
}

// TestDockerignore: the build context keeps every file `go build ./cmd/watchdog` and the
// profdump build read (as the image builds them), go.mod, go.sum, the Makefile and any C
// source (the profiler plugin's), and leaves out the repository and the local build outputs.
func TestDockerignore(t *testing.T) {
	rules := readDockerignore(t)
	for _, f := range []string{".git/HEAD", "bin/watchdog", "bin/helm-v3.19.5", "docs/README.md", "alert/slack_test.go", "testdata/captures/x.log"} {
		if !ignored(rules, f) {
			t.Errorf("%s is sent to the builder", f)
		}
	}
	list := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{range .GoFiles}}{{$.Dir}}/{{.}}
{{end}}{{range .CgoFiles}}{{$.Dir}}/{{.}}
{{end}}{{range .CFiles}}{{$.Dir}}/{{.}}
{{end}}{{range .HFiles}}{{$.Dir}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}
{{end}}{{end}}{{end}}`, "./cmd/watchdog", "./heartbeat/profile/profdump")
	list.Dir = ".."
	list.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	need := []string{"go.mod", "go.sum", "Makefile"}
	for _, f := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		need = append(need, filepath.ToSlash(rel))
	}
	if len(need) < 50 {
		t.Fatalf("go list named only %d files", len(need))
	}
	need = append(need, cSources(t, root)...)
	for _, f := range need {
		if ignored(rules, f) {
			t.Errorf("%s: the build needs %s, which it leaves out", dockerignoreFile, f)
		}
	}
}

// cSources lists the repository's C files, walked rather than asked of git so that the test
// also runs in a tree without .git (a release tarball). e2e/ is left out: its C files are
// test shims of GPU runs (LD_PRELOAD), never part of the image.
func cSources(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || path == filepath.Join(root, "e2e")) {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); ext == ".c" || ext == ".h" {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no C file found under the repository root")
	}
	return out
}
