package profile

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Region files are FilePrefix + host + "." + pid + FileSuffix; the plugin writes them under
// a hidden temporary name first and renames them into place.
const (
	FilePrefix = "ncclwatch-prof."
	FileSuffix = ".bin"
)

// maxFileSize bounds what Read maps: far above any geometry checkHeader accepts for real.
const maxFileSize = 1 << 30

// FileName is the name the plugin gives the region of process pid on host (the host name up
// to its first dot, as NCCL prints it).
func FileName(host string, pid int) string {
	return FilePrefix + host + "." + strconv.Itoa(pid) + FileSuffix
}

// IsRegionFile says whether a directory entry's name is a region file.
func IsRegionFile(name string) bool {
	return strings.HasPrefix(name, FilePrefix) && strings.HasSuffix(name, FileSuffix) &&
		len(name) > len(FilePrefix)+len(FileSuffix)
}

// Found is one region file of a directory and what reading it gave: a Region, or an error
// that says why not (ErrTruncated, ErrVersion, ErrNotRegion, ErrCorrupt, or an I/O error).
type Found struct {
	Path   string
	Region *Region
	Err    error
}

// Scan reads every region file in dir, in name order. Its error is about dir itself; each
// file's own trouble is in its Found.
func Scan(dir string) ([]Found, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("scan profiler regions: %w", err)
	}
	var out []Found
	for _, e := range entries {
		if e.IsDir() || !IsRegionFile(e.Name()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		r, err := Read(p)
		out = append(out, Found{Path: p, Region: r, Err: err})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}
