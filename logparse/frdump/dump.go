package frdump

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// Form is how a dump was written.
type Form string

const (
	FormPickle Form = "pickle"
	FormJSON   Form = "json"
)

// KnownMajor and KnownMinor are the newest dump format this reader was written for ("2.10",
// torch 2.9-2.11); older 2.x formats lack fields that are then left unknown.
const (
	KnownMajor = 2
	KnownMinor = 10
)

// MaxDumpBytes bounds a dump read whole: torch's default 2000 entries with stack traces
// take a few MiB; 20000 take tens.
const MaxDumpBytes = 512 << 20

// Dump is one rank's Flight Recorder dump.
type Dump struct {
	Form    Form
	Version string // the dump's format version, e.g. "2.10"
	// CommLib is the NCCL version the process ran ("2.21.5"), when the dump says.
	CommLib string
	// Groups are the process groups of pg_config, by name order.
	Groups []Group
	// Status is pg_status: each group's last enqueued, started and completed collective,
	// by the group's pg_id (a number local to the process, also on every entry).
	Status map[int64]Status
	// Entries are the recorded works, in record order (oldest first).
	Entries []Entry
	// NCCLComms is how many communicators nccl_comm_state described.
	NCCLComms int
	// Problems are sentences on what could not be read; Partial is set when the file
	// itself could not be read to its end (truncated, a refused opcode), so that only
	// what came before is here.
	Problems []string
	Partial  bool
	// Skipped counts entries left out because a field they need was missing or malformed.
	Skipped int
}

// Group is one process group of pg_config.
type Group struct {
	Name  string
	Desc  string
	Ranks []int // global ranks in group-rank order; nil when the dump does not say
}

// Status is one group's pg_status; -1 when not recorded.
type Status struct {
	Enqueued, Started, Completed int64
}

// Entry is one recorded work.
type Entry struct {
	RecordID int64
	PGID     int64
	PGName   string
	PGDesc   string
	// CollSeq is collective_seq_id, P2PSeq p2p_seq_id (-1 when the dump has none), OpID op_id.
	CollSeq, P2PSeq, OpID int64
	// Name is profiling_name, e.g. "nccl:all_reduce", "nccl:send 0->1".
	Name string
	// State is "scheduled", "started" or "completed".
	State string
	// Created, Started and Completed are the times (ns since the epoch) it was recorded and
	// seen starting and completing; 0 when not seen.
	Created, Started, Completed int64
	DurationMs                  float64 // -1: not measured
	InSizes, OutSizes           [][]int64
	InDtypes, OutDtypes         []string
	P2P                         bool
	Retired                     bool
	TimeoutMs                   int64
	// Where is the first frame of its stack trace outside torch: "step (train.py:88)".
	Where string
}

// Sniff says whether the start of a file looks like a dump, and in which form. A pickle is
// only a candidate: Read decides.
func Sniff(head []byte) (Form, bool) {
	if len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5 {
		return FormPickle, true
	}
	t := bytes.TrimLeft(head, " \t\r\n")
	if len(t) > 0 && t[0] == '{' && bytes.Contains(head, []byte(`"version"`)) &&
		(bytes.Contains(head, []byte(`"pg_config"`)) || bytes.Contains(head, []byte(`"entries"`))) {
		return FormJSON, true
	}
	return "", false
}

// ErrNotDump is returned for a file that holds no Flight Recorder dump.
var ErrNotDump = errors.New("not a Flight Recorder dump")

// Read parses a dump in either form. It fails only when nothing of a dump could be read;
// a dump read in part comes back with Partial set and its Problems saying why.
func Read(b []byte, lim Limits) (*Dump, error) {
	form, ok := Sniff(b[:min(len(b), 4096)])
	if !ok {
		return nil, fmt.Errorf("%w: it is neither a pickle nor a JSON object with a version and pg_config or entries", ErrNotDump)
	}
	var v any
	var err error
	if form == FormPickle {
		v, err = DecodePickle(b, lim)
	} else {
		v, err = DecodeJSON(b, lim)
	}
	top, isDict := v.(*Dict)
	if !isDict {
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotDump, err)
		}
		return nil, fmt.Errorf("%w: the %s holds a %s, not a dict", ErrNotDump, form, typeName(v))
	}
	_, hasVersion := top.Get("version")
	_, hasEntries := top.Get("entries")
	_, hasConfig := top.Get("pg_config")
	if !hasVersion && !hasEntries && !hasConfig {
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotDump, err)
		}
		return nil, fmt.Errorf("%w: the %s is a dict without version, pg_config or entries", ErrNotDump, form)
	}
	d := &Dump{Form: form, Status: map[int64]Status{}}
	if err != nil {
		d.Partial = true
		d.problem("%v: only what comes before was read", err)
	}
	d.fill(top)
	return d, nil
}

func (d *Dump) problem(format string, args ...any) {
	if len(d.Problems) < 16 {
		d.Problems = append(d.Problems, fmt.Sprintf(format, args...))
	}
}

// VersionKnown reports whether the dump's format is one this reader was written for.
func (d *Dump) VersionKnown() bool {
	major, minor, ok := parseVersion(d.Version)
	return ok && major == KnownMajor && minor <= KnownMinor
}

func parseVersion(v string) (int, int, bool) {
	a, b, ok := strings.Cut(v, ".")
	if !ok {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(a)
	minor, err2 := strconv.Atoi(b)
	return major, minor, err1 == nil && err2 == nil
}

func (d *Dump) fill(top *Dict) {
	if v, ok := top.Get("version"); ok {
		d.Version = scalarString(v)
	}
	switch {
	case d.Version == "":
		d.problem("the dump has no format version: its fields were read by name")
	case !d.VersionKnown():
		d.problem("the dump's format version %q is not one this reader knows (%d.0 to %d.%d): what was recognisable was read", d.Version, KnownMajor, KnownMajor, KnownMinor)
	}
	if v, ok := top.Get("comm_lib_version"); ok {
		d.CommLib = scalarString(v)
	}
	if v, ok := top.Get("pg_config"); ok {
		d.readConfig(v)
	}
	if v, ok := top.Get("pg_status"); ok {
		d.readStatus(v)
	}
	if v, ok := top.Get("nccl_comm_state"); ok {
		if m, ok := v.(*Dict); ok {
			d.NCCLComms = len(m.Keys)
		}
	}
	v, ok := top.Get("entries")
	if !ok {
		return
	}
	l, ok := v.(*List)
	if !ok {
		d.problem("entries is a %s, not a list: no entry was read", typeName(v))
		return
	}
	d.Entries = make([]Entry, 0, min(len(l.Items), MaxEntries))
	budget := readBudget(l.Items)
	for i, it := range l.Items {
		if len(d.Entries) >= MaxEntries {
			d.problem("the dump holds %d entries: the first %d were read", len(l.Items), MaxEntries)
			break
		}
		if budget <= 0 {
			d.problem("the entries' sizes, types and stack frames hold more values than the reader's bound: entries from %d on were not read", i)
			break
		}
		e, why := readEntry(it, &budget)
		if why != "" {
			d.Skipped++
			if d.Skipped <= 3 {
				d.problem("entry %d was left out: %s", i, why)
			}
			continue
		}
		d.Entries = append(d.Entries, e)
	}
}

func (d *Dump) readConfig(v any) {
	m, ok := v.(*Dict)
	if !ok {
		d.problem("pg_config is a %s, not a dict: the groups' ranks are unknown", typeName(v))
		return
	}
	for i, k := range m.Keys {
		g := Group{Name: scalarString(k)}
		switch info := m.Vals[i].(type) {
		case *Dict:
			if n, ok := info.Get("name"); ok && scalarString(n) != "" {
				g.Name = scalarString(n)
			}
			if desc, ok := info.Get("desc"); ok {
				g.Desc = scalarString(desc)
			}
			if r, ok := info.Get("ranks"); ok {
				ranks, err := rankList(r)
				if err != nil {
					d.problem("group %s: its ranks %s", g.Name, err)
				}
				g.Ranks = ranks
			}
		case *List, Tuple, string:
			// Early dumps mapped a group to its ranks alone.
			ranks, err := rankList(info)
			if err != nil {
				d.problem("group %s: its ranks %s", g.Name, err)
			}
			g.Ranks = ranks
		default:
			d.problem("group %s is described by a %s", g.Name, typeName(info))
		}
		d.Groups = append(d.Groups, g)
	}
	sort.SliceStable(d.Groups, func(a, b int) bool { return nameLess(d.Groups[a].Name, d.Groups[b].Name) })
}

// nameLess orders group names numerically when both are numbers ("2" before "10").
func nameLess(a, b string) bool {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	if errA == nil && errB == nil {
		return x < y
	}
	if (errA == nil) != (errB == nil) {
		return errA == nil
	}
	return a < b
}

// maxGroupRanks bounds the ranks read for one group.
const maxGroupRanks = 1 << 20

// rankList reads a group's ranks: torch writes them as the text of a list ("[0, 1, 2]").
func rankList(v any) ([]int, error) {
	var items []any
	switch t := v.(type) {
	case string:
		s := strings.TrimSpace(t)
		s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
		if strings.TrimSpace(s) == "" {
			return []int{}, nil
		}
		parts := strings.Split(s, ",")
		if len(parts) > maxGroupRanks {
			return nil, fmt.Errorf("are more than %d", maxGroupRanks)
		}
		out := make([]int, 0, len(parts))
		for _, p := range parts {
			r, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil || r < 0 {
				return nil, fmt.Errorf("are not a list of numbers: %q", cut(t, 80))
			}
			out = append(out, r)
		}
		return out, nil
	case *List:
		items = t.Items
	case Tuple:
		items = t
	default:
		return nil, fmt.Errorf("are a %s", typeName(v))
	}
	if len(items) > maxGroupRanks {
		return nil, fmt.Errorf("are more than %d", maxGroupRanks)
	}
	out := make([]int, 0, len(items))
	for _, it := range items {
		r, ok := asInt(it)
		if !ok || r < 0 || r > 1<<30 {
			return nil, fmt.Errorf("hold a %s", typeName(it))
		}
		out = append(out, int(r))
	}
	return out, nil
}

func (d *Dump) readStatus(v any) {
	m, ok := v.(*Dict)
	if !ok {
		d.problem("pg_status is a %s, not a dict", typeName(v))
		return
	}
	for i, k := range m.Keys {
		id, ok := asInt(k)
		if !ok {
			continue
		}
		s := Status{Enqueued: -1, Started: -1, Completed: -1}
		if st, ok := m.Vals[i].(*Dict); ok {
			s.Enqueued = intField(st, "last_enqueued_collective", -1)
			s.Started = intField(st, "last_started_collective", -1)
			s.Completed = intField(st, "last_completed_collective", -1)
		}
		d.Status[id] = s
	}
}

// MaxEntries bounds the entries read from one dump (torch keeps 2000 by default).
const MaxEntries = 200_000

// readBudget bounds the values the entries' lists may make the reader visit in all: a
// pickle's memo lets one list be referred to from every entry, so the values visited can
// be many more than the values decoded.
func readBudget(entries []any) int {
	return max(64*len(entries), 1<<16)
}

// readEntry reads one entry, spending budget on the values of its lists; why says what made
// it unreadable ("" when it was read).
func readEntry(v any, budget *int) (Entry, string) {
	m, ok := v.(*Dict)
	if !ok {
		return Entry{}, "it is a " + typeName(v) + ", not a dict"
	}
	e := Entry{
		RecordID:   intField(m, "record_id", -1),
		PGID:       intField(m, "pg_id", -1),
		CollSeq:    intField(m, "collective_seq_id", -1),
		P2PSeq:     intField(m, "p2p_seq_id", -1),
		OpID:       intField(m, "op_id", -1),
		Created:    intField(m, "time_created_ns", 0),
		Started:    intField(m, "time_discovered_started_ns", 0),
		Completed:  intField(m, "time_discovered_completed_ns", 0),
		TimeoutMs:  intField(m, "timeout_ms", 0),
		DurationMs: -1,
	}
	if e.CollSeq < 0 {
		// Dumps before p2p had their own sequence called it seq_id.
		e.CollSeq = intField(m, "seq_id", -1)
	}
	name, ok := m.Get("profiling_name")
	if !ok {
		return e, "it has no profiling_name"
	}
	e.Name = scalarString(name)
	pg, ok := m.Get("process_group")
	if !ok {
		// The first dump formats named a group by its pg_id alone.
		if e.PGID < 0 {
			return e, "it has no process_group and no pg_id"
		}
		pg = strconv.FormatInt(e.PGID, 10)
	}
	var pair []any
	switch t := pg.(type) {
	case Tuple:
		pair = t
	case *List:
		pair = t.Items
	case string:
		pair = []any{t}
	}
	if len(pair) == 0 {
		return e, "its process_group is a " + typeName(pg)
	}
	e.PGName = scalarString(pair[0])
	if len(pair) > 1 {
		e.PGDesc = scalarString(pair[1])
	}
	if e.CollSeq < 0 {
		return e, "it has no collective_seq_id"
	}
	if s, ok := m.Get("state"); ok {
		e.State = scalarString(s)
	}
	switch e.State {
	case "scheduled", "started", "completed":
	case "":
		// Without a state, the times say it.
		switch {
		case e.Completed > 0:
			e.State = "completed"
		case e.Started > 0:
			e.State = "started"
		default:
			e.State = "scheduled"
		}
	default:
		return e, fmt.Sprintf("its state %q is not scheduled, started or completed", cut(e.State, 40))
	}
	if v, ok := m.Get("duration_ms"); ok {
		if f, ok := asFloat(v); ok {
			e.DurationMs = f
		}
	}
	e.InSizes = sizes(m, "input_sizes", budget)
	e.OutSizes = sizes(m, "output_sizes", budget)
	e.InDtypes = stringList(m, "input_dtypes", budget)
	e.OutDtypes = stringList(m, "output_dtypes", budget)
	if v, ok := m.Get("is_p2p"); ok {
		e.P2P, _ = v.(bool)
	} else {
		base := strings.Fields(opBase(e.Name))
		e.P2P = len(base) > 0 && (base[0] == "send" || base[0] == "recv")
	}
	if v, ok := m.Get("retired"); ok {
		e.Retired, _ = v.(bool)
	}
	if v, ok := m.Get("frames"); ok {
		e.Where = userFrame(v, budget)
	}
	return e, ""
}

// userFrame names the first frame of a stack trace outside torch itself.
func userFrame(v any, budget *int) string {
	l, ok := v.(*List)
	if !ok {
		return ""
	}
	for k, f := range l.Items {
		if k >= 64 || *budget <= 0 {
			break
		}
		*budget--
		m, ok := f.(*Dict)
		if !ok {
			continue
		}
		file, name := scalarString(get(m, "filename")), scalarString(get(m, "name"))
		if file == "" || strings.Contains(file, "/torch/") || strings.HasPrefix(file, "torch/") || strings.HasPrefix(file, "<") {
			continue
		}
		line, _ := asInt(get(m, "line"))
		base := file[strings.LastIndexByte(file, '/')+1:]
		return cut(fmt.Sprintf("%s (%s:%d)", name, base, line), 120)
	}
	return ""
}

func get(m *Dict, key string) any {
	v, _ := m.Get(key)
	return v
}

// maxDims bounds the tensors and dimensions read for one entry's sizes.
const maxDims = 4096

func sizes(m *Dict, key string, budget *int) [][]int64 {
	l, ok := get(m, key).(*List)
	if !ok {
		return nil
	}
	out := make([][]int64, 0, min(len(l.Items), maxDims, max(*budget, 0)))
	for k, t := range l.Items {
		if k >= maxDims || *budget <= 0 {
			break
		}
		*budget--
		var dims []any
		switch s := t.(type) {
		case *List:
			dims = s.Items
		case Tuple:
			dims = s
		}
		row := make([]int64, 0, min(len(dims), 16))
		for j, x := range dims {
			if j >= 64 || *budget <= 0 {
				break
			}
			*budget--
			if n, ok := asInt(x); ok {
				row = append(row, n)
			}
		}
		out = append(out, row)
	}
	return out
}

func stringList(m *Dict, key string, budget *int) []string {
	l, ok := get(m, key).(*List)
	if !ok {
		return nil
	}
	out := make([]string, 0, min(len(l.Items), maxDims, max(*budget, 0)))
	for k, x := range l.Items {
		if k >= maxDims || *budget <= 0 {
			break
		}
		*budget--
		out = append(out, scalarString(x))
	}
	return out
}

// intField reads an integer field; JSON dumps write pg_status as strings.
func intField(m *Dict, key string, def int64) int64 {
	v, ok := m.Get(key)
	if !ok {
		return def
	}
	if n, ok := asInt(v); ok {
		return n
	}
	return def
}

func asInt(v any) (int64, bool) {
	switch t := v.(type) {
	case int64:
		return t, true
	case bool:
		if t {
			return 1, true
		}
		return 0, true
	case float64:
		if t == float64(int64(t)) {
			return int64(t), true
		}
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
		return n, err == nil
	case *big.Int:
		// Beyond int64: no count or time of a dump is.
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch t := v.(type) {
	case float64:
		return t, true
	case int64:
		return float64(t), true
	case string:
		f, err := strconv.ParseFloat(t, 64)
		return f, err == nil
	}
	return 0, false
}

// scalarString is a string value, or a number's text; "" for anything else.
func scalarString(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case Bytes:
		return string(t)
	case int64:
		return strconv.FormatInt(t, 10)
	case *big.Int:
		return t.String()
	case float64:
		return strconv.FormatFloat(t, 'g', -1, 64)
	}
	return ""
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
