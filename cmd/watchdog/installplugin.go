package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ncclwatch/watchdog/internal/doctor"
)

// pluginFile is the profiler plugin's file name (profiler/README.md): NCCL_PROFILER_PLUGIN
// takes its path, or "ncclwatch", which NCCL turns into this name.
const pluginFile = "libnccl-profiler-ncclwatch.so"

// runInstallPlugin copies the NCCL profiler plugin that ships beside this binary into DEST,
// for an init container: the runtime image has no shell and no cp.
func runInstallPlugin(ctx context.Context, args []string) error {
	fs := newFlags("install-plugin", `usage: watchdog install-plugin [--from FILE] DEST

Copies the NCCL profiler plugin to DEST (a directory, created if missing, or a path ending in
.so), atomically: a process that loads DEST sees the old file or the new one, never part of
one.`)
	from := fs.String("from", "", "the plugin to install (default: "+pluginFile+" beside this binary, else in ../lib/ncclwatch/ from it)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one DEST, got %d arguments", fs.NArg())
	}
	src := *from
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the plugin: %w", err)
		}
		if src, err = bundledPlugin(exe); err != nil {
			return err
		}
	}
	res, err := installPlugin(ctx, src, fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Printf("installed %s from %s: %d bytes, sha256 %x, exports %s\n", res.path, src, res.size, res.sum, strings.Join(res.tables, " "))
	return nil
}

// bundledPlugin finds the plugin next to the binary (bin/ after `make plugin`) or in
// ../lib/ncclwatch/ from it (/usr/local/lib/ncclwatch/ in the image).
func bundledPlugin(exe string) (string, error) {
	if p, err := filepath.EvalSymlinks(exe); err == nil {
		exe = p
	}
	dir := filepath.Dir(exe)
	tried := []string{filepath.Join(dir, pluginFile), filepath.Join(dir, "..", "lib", "ncclwatch", pluginFile)}
	for _, p := range tried {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return filepath.Clean(p), nil
		}
	}
	return "", fmt.Errorf("no %s in %s or %s: build it with `make plugin`, or name it with --from", pluginFile, tried[0], filepath.Clean(tried[1]))
}

type installed struct {
	path   string
	size   int64
	sum    []byte
	tables []string // the ncclProfiler_vN tables the file exports
}

// installPlugin checks that src is a shared object exporting a profiler table, then writes
// it to a temporary file beside the target and renames it over the target: a process that
// already mapped the old file keeps it, and NCCL never loads a half-written one.
func installPlugin(ctx context.Context, src, dest string) (installed, error) {
	tables, err := profilerTables(src)
	if err != nil {
		return installed{}, err
	}
	target := dest
	if !strings.HasSuffix(dest, ".so") {
		if err := os.MkdirAll(dest, 0o755); err != nil {
			return installed{}, fmt.Errorf("install plugin: %w", err)
		}
		target = filepath.Join(dest, pluginFile)
	}
	in, err := os.Open(src)
	if err != nil {
		return installed{}, fmt.Errorf("install plugin: %w", err)
	}
	defer in.Close()
	dir := filepath.Dir(target)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".*.tmp")
	if err != nil {
		return installed{}, fmt.Errorf("install plugin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), in)
	if err != nil {
		return installed{}, fmt.Errorf("install plugin: copy %s: %w", src, err)
	}
	// Readable by the trainer whatever its user; the init container runs as another.
	if err := tmp.Chmod(0o755); err != nil {
		return installed{}, fmt.Errorf("install plugin: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return installed{}, fmt.Errorf("install plugin: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return installed{}, fmt.Errorf("install plugin: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return installed{}, fmt.Errorf("install plugin: %w", err)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return installed{}, fmt.Errorf("install plugin: %w", err)
	}
	done = true
	// The rename is durable once the directory is; a failure here changes nothing for a
	// reader now, so it is not an error.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return installed{path: target, size: n, sum: h.Sum(nil), tables: tables}, nil
}

// profilerTables lists the ncclProfiler_vN tables a shared object for this machine
// exports; a file that is no shared object, is built for another architecture, or exports
// none is refused: NCCL would ignore it silently.
func profilerTables(path string) ([]string, error) { return doctor.ProfilerTables(path) }
