package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// newestChangelogVersion is the version of CHANGELOG.md's first "## [X.Y.Z]" heading.
func newestChangelogVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindSubmatch(b)
	if m == nil {
		t.Fatal("CHANGELOG.md has no '## [X.Y.Z]' heading")
	}
	return string(m[1])
}

// TestReleaseVersionsAgree: the chart's version and appVersion are the version CHANGELOG.md
// is at, so the chart's default image tag is the image of that version (make chart
// overrides both with the build's VERSION).
func TestReleaseVersionsAgree(t *testing.T) {
	v := newestChangelogVersion(t)
	b, err := os.ReadFile(chartDir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nversion: " + v + "\n", "\nappVersion: \"" + v + "\"\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Chart.yaml lacks %q (CHANGELOG.md is at %s)", strings.TrimSpace(want), v)
		}
	}
	if _, err := os.Stat("../LICENSE"); err != nil {
		t.Errorf("no LICENSE: %v", err)
	}
}

// TestVersionScript: deploy/tools/version.sh, the Makefile's VERSION, is CHANGELOG.md's
// version in a tree without .git, without a tag, at a tag, past it and with local changes
// (the one version the binary, the image and the chart say; the commit is the revision),
// and refuses a tag that names another version.
func TestVersionScript(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	v := newestChangelogVersion(t)
	dir := t.TempDir()
	script, err := os.ReadFile("tools/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	changelog, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "deploy/tools"), 0o755)
	os.WriteFile(filepath.Join(dir, "deploy/tools/version.sh"), script, 0o755)
	os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), changelog, 0o644)
	version := func() (string, error) {
		t.Helper()
		out, err := exec.Command("sh", filepath.Join(dir, "deploy/tools/version.sh")).Output()
		return strings.TrimSpace(string(out)), err
	}
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t.invalid", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	check := func(what string) {
		t.Helper()
		if got, err := version(); err != nil || got != v {
			t.Errorf("%s: %q (%v), want %q", what, got, err, v)
		}
	}
	check("no .git")
	git("init", "-q")
	git("add", ".")
	git("commit", "-qm", "one")
	check("no tag")
	git("tag", "-a", "v"+v, "-m", "release")
	check("at the tag")
	os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), append(changelog, '\n'), 0o644)
	check("with changes")
	git("commit", "-qam", "two")
	check("past the tag")
	git("tag", "-a", "v99.0.0", "-m", "wrong")
	if got, err := version(); err == nil {
		t.Errorf("a tag naming another version than CHANGELOG.md: %q, want an error", got)
	}
}

// TestMultiArchImageTarget: make image-multiarch builds the Dockerfile for amd64 and arm64
// with the build arguments its stages declare, tagged with VERSION (the version
// `--version` says), and pushes the manifest list. No Docker engine runs here: the
// command is checked as make would run it, the Dockerfile by TestDockerImage.
func TestMultiArchImageTarget(t *testing.T) {
	out, err := exec.Command("make", "-s", "-n", "-C", "..", "image-multiarch", "VERSION=1.2.3", "REVISION=abc").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n image-multiarch: %v\n%s", err, out)
	}
	cmd := strings.Join(strings.Fields(strings.ReplaceAll(string(out), "\\\n", " ")), " ")
	for _, want := range []string{"docker buildx build --platform linux/amd64,linux/arm64", "-f deploy/docker/Dockerfile",
		"--build-arg VERSION=1.2.3", "--build-arg REVISION=abc", "--build-arg CREATED=", "-t ghcr.io/ncclwatch/watchdog:1.2.3", "--push"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("make image-multiarch runs %q: lacks %q", cmd, want)
		}
	}
	declared := map[string]bool{}
	for _, in := range readDockerfile(t) {
		if in.cmd == "ARG" {
			name, _, _ := strings.Cut(in.args, "=")
			declared[name] = true
		}
		if in.cmd == "RUN" && regexp.MustCompile(`amd64|x86_64|GOARCH=`).MatchString(in.args) {
			t.Errorf("RUN %q names an architecture: each platform's stage builds natively", in.args)
		}
	}
	for _, arg := range []string{"VERSION", "REVISION", "CREATED"} {
		if !declared[arg] {
			t.Errorf("the Dockerfile declares no ARG %s that make passes", arg)
		}
	}
}
