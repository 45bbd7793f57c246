package doctor

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// pluginFile is the file NCCL looks for when NCCL_PROFILER_PLUGIN is a name, not a path.
const pluginFileOf = "libnccl-profiler-%s.so"

// ReadEnviron reads a process environment: /proc/<pid>/environ (NUL-separated) or a file of
// KEY=VALUE lines (an env dump, a Slurm task prolog's output, "export " prefixes allowed).
func ReadEnviron(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	sep := []byte("\n")
	if bytes.IndexByte(b, 0) >= 0 {
		sep = []byte{0}
	}
	env := map[string]string{}
	for _, l := range bytes.Split(b, sep) {
		s := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(l)), "export "))
		if k, v, ok := strings.Cut(s, "="); ok && k != "" && !strings.HasPrefix(k, "#") {
			env[k] = strings.Trim(v, `"'`)
		}
	}
	return env, nil
}

// NCCLCheck is a training job's environment and where the sidecar looks.
type NCCLCheck struct {
	Env    map[string]string
	Source string // where Env came from, for the messages
	// LogGlobs are the sidecar's --logs; empty: not compared.
	LogGlobs []string
}

// NCCL checks what a training job's NCCL environment gives the sidecar: in plugin mode
// (NCCL_PROFILER_PLUGIN set) that the plugin is found and is a profiler plugin for this
// machine; else the NCCL_DEBUG level, subsystems, file pattern and timestamps.
func NCCL(c NCCLCheck) []Result {
	var out []Result
	if p := c.Env["NCCL_PROFILER_PLUGIN"]; p != "" {
		out = append(out, plugin(c, p)...)
		if lvl := strings.ToUpper(c.Env["NCCL_DEBUG"]); lvl != "WARN" && lvl != "INFO" && lvl != "TRACE" {
			out = append(out, problem("nccl", Warn, fmt.Sprintf("NCCL_DEBUG=%q: NCCL's errors are not written where the sidecar reads them", c.Env["NCCL_DEBUG"]),
				"NCCL_DEBUG=WARN with NCCL_DEBUG_FILE (plugin mode needs no INFO lines)"))
		}
		out = append(out, debugFile(c, false)...)
		return out
	}
	switch lvl := strings.ToUpper(c.Env["NCCL_DEBUG"]); lvl {
	case "INFO", "TRACE":
		out = append(out, ok("nccl", "NCCL_DEBUG=%s in %s", lvl, c.Source))
	default:
		return append(out, problem("nccl", Fail, fmt.Sprintf("NCCL_DEBUG=%q in %s and no NCCL_PROFILER_PLUGIN: the sidecar sees no collective", c.Env["NCCL_DEBUG"], c.Source),
			"NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET (or the profiler plugin: docs/profiler-plugin.md)"))
	}
	out = append(out, subsystems(c.Env["NCCL_DEBUG_SUBSYS"])...)
	out = append(out, debugFile(c, true)...)
	out = append(out, timestamps(c.Env)...)
	return out
}

// subsystems checks NCCL_DEBUG_SUBSYS for INIT and COLL.
func subsystems(v string) []Result {
	const fix = "NCCL_DEBUG_SUBSYS=INIT,COLL,NET"
	if v == "" {
		return []Result{problem("nccl", Fail, "NCCL_DEBUG_SUBSYS is unset: NCCL's default (INIT,BOOTSTRAP,ENV) prints no collective", fix)}
	}
	names := map[string]bool{}
	neg := strings.HasPrefix(v, "^")
	for _, n := range strings.Split(strings.TrimPrefix(v, "^"), ",") {
		names[strings.ToUpper(strings.TrimSpace(n))] = true
	}
	has := func(n string) bool { return names["ALL"] || names[n] != neg }
	var missing []string
	for _, n := range []string{"INIT", "COLL"} {
		if !has(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return []Result{problem("nccl", Fail, fmt.Sprintf("NCCL_DEBUG_SUBSYS=%s leaves out %s: no communicator or no collective lines", v, strings.Join(missing, " and ")), fix)}
	}
	if names["ALL"] && !neg {
		return []Result{problem("nccl", Warn, "NCCL_DEBUG_SUBSYS=ALL: proxy, graph and tuning lines are volume the rules do not use", fix)}
	}
	if !has("NET") {
		return []Result{problem("nccl", Warn, fmt.Sprintf("NCCL_DEBUG_SUBSYS=%s without NET: ranks are not tied to their network devices", v), fix)}
	}
	return []Result{ok("nccl", "NCCL_DEBUG_SUBSYS=%s has INIT, COLL and NET", v)}
}

// debugFile checks that NCCL writes one file per process where the sidecar reads.
func debugFile(c NCCLCheck, needed bool) []Result {
	f := c.Env["NCCL_DEBUG_FILE"]
	lvl := Warn
	if needed {
		lvl = Fail
	}
	if f == "" {
		return []Result{problem("nccl", lvl, "NCCL_DEBUG_FILE is unset: NCCL writes its lines to the job's stdout, which the sidecar does not follow",
			"NCCL_DEBUG_FILE=/var/log/nccl/nccl.%h.%p.log (a folder the sidecar reads: its --logs)")}
	}
	if !strings.Contains(f, "%p") {
		return []Result{problem("nccl", lvl, fmt.Sprintf("NCCL_DEBUG_FILE=%s has no %%p: every process of a node writes the same file, over each other", f),
			"NCCL_DEBUG_FILE=/var/log/nccl/nccl.%h.%p.log")}
	}
	var out []Result
	if !strings.Contains(f, "%h") {
		out = append(out, problem("nccl", Warn, fmt.Sprintf("NCCL_DEBUG_FILE=%s has no %%h: on a folder shared by nodes, their files collide", f),
			"add %h (the host name) to the file name"))
	}
	if len(c.LogGlobs) > 0 {
		example := strings.NewReplacer("%h", "node0", "%p", "12345", "%%", "%").Replace(f)
		matched := slices.ContainsFunc(c.LogGlobs, func(g string) bool { m, _ := filepath.Match(g, example); return m })
		if !matched {
			return append(out, problem("nccl", lvl, fmt.Sprintf("NCCL writes %s (e.g. %s), which the sidecar's --logs %s does not match", f, example, strings.Join(c.LogGlobs, ",")),
				"make NCCL_DEBUG_FILE and the sidecar's --logs name the same folder"))
		}
		return append(out, ok("nccl", "NCCL_DEBUG_FILE=%s: one file per process, which the sidecar's --logs follows", f))
	}
	return append(out, ok("nccl", "NCCL_DEBUG_FILE=%s: one file per process", f))
}

// timestamps checks for sub-second NCCL timestamps on every level (NCCL 2.26+).
func timestamps(env map[string]string) []Result {
	levels, format := strings.ToUpper(env["NCCL_DEBUG_TIMESTAMP_LEVELS"]), env["NCCL_DEBUG_TIMESTAMP_FORMAT"]
	const fix = `NCCL_DEBUG_TIMESTAMP_LEVELS=ALL NCCL_DEBUG_TIMESTAMP_FORMAT="[%F %T.%6f] " (NCCL 2.26+; older NCCL prints none)`
	if !strings.Contains(levels, "ALL") && !strings.Contains(levels, "INFO") {
		return []Result{problem("nccl", Warn, "INFO lines carry no NCCL timestamp: the sidecar times them as it reads them (about 10 ms off)", fix)}
	}
	if _, set := env["NCCL_DEBUG_TIMESTAMP_FORMAT"]; set && format == "" {
		return []Result{problem("nccl", Warn, "NCCL_DEBUG_TIMESTAMP_FORMAT is empty: timestamps are off", fix)}
	}
	if !strings.Contains(format, "%3f") && !strings.Contains(format, "%6f") && !strings.Contains(format, "%9f") {
		return []Result{problem("nccl", Warn, fmt.Sprintf("NCCL_DEBUG_TIMESTAMP_FORMAT=%q has whole seconds only: arrival order within a second is lost", format), fix)}
	}
	return []Result{ok("nccl", "NCCL timestamps on %s lines, format %q", levels, format)}
}

// plugin checks NCCL_PROFILER_PLUGIN: found as NCCL looks for it, a shared object for this
// machine that exports a profiler table, and readable by the job.
func plugin(c NCCLCheck, p string) []Result {
	path, tried := resolvePlugin(c.Env, p)
	if path == "" {
		return []Result{problem("nccl", Fail, fmt.Sprintf("NCCL_PROFILER_PLUGIN=%s: not found (looked at %s); NCCL would run without it", p, strings.Join(tried, " ")),
			"install it (watchdog install-plugin DIR) and give NCCL_PROFILER_PLUGIN its full path")}
	}
	tables, err := ProfilerTables(path)
	if err != nil {
		return []Result{problem("nccl", Fail, fmt.Sprintf("NCCL_PROFILER_PLUGIN=%s: %v", p, err),
			"install the plugin built for this machine (watchdog install-plugin DIR, from the image of this architecture)")}
	}
	out := []Result{ok("nccl", "profiler plugin %s loads here: exports %s", path, strings.Join(tables, " "))}
	if d := c.Env["NCCLWATCH_PROFILER_DIR"]; d == "" {
		out = append(out, problem("nccl", Warn, "NCCLWATCH_PROFILER_DIR is unset: the plugin writes its files beside NCCL_DEBUG_FILE, else in /dev/shm",
			"set NCCLWATCH_PROFILER_DIR to the folder the sidecar's --profiler-dir reads"))
	} else {
		out = append(out, ok("nccl", "the plugin writes its files in %s (the sidecar's --profiler-dir must read it)", d))
	}
	return out
}

// resolvePlugin finds the plugin as NCCL's dlopen would: a path as given; a bare name as
// libnccl-profiler-<name>.so, or the name itself, in LD_LIBRARY_PATH.
func resolvePlugin(env map[string]string, p string) (string, []string) {
	var tried []string
	if strings.Contains(p, "/") {
		tried = append(tried, p)
	} else {
		for _, dir := range filepath.SplitList(env["LD_LIBRARY_PATH"]) {
			if dir == "" {
				continue
			}
			tried = append(tried, filepath.Join(dir, fmt.Sprintf(pluginFileOf, p)), filepath.Join(dir, p))
		}
	}
	for _, t := range tried {
		if st, err := os.Stat(t); err == nil && st.Mode().IsRegular() {
			return t, tried
		}
	}
	if len(tried) == 0 {
		tried = []string{"LD_LIBRARY_PATH (empty)"}
	}
	return "", tried
}

// machines maps GOARCH to the ELF machine a plugin for it is built for.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// ProfilerTables lists the ncclProfiler_vN tables a shared object for this machine exports
// (`watchdog install-plugin` checks what it installs with it).
func ProfilerTables(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s is not an ELF shared object: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		return nil, fmt.Errorf("%s is an ELF %s, not a shared object", path, f.Type)
	}
	if m, known := machines[runtime.GOARCH]; known && f.Machine != m {
		return nil, fmt.Errorf("%s is built for %s, this machine is %s", path, f.Machine, runtime.GOARCH)
	}
	syms, err := f.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("%s: dynamic symbols: %w", path, err)
	}
	var tables []string
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "ncclProfiler_v") && s.Section != elf.SHN_UNDEF &&
			elf.ST_TYPE(s.Info) == elf.STT_OBJECT && elf.ST_BIND(s.Info) != elf.STB_LOCAL {
			tables = append(tables, s.Name)
		}
	}
	if len(tables) == 0 {
		return nil, fmt.Errorf("%s exports no ncclProfiler_vN table: not an NCCL profiler plugin", path)
	}
	slices.Sort(tables)
	return tables, nil
}
