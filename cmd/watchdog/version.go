package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version and revision are set at link time: go build -ldflags "-X main.version=v0.3.0
// -X main.revision=<commit>" (make build, the image build). Empty, they come from the
// module's build information.
var version, revision string

// buildVersion returns the version and revision of this binary: the ldflags values, else
// what Go recorded (the module version of `go install ...@v0.3.0`, the VCS revision of a
// build in a git checkout), else "dev" and "unknown".
func buildVersion() (ver, rev string) {
	ver, rev = version, revision
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return or(ver, "dev"), or(rev, "unknown")
	}
	if ver == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		ver = info.Main.Version
	}
	if rev == "" {
		modified := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" && modified {
			rev += "-dirty"
		}
	}
	return or(ver, "dev"), or(rev, "unknown")
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func writeVersion(w io.Writer) {
	ver, rev := buildVersion()
	fmt.Fprintf(w, "watchdog %s (revision %s, %s %s/%s)\n", ver, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
