// Package proc watches the liveness of rank processes through /proc: a log file named
// nccl.<host>.<pid>.log names its process, and when that pid is visible (the sidecar shares
// the job's pid namespace) the Watcher notices the process exit within a poll period. It
// also reads the launcher's rank variables (RANK, LOCAL_RANK, ...) from the process
// environment when permissions allow, and keeps each running process's scheduler state and
// CPU use from the same reads of /proc/<pid>/stat: the state is the main thread's (the one
// that issues a rank's collectives), the CPU time the whole process's.
//
// Pids are reused, so a process is identified by its pid and its start time (field 22 of
// /proc/<pid>/stat); the same pid with another start time is another process, and the one
// watched has exited.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Stat is what the Watcher uses of /proc/<pid>/stat.
type Stat struct {
	PID   int
	Comm  string // the executable name, up to 15 bytes; may hold spaces and parentheses
	State byte   // R, S, D, Z (zombie: exited, not yet reaped), X (dead), ...
	// UTime and STime are the CPU time spent in user and kernel mode, in clock ticks
	// (fields 14 and 15; the process's own threads, not its waited-for children).
	UTime, STime uint64
	// StartTicks is the start time in clock ticks after boot (field 22). With the pid it
	// names a process: a reused pid has a later start time.
	StartTicks uint64
}

// CPUTicks is the process's CPU time, user and kernel, in clock ticks.
func (s Stat) CPUTicks() uint64 { return s.UTime + s.STime }

// Exited reports whether the state says the process has terminated.
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

// ParseStat parses the content of /proc/<pid>/stat. The comm field (2) is in parentheses
// and may itself contain spaces and parentheses, so the fields after it are found from the
// last ')'.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, errors.New("proc stat: no (comm)")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid <= 0 {
		return Stat{}, fmt.Errorf("proc stat: pid %q", clip(b[:open]))
	}
	// Fields 3.. follow the comm; field 22 (starttime) is the 20th of them.
	rest := bytes.Fields(b[end+1:])
	if len(rest) < 20 {
		return Stat{}, fmt.Errorf("proc stat: %d fields after comm, want at least 20", len(rest))
	}
	if len(rest[0]) != 1 {
		return Stat{}, fmt.Errorf("proc stat: state %q", clip(rest[0]))
	}
	// Fields 14, 15 (utime, stime) are the 12th and 13th after the comm.
	utime, err := strconv.ParseUint(string(rest[11]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("proc stat: utime %q", clip(rest[11]))
	}
	stime, err := strconv.ParseUint(string(rest[12]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("proc stat: stime %q", clip(rest[12]))
	}
	start, err := strconv.ParseUint(string(rest[19]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("proc stat: starttime %q", clip(rest[19]))
	}
	return Stat{PID: pid, Comm: string(b[open+1 : end]), State: rest[0][0], UTime: utime, STime: stime,
		StartTicks: start}, nil
}

// Env holds the launcher variables of a rank process. Numbers are -1 and strings empty
// when absent or unreadable.
type Env struct {
	Rank       int    // RANK
	LocalRank  int    // LOCAL_RANK
	WorldSize  int    // WORLD_SIZE
	GroupRank  int    // GROUP_RANK (torchrun: the node's rank)
	RunID      string // TORCHELASTIC_RUN_ID
	SlurmJobID string // SLURM_JOB_ID
	MasterAddr string // MASTER_ADDR
}

// UnknownEnv is an Env with nothing known.
var UnknownEnv = Env{Rank: -1, LocalRank: -1, WorldSize: -1, GroupRank: -1}

// JobID is TORCHELASTIC_RUN_ID, else SLURM_JOB_ID.
func (e Env) JobID() string {
	if e.RunID != "" {
		return e.RunID
	}
	return e.SlurmJobID
}

// maxEnvValue caps a kept string value; the environment is the job's, not ours.
const maxEnvValue = 256

// ParseEnviron extracts the launcher variables from the content of /proc/<pid>/environ:
// NUL-separated KEY=VALUE entries. The first occurrence of a key wins, as with getenv.
// Numbers that do not parse as non-negative integers stay -1.
func ParseEnviron(b []byte) Env {
	e := UnknownEnv
	seen := map[string]bool{}
	for len(b) > 0 {
		var kv []byte
		if i := bytes.IndexByte(b, 0); i >= 0 {
			kv, b = b[:i], b[i+1:]
		} else {
			kv, b = b, nil
		}
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		key := string(k)
		switch key {
		case "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK",
			"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR":
		default:
			continue
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		switch key {
		case "RANK":
			e.Rank = envInt(v)
		case "LOCAL_RANK":
			e.LocalRank = envInt(v)
		case "WORLD_SIZE":
			e.WorldSize = envInt(v)
		case "GROUP_RANK":
			e.GroupRank = envInt(v)
		case "TORCHELASTIC_RUN_ID":
			e.RunID = envString(v)
		case "SLURM_JOB_ID":
			e.SlurmJobID = envString(v)
		case "MASTER_ADDR":
			e.MasterAddr = envString(v)
		}
	}
	return e
}

func envInt(v []byte) int {
	n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func envString(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) > maxEnvValue {
		v = v[:maxEnvValue]
	}
	return string(bytes.ToValidUTF8(v, []byte("?")))
}

func clip(b []byte) string {
	if len(b) > 32 {
		b = b[:32]
	}
	return string(b)
}

// ParseSchedstat reads a task's /proc/<pid>/task/<tid>/schedstat: the time it ran on a
// CPU, the time it waited on a run queue for one (both in nanoseconds) and its timeslices.
// It returns the run-queue wait: a process whose threads wait long for a CPU is starved of
// one (other processes on its cores, a CPU limit), whatever its own CPU use says.
func ParseSchedstat(b []byte) (waitNS uint64, err error) {
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, fmt.Errorf("proc schedstat: %d fields in %q", len(f), clip(b))
	}
	w, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc schedstat: wait %q: %w", clip(f[1]), err)
	}
	return w, nil
}
