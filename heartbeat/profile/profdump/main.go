// Command profdump prints the NCCL watchdog profiler regions of a directory (or the given
// region files) as JSON: one object per file with its path and either the decoded region or
// the error that says why it could not be read. It needs no cgo, so a static build
// (CGO_ENABLED=0) runs on a GPU machine that has no Go toolchain.
//
//	profdump [-dir DIR] [FILE...]
//
// DIR defaults to $NCCLWATCH_PROFILER_DIR, else /dev/shm: where the plugin writes.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/ncclwatch/watchdog/heartbeat/profile"
)

type entry struct {
	Path   string          `json:"path"`
	Error  string          `json:"error,omitempty"`
	Region *profile.Region `json:"region,omitempty"`
}

func main() {
	def := os.Getenv("NCCLWATCH_PROFILER_DIR")
	if def == "" {
		def = "/dev/shm"
	}
	dir := flag.String("dir", def, "directory of ncclwatch-prof.*.bin region files")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: profdump [-dir DIR] [FILE...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	var found []profile.Found
	if flag.NArg() > 0 {
		for _, p := range flag.Args() {
			r, err := profile.Read(p)
			found = append(found, profile.Found{Path: p, Region: r, Err: err})
		}
	} else {
		var err error
		if found, err = profile.Scan(*dir); err != nil {
			log.Error("cannot list regions", "err", err)
			os.Exit(1)
		}
	}
	out := make([]entry, 0, len(found))
	for _, f := range found {
		e := entry{Path: f.Path, Region: f.Region}
		if f.Err != nil {
			e.Error = f.Err.Error()
			log.Warn("region not read", "path", f.Path, "err", f.Err)
		}
		out = append(out, e)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		log.Error("cannot write JSON", "err", err)
		os.Exit(1)
	}
}
