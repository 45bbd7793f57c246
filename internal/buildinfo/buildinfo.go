// Package buildinfo says which build of the watchdog runs, and exports it the way
// Prometheus exporters do: ncclwatch_build_info{version,revision,goversion} 1, so that a
// dashboard or an alert can tell the versions of a fleet apart and join them to any series.
package buildinfo

import (
	"errors"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Info is a build's identity.
type Info struct {
	Version   string // a release tag, "(devel)" for a build from a checkout, or "unknown"
	Revision  string // the VCS commit, "-dirty" when built from a modified tree, or "unknown"
	GoVersion string
}

// Stamped gives what the command was built with (-ldflags "-X main.version=... -X
// main.revision=..."); an empty string where a value was not stamped.
type Stamped func() (version, revision string)

// Read returns the running build's identity: what stamped gives where it gives something
// (nil: nothing), else what the Go toolchain recorded in the binary (the module version of
// `go install ...@v1.2.3`, the VCS revision of a build in a checkout).
func Read(stamped Stamped) Info {
	i := Info{Version: "unknown", Revision: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		i.GoVersion = bi.GoVersion
		if bi.Main.Version != "" {
			i.Version = bi.Main.Version
		}
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && i.Revision != "unknown" {
			i.Revision += "-dirty"
		}
	}
	if stamped != nil {
		v, r := stamped()
		if v = strings.TrimSpace(v); v != "" {
			i.Version = v
		}
		if r = strings.TrimSpace(r); r != "" {
			i.Revision = r
		}
	}
	if i.GoVersion == "" {
		i.GoVersion = "unknown"
	}
	return i
}

// Collector exports i as ncclwatch_build_info.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_build_info",
		Help: "Always 1; its labels say which build runs (version, VCS revision, Go version)."},
		[]string{"version", "revision", "goversion"})
	g.WithLabelValues(i.Version, i.Revision, i.GoVersion).Set(1)
	return g
}

// Register exports i on reg. Components that share a registry (the demo runs sidecars
// and a detector in one process) register it once: a second registration is no error.
func Register(reg prometheus.Registerer, i Info) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(i.Collector())
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		return nil
	}
	return err
}
