package gpu

import (
	"bytes"
	"cmp"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/ncclwatch/watchdog/snapshot"
)

// gpuProcs turns NVML's process list into the snapshot's: the largest by memory first (then
// by pid), at most snapshot.MaxGPUProcs, each named from /proc where its pid is visible.
func (s *Sampler) gpuProcs(list []ComputeProcess) []snapshot.GPUProc {
	if len(list) == 0 {
		return nil
	}
	list = slices.Clone(list)
	mem := func(p ComputeProcess) uint64 {
		if p.UsedMemory == MemoryUnknown {
			return 0
		}
		return p.UsedMemory
	}
	slices.SortFunc(list, func(a, b ComputeProcess) int {
		if c := cmp.Compare(mem(b), mem(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.PID, b.PID)
	})
	list = list[:min(len(list), snapshot.MaxGPUProcs)]
	out := make([]snapshot.GPUProc, 0, len(list))
	for _, p := range list {
		// Rounded up: a process holding any memory never shows 0, which means unknown.
		mib := mem(p) >> 20
		if mem(p)&(1<<20-1) != 0 {
			mib++
		}
		out = append(out, snapshot.GPUProc{PID: p.PID, MemMiB: int(min(mib, 1<<40)), Name: s.procName(p.PID)})
	}
	return out
}

// maxComm bounds the read of /proc/<pid>/comm (the kernel's TASK_COMM_LEN is 16).
const maxComm = 64

// procName is the pid's /proc/<pid>/comm, "" where it cannot be read (another pid
// namespace, hidepid, gone).
func (s *Sampler) procName(pid int) string {
	if pid <= 0 {
		return ""
	}
	f, err := os.Open(filepath.Join(s.procRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxComm))
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\n")
	if !utf8.Valid(b) {
		b = bytes.ToValidUTF8(b, []byte("?"))
	}
	return string(b)
}
