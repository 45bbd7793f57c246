//go:build !unix

package profile

import (
	"fmt"
	"os"
)

// Read decodes the region file at path. Without mmap (the plugin only runs on Linux) this
// is a plain read: slots being written at that moment show up in Busy.
func Read(path string) (*Region, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read profiler region: %w", err)
	}
	r, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.Path = path
	return r, nil
}
