package ras

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Keep decides whether the per-rank counts of a rank, identified by the host (an IP address
// as NCCL prints it) and pid of its process, go into a parsed report. Missing and dead ranks
// are always kept. A nil Keep keeps every rank.
//
// Every node's RAS service reports the whole job; a sidecar that keeps only its own ranks
// publishes kilobytes instead of one entry per rank of the job.
type Keep func(host string, pid int) bool

// jsonReport mirrors NCCL's JSON STATUS reply (2.28.7+, client_support.cc). Fields we do
// not use are left out; encoding/json skips unknown ones.
type jsonReport struct {
	Version *string    `json:"nccl_version"`
	Comms   []jsonComm `json:"communicators"`
	RAS     *struct {
		Timeouts int `json:"timeouts_count"`
	} `json:"ras"`
}

type jsonComm struct {
	Hash    string        `json:"hash"`
	Size    int           `json:"size"`
	Ranks   []jsonRank    `json:"ranks"`
	Missing []jsonMissing `json:"missing_ranks"`
}

type jsonRank struct {
	Rank   int    `json:"rank"`
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	Status struct {
		InitState      int  `json:"init_state"`
		AsyncError     int  `json:"async_error"`
		FinalizeCalled bool `json:"finalize_called"`
		DestroyFlag    bool `json:"destroy_flag"`
		AbortFlag      bool `json:"abort_flag"`
	} `json:"status"`
	// NCCL prints the counts with %lu; uint64 takes every value it can print.
	Counts map[string]uint64 `json:"collective_counts"`
}

type jsonMissing struct {
	Rank   int    `json:"rank"`
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	Status struct {
		Unresponsive bool `json:"unresponsive"`
		Dead         bool `json:"considered_dead"`
	} `json:"status"`
}

// ParseJSONKeep parses a JSON STATUS reply, keeping per-rank counts only for ranks that
// keep accepts (nil: all). Text before the first line that opens the document is skipped.
// A value of the wrong type in a known field is skipped like an unknown field; a document
// that is not valid JSON (truncated, for one) is an error.
func ParseJSONKeep(b []byte, keep Keep) (*snapshot.RAS, error) {
	doc := jsonStart(b)
	if doc == nil {
		return nil, errors.New("ras json: no JSON object in reply")
	}
	var rep jsonReport
	if err := json.Unmarshal(doc, &rep); err != nil {
		if _, ok := errors.AsType[*json.UnmarshalTypeError](err); !ok {
			return nil, fmt.Errorf("ras json: %w", err)
		}
	}
	if rep.Version == nil && rep.Comms == nil {
		return nil, errors.New("ras json: neither nccl_version nor communicators: not a RAS STATUS reply")
	}
	out := &snapshot.RAS{Format: "json"}
	if rep.Version != nil {
		out.Version = *rep.Version
	}
	if rep.RAS != nil {
		out.Timeouts = max(rep.RAS.Timeouts, 0)
	}
	type proc struct {
		host string
		pid  int
	}
	dead := map[proc]bool{}
	unresp := map[proc]bool{}
	for i := range rep.Comms {
		jc := &rep.Comms[i]
		c := snapshot.RASComm{Hash: normHash(jc.Hash), Size: max(jc.Size, 0)}
		status := 0
		for _, r := range jc.Ranks {
			status = max(status, rankStatus(r))
			if e := resultName(r.Status.InitState); e != "" {
				c.Errors = setErr(c.Errors, r.Rank, "init:"+e)
			}
			if e := resultName(r.Status.AsyncError); e != "" {
				c.Errors = setErr(c.Errors, r.Rank, "async:"+e)
			}
			if keep != nil && !keep(r.Host, r.PID) {
				continue
			}
			var total int64
			for fn, n := range r.Counts {
				v := clampCount(n)
				total = satAdd(total, v)
				if c.Funcs == nil {
					c.Funcs = map[string]map[int]int64{}
				}
				if c.Funcs[fn] == nil {
					c.Funcs[fn] = map[int]int64{}
				}
				c.Funcs[fn][r.Rank] = v
			}
			if c.Counts == nil {
				c.Counts = map[int]int64{}
			}
			c.Counts[r.Rank] = total
		}
		for fn, ranks := range c.Funcs {
			if allZero(ranks) {
				delete(c.Funcs, fn)
			}
		}
		if len(c.Funcs) == 0 {
			c.Funcs = nil
		}
		if len(jc.Ranks) > 0 {
			c.Status = statusNames[status]
		}
		for _, m := range jc.Missing {
			c.Missing = append(c.Missing, m.Rank)
			p := proc{m.Host, m.PID}
			if m.Status.Dead {
				c.Dead = append(c.Dead, m.Rank)
				dead[p] = true
			} else if m.Status.Unresponsive {
				unresp[p] = true
			}
			if m.Status.Unresponsive || m.Status.Dead {
				c.Unresp = append(c.Unresp, m.Rank)
			}
		}
		sortUniq(&c.Missing)
		sortUniq(&c.Dead)
		sortUniq(&c.Unresp)
		out.Comms = append(out.Comms, c)
	}
	// JSON has no job-level dead or missing count: count the distinct processes behind
	// missing ranks. A dead process that held no communicator is not seen.
	out.Dead = len(dead)
	out.Unresp = len(unresp)
	return out, nil
}

// jsonStart returns b from the first line that starts with '{', skipping a preamble such
// as the comment line of our captures.
func jsonStart(b []byte) []byte {
	for len(b) > 0 {
		t := bytes.TrimLeft(b, " \t\r\n")
		if len(t) > 0 && t[0] == '{' {
			return t
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil
		}
		b = b[i+1:]
	}
	return nil
}

// NCCL's status levels, in the order client_support.cc ranks them.
var statusNames = [...]string{"NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT"}

func rankStatus(r jsonRank) int {
	switch {
	case r.Status.AbortFlag:
		return 4
	case r.Status.FinalizeCalled || r.Status.DestroyFlag:
		return 3
	case r.Status.InitState == 0:
		return 2
	default:
		return 1
	}
}

// resultName names an ncclResult_t that is an error: "" for success and in-progress.
func resultName(v int) string {
	switch v {
	case 0, 7:
		return ""
	case 1:
		return "ncclUnhandledCudaError"
	case 2:
		return "ncclSystemError"
	case 3:
		return "ncclInternalError"
	case 4:
		return "ncclInvalidArgument"
	case 5:
		return "ncclInvalidUsage"
	case 6:
		return "ncclRemoteError"
	case 8:
		return "ncclTimeout"
	default:
		return fmt.Sprintf("ncclResult(%d)", v)
	}
}

// setErr records the first error reported for a rank (init before async).
func setErr(m map[int]string, rank int, e string) map[int]string {
	if m == nil {
		m = map[int]string{}
	}
	if _, ok := m[rank]; !ok {
		m[rank] = e
	}
	return m
}

func clampCount(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func allZero(m map[int]int64) bool {
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

func sortUniq(s *[]int) {
	if len(*s) == 0 {
		*s = nil
		return
	}
	slices.Sort(*s)
	*s = slices.Compact(*s)
}
