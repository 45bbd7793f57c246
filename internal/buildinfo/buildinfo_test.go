package buildinfo

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRead(t *testing.T) {
	for _, c := range []struct {
		name    string
		stamped Stamped
		version string
		rev     string
	}{
		{"stamped by the build", func() (string, string) { return "v1.4.0", "0123abc" }, "v1.4.0", "0123abc"},
		{"half stamped", func() (string, string) { return " v1.4.0\n", "" }, "v1.4.0", ""},
		{"not stamped", func() (string, string) { return "", "" }, "", ""},
		{"no function", nil, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := Read(c.stamped)
			if i.GoVersion != runtime.Version() {
				t.Errorf("go version %q, want %q", i.GoVersion, runtime.Version())
			}
			// Unstamped values come from the test binary's build info: "(devel)" or
			// "unknown", never empty.
			if c.version != "" && i.Version != c.version || i.Version == "" {
				t.Errorf("version %q, want %q", i.Version, c.version)
			}
			if c.rev != "" && i.Revision != c.rev || i.Revision == "" {
				t.Errorf("revision %q, want %q", i.Revision, c.rev)
			}
		})
	}
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	i := Info{Version: "v1.4.0", Revision: "0123abc", GoVersion: "go1.26.8"}
	for range 2 { // the demo's sidecars and detector share one registry
		if err := Register(reg, i); err != nil {
			t.Fatal(err)
		}
	}
	want := `# HELP ncclwatch_build_info Always 1; its labels say which build runs (version, VCS revision, Go version).
# TYPE ncclwatch_build_info gauge
ncclwatch_build_info{goversion="go1.26.8",revision="0123abc",version="v1.4.0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ncclwatch_build_info"); err != nil {
		t.Fatal(err)
	}
	if err := Register(nil, i); err != nil {
		t.Fatal(err)
	}
}
