package profile

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The chain tests run the driver with a second profiler plugin chained beside the watchdog's
// (NCCLWATCH_PROFILER_CHAIN, profiler/chain.c): the stand-in of profiler/test/standin.c, which
// writes every call it gets and checks that every handle and parent it is given is its own.
// The watchdog's region must be exactly what it is unchained, and the stand-in must have seen
// every call the driver made, converted to its own version, with its own handles.

// chainEnv is the environment that chains the stand-in exporting up to ncclProfiler_v<max>;
// its files and the driver's own log go to the returned folder.
func chainEnv(t *testing.T, b *built, max int, extra ...string) ([]string, string) {
	t.Helper()
	dir := t.TempDir()
	return append([]string{"NCCLWATCH_PROFILER_CHAIN=" + b.standin[max], "STANDIN_DIR=" + dir,
		"DRIVER_LOG=" + filepath.Join(dir, "driver.log")}, extra...), dir
}

func TestPluginChain(t *testing.T) {
	gcc := needGCC(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			b := build(t, gcc, v)
			for ver := 3; ver <= 6; ver++ {
				t.Run(fmt.Sprintf("basic/v%d", ver), func(t *testing.T) {
					env, dir := chainEnv(t, b, 6)
					r := testBasic(t, b, ver, env...)
					p := r.Process
					if p.Chain != ChainActive || p.ChainABI != ver || p.ChainName != "standin" || p.ChainDropped != 0 ||
						p.ChainError != "" {
						t.Errorf("chain in the header: %s v%d %q dropped %d error %q", p.Chain, p.ChainABI, p.ChainName,
							p.ChainDropped, p.ChainError)
					}
					checkChained(t, dir, ver, ver)
				})
				t.Run(fmt.Sprintf("orders/v%d", ver), func(t *testing.T) {
					env, dir := chainEnv(t, b, 6)
					testOrders(t, b, ver, env...)
					checkChained(t, dir, ver, ver)
				})
			}
			// NCCL newer than the chained plugin: it is called through its own newest table.
			for _, c := range []struct{ nccl, standin int }{{5, 4}, {6, 4}, {5, 3}, {4, 3}} {
				t.Run(fmt.Sprintf("basic/v%d-to-v%d", c.nccl, c.standin), func(t *testing.T) {
					env, dir := chainEnv(t, b, c.standin)
					if p := testBasic(t, b, c.nccl, env...).Process; p.Chain != ChainActive || p.ChainABI != c.standin {
						t.Errorf("chain %s through v%d, want v%d", p.Chain, p.ChainABI, c.standin)
					}
					checkChained(t, dir, c.nccl, c.standin)
				})
			}
			t.Run("overflow", func(t *testing.T) {
				env, dir := chainEnv(t, b, 6)
				testOverflow(t, b, env...)
				checkChained(t, dir, 5, 5)
			})
			t.Run("burst", func(t *testing.T) {
				env, dir := chainEnv(t, b, 6)
				testBurst(t, b, env...)
				checkStandins(t, dir, 3)
			})
			t.Run("threads", func(t *testing.T) {
				// Totals only: no line per call (STANDIN_QUIET) and no DRIVER_LOG.
				dir := t.TempDir()
				env := []string{"NCCLWATCH_PROFILER_CHAIN=" + b.standin[6], "STANDIN_DIR=" + dir, "STANDIN_QUIET=1"}
				out := testThreads(t, b, v.ops/4, false, env...)
				calls := regexp.MustCompile(`calls starts=(\d+) stops=(\d+) states=(\d+)`).FindStringSubmatch(out)
				sums := checkStandins(t, dir, 1)
				if calls == nil || len(sums) != 1 {
					t.Fatalf("no totals: %q, %d stand-in summaries", out, len(sums))
				}
				s := sums[0]
				if s["starts"] != calls[1] || s["stops"] != calls[2] || s["states"] != calls[3] || s["rejected"] != "0" {
					t.Errorf("the driver made %s, the stand-in saw %v", calls[0], s)
				}
			})
			t.Run("fork", func(t *testing.T) {
				env, dir := chainEnv(t, b, 6)
				testFork(t, b, env...)
				// The child writes a log of its own, and leaves through _exit: no summary.
				if logs, _ := filepath.Glob(filepath.Join(dir, "standin.*.log")); len(logs) != 2 {
					t.Errorf("stand-in logs %v, want the parent's and the child's", logs)
				}
			})
			t.Run("disabled", func(t *testing.T) {
				// The watchdog's recording off: the chained plugin still gets everything.
				env, dir := chainEnv(t, b, 6, "NCCLWATCH_PROFILER=0")
				b.run(t, t.TempDir(), "disabled", 5, 0, env...)
				checkChained(t, dir, 5, 5)
			})
			t.Run("broken", func(t *testing.T) { testChainBroken(t, b) })
		})
	}
}

// testChainBroken: a chained plugin that cannot be used is one WARN line (through NCCL's
// logger; stderr under v3, which has none) and the region says why; the watchdog's profiler
// records exactly what it records alone.
func testChainBroken(t *testing.T, b *built) {
	for _, c := range []struct {
		name  string
		ver   int
		env   []string
		warn  string
		state ChainState
		err   string
	}{
		{name: "missing", ver: 5, env: []string{"NCCLWATCH_PROFILER_CHAIN=/nonexistent/libnccl-profiler-x.so"},
			warn:  "LOG 2 NCCL watchdog profiler: NCCLWATCH_PROFILER_CHAIN=/nonexistent/libnccl-profiler-x.so: cannot load it: ",
			state: ChainFailed, err: "cannot load it: "},
		{name: "missing-v3", ver: 3, env: []string{"NCCLWATCH_PROFILER_CHAIN=/nonexistent/libnccl-profiler-x.so"},
			warn:  "NCCL WARN NCCL watchdog profiler: NCCLWATCH_PROFILER_CHAIN=/nonexistent/libnccl-profiler-x.so: cannot load it",
			state: ChainFailed, err: "cannot load it: "},
		{name: "no-table", ver: 5, env: []string{"NCCLWATCH_PROFILER_CHAIN=" + b.notable},
			warn:  "it exports no ncclProfiler_v3 to v5 (NCCL calls this plugin through v5); the watchdog profiler goes on alone",
			state: ChainFailed, err: "it exports no ncclProfiler_v3 to v5"},
		{name: "itself", ver: 6, env: []string{"NCCLWATCH_PROFILER_CHAIN=" + b.so},
			warn: "that is this plugin itself; the watchdog profiler goes on alone", state: ChainFailed,
			err: "that is this plugin itself"},
		{name: "init-fails", ver: 5, env: []string{"NCCLWATCH_PROFILER_CHAIN=" + b.standin[6], "STANDIN_INIT_FAIL=1",
			"STANDIN_DIR=" + t.TempDir()},
			warn:  "LOG 2 NCCL watchdog profiler: the chained profiler standin: its init failed (error 3) for communicator 0xa1a2a3a4a5a6a7a8",
			state: ChainActive, err: "its init failed (error 3)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out := b.run(t, dir, "basic", c.ver, 0, c.env...)
			if !strings.Contains(out, c.warn) {
				t.Errorf("no WARN %q:\n%s", c.warn, out)
			}
			if n := strings.Count(out, "NCCLWATCH_PROFILER_CHAIN=") + strings.Count(out, "its init failed"); n != 1 {
				t.Errorf("%d WARN lines about the chain, want 1:\n%s", n, out)
			}
			p := testBasic(t, b, c.ver, c.env...).Process
			if p.Chain != c.state || !strings.Contains(p.ChainError, c.err) {
				t.Errorf("chain %s, error %q; want %s, %q", p.Chain, p.ChainError, c.state, c.err)
			}
		})
	}
}

// checkChained compares the stand-in's log with the driver's (the calls that must reach it,
// driver at NCCL's version nccl, the stand-in at its own version) and checks its summary.
func checkChained(t *testing.T, dir string, nccl, standin int) {
	t.Helper()
	logs := checkStandins(t, dir, 1)
	if t.Failed() || len(logs) != 1 {
		return
	}
	got, err := os.ReadFile(logs[0]["file"])
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "driver.log"))
	if err != nil {
		t.Fatal(err)
	}
	ids := commIDs(string(want))
	g := normStandin(t, string(got), nccl, standin, ids)
	w := normDriver(string(want), nccl, standin)
	if !slices.Equal(g, w) {
		for i := range max(len(g), len(w)) {
			var a, b string
			if i < len(g) {
				a = g[i]
			}
			if i < len(w) {
				b = w[i]
			}
			if a != b {
				t.Fatalf("line %d: the stand-in saw %q, the driver made %q (%d and %d lines)", i+1, a, b, len(g), len(w))
			}
		}
	}
}

// checkStandins reads the stand-in summaries in dir (one per process; want of them) and fails
// on any violation: a handle or parent that was not its own, a call after its finalize.
func checkStandins(t *testing.T, dir string, want int) []map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "standin.*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		last := lines[len(lines)-1]
		if !strings.HasPrefix(last, "summary ") {
			t.Errorf("%s ends without a summary: %q", f, last)
			continue
		}
		s := map[string]string{"file": f}
		for _, kv := range strings.Fields(last)[1:] {
			k, v, _ := strings.Cut(kv, "=")
			s[k] = v
		}
		for _, k := range []string{"bad_handle", "bad_parent", "after_fin", "overflow"} {
			if s[k] != "0" {
				t.Errorf("%s: %s=%s: %s", f, k, s[k], last)
			}
		}
		out = append(out, s)
	}
	if len(out) != want {
		t.Errorf("%d stand-in logs in %s, want %d", len(out), dir, want)
	}
	return out
}

var (
	reInit  = regexp.MustCompile(`^init ctx=(\d+) id=(0x[0-9a-f]+)`)
	reStart = regexp.MustCompile(`^start ctx=(\d+) ev=(\d+) type=(\w+) parent=(\S+)(.*)$`)
	reEv    = regexp.MustCompile(`^(stop|state) ev=(\d+)(.*)$`)
	reTimer = regexp.MustCompile(` timer=\d+`)
	reHash  = regexp.MustCompile(` hash=(0x[0-9a-f]+)`)
)

// commIDs maps the driver's context numbers to their communicator ids.
func commIDs(driver string) map[string]string {
	ids := map[string]string{}
	for _, l := range strings.Split(driver, "\n") {
		if m := reInit.FindStringSubmatch(l); m != nil {
			ids[m[1]] = m[2]
		}
	}
	return ids
}

// normStandin: the stand-in's lines without what only its version says: its init details, the
// kernel channels' GPU timer (v4+, checked present) and v3's comm hash (checked equal to the
// communicator's id).
func normStandin(t *testing.T, log string, nccl, standin int, ids map[string]string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		switch {
		case strings.HasPrefix(l, "summary "):
			continue
		case strings.HasPrefix(l, "init "):
			l = strings.Join(strings.Fields(l)[:2], " ")
		case strings.HasPrefix(l, "start "):
			m := reStart.FindStringSubmatch(l)
			if m == nil {
				t.Errorf("stand-in line %q", l)
				continue
			}
			if m[3] == "KernelCh" && (standin >= 4 && nccl >= 4) != reTimer.MatchString(l) {
				t.Errorf("kernel channel timer, stand-in v%d, NCCL v%d: %q", standin, nccl, l)
			}
			if h := reHash.FindStringSubmatch(l); h != nil && h[1] != ids[m[1]] {
				t.Errorf("v3 comm hash %s, the communicator is %s: %q", h[1], ids[m[1]], l)
			} else if h == nil && standin == 3 && (m[3] == "Coll" || m[3] == "P2p") {
				t.Errorf("no comm hash for v3: %q", l)
			}
			l = reHash.ReplaceAllString(reTimer.ReplaceAllString(l, ""), "")
		}
		out = append(out, l)
	}
	return out
}

// knownTo says whether a chained plugin of version v gets an event type (NCCL's converters'
// rule, which chain.c follows).
func knownTo(v int, typ string) bool {
	switch typ {
	case "GroupApi", "CollApi", "P2pApi", "KernelLaunch":
		return v >= 5
	case "CeColl", "CeSync", "CeBatch":
		return v >= 6
	}
	return true
}

// stateTo says whether a state reaches a chained plugin of version v from NCCL's version.
func stateTo(nccl, v, st int) bool {
	switch {
	case v == nccl:
		return true
	case st >= 25 && st <= 30:
		return v >= 6
	case st == 23 || st == 24:
		return v >= 5
	case v >= 4:
		return true
	}
	return (st >= 13 && st <= 18) || (st >= 8 && st <= 12)
}

// normDriver: the driver's calls as a chained plugin of version standin gets them: events its
// version lacks left out, the others numbered again in order, states it lacks left out.
func normDriver(log string, nccl, standin int) []string {
	renum := map[string]string{}
	var out []string
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.HasPrefix(l, "init ") {
			out = append(out, strings.Join(strings.Fields(l)[:2], " "))
			continue
		}
		if m := reStart.FindStringSubmatch(l); m != nil {
			if !knownTo(standin, m[3]) {
				continue
			}
			renum[m[2]] = strconv.Itoa(n)
			n++
			parent := m[4]
			if p, ok := renum[parent]; ok {
				parent = p
			}
			out = append(out, fmt.Sprintf("start ctx=%s ev=%s type=%s parent=%s%s", m[1], renum[m[2]], m[3], parent, m[5]))
			continue
		}
		if m := reEv.FindStringSubmatch(l); m != nil {
			e, ok := renum[m[2]]
			if !ok {
				continue
			}
			if m[1] == "state" {
				st, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(m[3]), "st="))
				if !stateTo(nccl, standin, st) {
					continue
				}
			}
			out = append(out, m[1]+" ev="+e+m[3])
			continue
		}
		out = append(out, l)
	}
	return out
}
