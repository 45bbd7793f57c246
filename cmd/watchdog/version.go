package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/ncclwatch/watchdog/internal/buildinfo"
)

// version and revision are set at link time: go build -ldflags "-X main.version=v0.3.0
// -X main.revision=<commit>" (make build, the image build). Empty, they come from the
// module's build information (buildinfo.Read).
var version, revision string

// stamped is what the link stamped (buildinfo.Stamped).
func stamped() (string, string) { return version, revision }

// build is this binary's identity: the version command, the start log lines and
// ncclwatch_build_info all say the same.
func build() buildinfo.Info { return buildinfo.Read(stamped) }

func writeVersion(w io.Writer) {
	i := build()
	fmt.Fprintf(w, "watchdog %s (revision %s, %s %s/%s)\n", i.Version, i.Revision, i.GoVersion, runtime.GOOS, runtime.GOARCH)
}
