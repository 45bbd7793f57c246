package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildSharedObject compiles C source into a shared object with gcc (the plugin is C; the
// image's build stage has gcc too). Without gcc the test is skipped.
func buildSharedObject(t *testing.T, dir, name string, srcArgs ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: these tests build the profiler plugin (apt-get install gcc)")
	}
	out := filepath.Join(dir, name)
	args := append([]string{"-std=gnu11", "-O1", "-fPIC", "-shared", "-pthread", "-o", out}, srcArgs...)
	if b, err := exec.Command(gcc, append(args, "-ldl")...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}

func TestInstallPlugin(t *testing.T) {
	build := t.TempDir()
	plugin := buildSharedObject(t, build, pluginFile, "../../profiler/plugin.c")
	otherC := filepath.Join(build, "other.c")
	if err := os.WriteFile(otherC, []byte("int ncclNet_v8 = 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := buildSharedObject(t, build, "libother.so", otherC)
	text := filepath.Join(build, "notes.txt")
	if err := os.WriteFile(text, []byte("not a library\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(plugin)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable() // an ELF executable, not a shared object
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		src     string
		dest    func(dir string) string // DEST given
		target  func(dir string) string // where the plugin must land
		wantErr string
	}{
		{name: "into an existing directory", src: plugin,
			dest: func(d string) string { return d }, target: func(d string) string { return filepath.Join(d, pluginFile) }},
		{name: "into a directory it creates", src: plugin,
			dest:   func(d string) string { return filepath.Join(d, "opt", "ncclwatch") },
			target: func(d string) string { return filepath.Join(d, "opt", "ncclwatch", pluginFile) }},
		{name: "to a file path", src: plugin,
			dest: func(d string) string { return filepath.Join(d, "nccl-prof.so") }, target: func(d string) string { return filepath.Join(d, "nccl-prof.so") }},
		{name: "a text file", src: text, dest: func(d string) string { return d }, wantErr: "not an ELF shared object"},
		{name: "an executable", src: exe, dest: func(d string) string { return d }, wantErr: "not a shared object"},
		{name: "another plugin", src: other, dest: func(d string) string { return d }, wantErr: "exports no ncclProfiler_vN table"},
		{name: "a missing file", src: filepath.Join(build, "none.so"), dest: func(d string) string { return d }, wantErr: "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			res, err := installPlugin(context.Background(), c.src, c.dest(dir))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				if left := filesUnder(t, dir); len(left) != 0 {
					t.Fatalf("a refused install left %v", left)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(c.target(dir))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("installed file differs from the source (err %v)", err)
			}
			st, _ := os.Stat(c.target(dir))
			if res.path != c.target(dir) || res.size != int64(len(want)) || st.Mode().Perm() != 0o755 {
				t.Fatalf("result %+v, mode %v", res, st.Mode())
			}
			if strings.Join(res.tables, " ") != "ncclProfiler_v3 ncclProfiler_v4 ncclProfiler_v5 ncclProfiler_v6" {
				t.Fatalf("tables %v", res.tables)
			}
			if left := filesUnder(t, dir); len(left) != 1 {
				t.Fatalf("files after install: %v, want only the plugin", left)
			}
		})
	}
}

// TestInstallPluginReplaces: a new install replaces the file by rename, so a process that
// opened (NCCL: mapped) the old one keeps reading the old bytes, never a mix.
func TestInstallPluginReplaces(t *testing.T) {
	build := t.TempDir()
	plugin := buildSharedObject(t, build, pluginFile, "../../profiler/plugin.c")
	dir := t.TempDir()
	target := filepath.Join(dir, pluginFile)
	old := []byte("the previous plugin")
	if err := os.WriteFile(target, old, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := installPlugin(context.Background(), plugin, dir); err != nil {
		t.Fatal(err)
	}
	held := make([]byte, 64)
	n, _ := f.ReadAt(held, 0)
	if !bytes.Equal(held[:n], old) {
		t.Fatalf("the open file now reads %q", held[:n])
	}
	if _, err := profilerTables(target); err != nil {
		t.Fatalf("the new file: %v", err)
	}
}

func TestBundledPlugin(t *testing.T) {
	for _, c := range []struct {
		name, place string // where the plugin lies, relative to the binary's folder ("" none)
	}{{"beside the binary", pluginFile}, {"in ../lib/ncclwatch", "../lib/ncclwatch/" + pluginFile}, {"nowhere", ""}} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			bin := filepath.Join(root, "bin")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			want := ""
			if c.place != "" {
				want = filepath.Join(bin, c.place)
				if err := os.MkdirAll(filepath.Dir(want), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(want, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				want = filepath.Clean(want)
			}
			got, err := bundledPlugin(filepath.Join(bin, "watchdog"))
			if got != want || (want == "") != (err != nil) {
				t.Fatalf("got %q, %v; want %q", got, err, want)
			}
		})
	}
}

func TestInstallPluginCommand(t *testing.T) {
	build := t.TempDir()
	plugin := buildSharedObject(t, build, pluginFile, "../../profiler/plugin.c")
	dest := t.TempDir()
	if err := runInstallPlugin(context.Background(), []string{"--from", plugin, dest}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dest, pluginFile)); err != nil {
		t.Fatal(err)
	}
	if err := runInstallPlugin(context.Background(), []string{"--from", plugin}); err == nil || !strings.Contains(err.Error(), "want one DEST") {
		t.Fatalf("no DEST: %v", err)
	}
	// Help goes to stdout and exits 0 (it exited 1).
	var err error
	captureStdout(t, func() { err = runInstallPlugin(context.Background(), []string{"-h"}) })
	if !errors.Is(err, errHelp) || finish("install-plugin", err, io.Discard) != exitOK {
		t.Fatalf("-h: %v", err)
	}
}

func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
