package detect

import (
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
	"github.com/ncclwatch/watchdog/snapshot"
)

// knowledgeCSV is what the messages of NCCL, CUDA, the HCA and PyTorch mean, one row per
// meaning; its header comment documents the columns.
//
//go:embed knowledge.csv
var knowledgeCSV string

// knowledge is the table, read once. A bad row is left out and named in knowledgeErr, which
// TestKnowledgeTable requires to be nil and Evaluate reports as a note: never a crash.
var knowledge, knowledgeErr = readKnowledge(strings.NewReader(knowledgeCSV))

// role is the part a finding of the table plays when findings are merged (merge.go).
type role string

const (
	roleCause    role = "cause"    // an error that explains the deaths and stalls after it
	roleLink     role = "link"     // a link fault
	roleCrash    role = "crash"    // a process that went away
	roleStall    role = "stall"    // a process that stopped
	roleNote     role = "note"     // explains nothing else
	roleFallback role = "fallback" // reported only when nothing critical is found
)

// row is one meaning: the events it matches and the finding they make.
type row struct {
	id     string
	events []snapshot.EventKind
	codes  []int
	// notCode, notStage negate codes, stages.
	notCode, notStage bool
	stages            []string
	fatal             string // "", "yes", "no"
	detail, msg, src  pattern
	addr              string
	ignore            bool
	severity          incident.Severity
	kind              incident.Kind
	cause             incident.Cause
	role              role
	culprit           string
	key, under        template
	summary, advice   template
	then              []follow
	// witness: the row reads what one process saw of another (a closed or broken
	// connection), not that process's own word: its death is a suspicion until another
	// source confirms it.
	witness bool
	index   int // its place in the table: the earlier row leads a finding
}

// pattern is an optional case-insensitive regexp, negated by a leading '!'.
type pattern struct {
	re  *regexp.Regexp
	not bool
}

func (p pattern) holds(s string) bool { return p.re == nil || p.re.MatchString(s) != p.not }

// follow is a kind of event of the same process that follows from a row's event: every
// later one (adj 0), or only the one just before (-1) or after (+1) it.
type follow struct {
	kind snapshot.EventKind
	adj  int
}

// template is a text with {placeholder}s (see knowledge.csv).
type template string

var placeholder = regexp.MustCompile(`\{([a-z]+)\}`)

// render fills a template in; value names the placeholders.
func (t template) render(value map[string]string) string {
	return placeholder.ReplaceAllStringFunc(string(t), func(p string) string { return value[p[1:len(p)-1]] })
}

// columns are the table's header, in order.
var columns = []string{"id", "event", "code", "stage", "fatal", "detail", "msg", "src", "addr", "severity", "kind",
	"cause", "role", "culprit", "key", "then", "under", "summary", "advice", "witness"}

// optionalColumns are the last columns, which a row may leave out (empty).
const optionalColumns = 1

// Every value a column may hold, where the set is closed.
var (
	knownEvents = []snapshot.EventKind{snapshot.EventIBCompletion, snapshot.EventIBAsync, snapshot.EventSocketError,
		snapshot.EventConnClosedRemote, snapshot.EventConnClosedLocal, snapshot.EventProxyError, snapshot.EventCudaError,
		snapshot.EventSystemError, snapshot.EventBreadcrumb, snapshot.EventRASPeerDead, snapshot.EventWarn,
		snapshot.EventCommAbort, snapshot.EventCollMismatch, snapshot.EventSocketConnect, snapshot.EventNoInterface,
		snapshot.EventShmError, snapshot.EventDuplicateGPU, snapshot.EventVersionMismatch, snapshot.EventIBSetup,
		snapshot.EventRankConflict, snapshot.EventNetSizeMismatch, snapshot.EventP2PError, snapshot.EventNetError,
		snapshot.EventTorchTimeout, snapshot.EventTorchWorkStatus, snapshot.EventTorchTerminate, snapshot.EventTorchNCCLError,
		snapshot.EventLauncherExit, snapshot.EventTorchStore, snapshot.EventTorchStuck, snapshot.EventFRCollective,
		snapshot.EventFRCulprit, snapshot.EventFRMissing, snapshot.EventSignal, snapshot.EventRankExit, snapshot.EventTorchLagging}
	knownStages = []string{"init", "ready", "first", "run", "undated", "quoted", "stuck"}
	knownAddrs  = []string{"", "named", "loopback", "unlogged", "stray"}
	knownRoles  = []role{roleCause, roleLink, roleCrash, roleStall, roleNote, roleFallback}
	knownCauses = []incident.Cause{"unknown", incident.CauseDied, incident.CauseHostStalled, incident.CauseHostSlow,
		incident.CauseGPUBusy, incident.CauseGPUThrottled, incident.CauseGPUFault, incident.CauseLink, incident.CauseNetwork,
		incident.CauseMismatch, incident.CauseOrder, incident.CauseInit, incident.CauseSetup, incident.CauseApplication,
		incident.CauseNCCL}
	knownCulprits = []string{"reporter", "host", "peer", "peers", "remote", "shared", "ranks", "rank", "coderank", "none"}
	placeholders  = []string{"who", "host", "proc", "hca", "port", "peer", "peerhost", "peername", "peeraddr", "blame",
		"culprit", "detail", "text", "msg", "code", "event", "src", "status", "result", "errno", "ranks", "rank", "when",
		"origin", "strayaddr", "wrongtype", "bytes"}
)

// readKnowledge reads the table. It keeps the good rows and returns every bad one's fault.
func readKnowledge(r io.Reader) ([]row, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1 // the optional columns may be left out; parseRow checks the count
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("knowledge table: header: %w", err)
	}
	if !slices.Equal(header, columns) {
		return nil, fmt.Errorf("knowledge table: header is %q, want %q", header, columns)
	}
	var rows []row
	var errs []error
	ids := map[string]bool{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			errs = append(errs, fmt.Errorf("knowledge table: %w", err))
			if rec == nil {
				break
			}
			continue
		}
		rw, err := parseRow(rec)
		if err == nil && ids[rw.id] {
			err = errors.New("the id is used twice")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("knowledge table line %d (%s): %w", line, rec[0], err))
			continue
		}
		ids[rw.id] = true
		rw.index = len(rows)
		rows = append(rows, rw)
	}
	return rows, errors.Join(errs...)
}

// parseRow reads and checks one record.
func parseRow(rec []string) (row, error) {
	if len(rec) < len(columns)-optionalColumns || len(rec) > len(columns) {
		return row{}, fmt.Errorf("%d fields, want %d to %d", len(rec), len(columns)-optionalColumns, len(columns))
	}
	f := map[string]string{}
	for i, c := range columns {
		if i < len(rec) {
			f[c] = strings.TrimSpace(rec[i])
		}
	}
	rw := row{id: f["id"], fatal: f["fatal"], addr: f["addr"], kind: incident.Kind(f["kind"]), cause: incident.Cause(f["cause"]),
		role: role(f["role"]), culprit: f["culprit"], ignore: f["severity"] == "ignore", severity: incident.Severity(f["severity"])}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	check := func(col string, ok bool) {
		if !ok {
			bad("%s %q is not one the table knows", col, f[col])
		}
	}
	check("id", rw.id != "")
	for _, e := range strings.Split(f["event"], "|") {
		rw.events = append(rw.events, snapshot.EventKind(e))
		check("event", slices.Contains(knownEvents, snapshot.EventKind(e)))
	}
	var codes []string
	codes, rw.notCode = list(f["code"])
	for _, c := range codes {
		n, err := strconv.Atoi(c)
		check("code", err == nil)
		rw.codes = append(rw.codes, n)
	}
	rw.stages, rw.notStage = list(f["stage"])
	for _, s := range rw.stages {
		check("stage", slices.Contains(knownStages, s))
	}
	check("fatal", slices.Contains([]string{"", "yes", "no"}, rw.fatal))
	check("witness", f["witness"] == "" || f["witness"] == "yes")
	rw.witness = f["witness"] == "yes"
	check("addr", slices.Contains(knownAddrs, rw.addr))
	var err error
	for col, p := range map[string]*pattern{"detail": &rw.detail, "msg": &rw.msg, "src": &rw.src} {
		if *p, err = compile(f[col]); err != nil {
			bad("%s: %v", col, err)
		}
	}
	if rw.ignore {
		return rw, errors.Join(errs...)
	}
	check("severity", rw.severity == incident.SeverityCritical || rw.severity == incident.SeverityWarning)
	check("kind", slices.Contains(incident.Kinds, rw.kind))
	check("cause", slices.Contains(knownCauses, rw.cause))
	if rw.cause == "unknown" {
		rw.cause = incident.CauseUnknown
	}
	check("role", slices.Contains(knownRoles, rw.role))
	check("culprit", slices.Contains(knownCulprits, rw.culprit))
	then, _ := list(f["then"])
	for _, t := range then {
		fl := follow{kind: snapshot.EventKind(strings.TrimLeft(t, "<>")), adj: strings.Count(t, ">") - strings.Count(t, "<")}
		check("then", slices.Contains(knownEvents, fl.kind))
		rw.then = append(rw.then, fl)
	}
	rw.key, rw.under, rw.summary, rw.advice = template(f["key"]), template(f["under"]), template(f["summary"]), template(f["advice"])
	for _, col := range []string{"key", "under", "summary", "advice"} {
		for _, m := range placeholder.FindAllStringSubmatch(f[col], -1) {
			if !slices.Contains(placeholders, m[1]) {
				bad("%s: unknown placeholder {%s}", col, m[1])
			}
		}
		if strings.Count(f[col], "{") != strings.Count(f[col], "}") {
			bad("%s: a { or } without its pair", col)
		}
	}
	if rw.key == "" || rw.summary == "" {
		bad("a row that is not ignored needs a key and a summary")
	}
	return rw, errors.Join(errs...)
}

// list splits "a|b", or "!a|b" (negated).
func list(s string) ([]string, bool) {
	if s == "" {
		return nil, false
	}
	return strings.Split(strings.TrimPrefix(s, "!"), "|"), strings.HasPrefix(s, "!")
}

func compile(s string) (pattern, error) {
	if s == "" {
		return pattern{}, nil
	}
	p := pattern{not: strings.HasPrefix(s, "!")}
	re, err := regexp.Compile("(?i)" + strings.TrimPrefix(s, "!"))
	p.re = re
	return p, err
}

// matches reports whether the row holds for an event of p, logged at stage (see stageOf).
func (rw *row) matches(p *Proc, e snapshot.Event, stage string, addr func(string) bool, young bool) bool {
	if !slices.Contains(rw.events, e.Kind) ||
		len(rw.codes) > 0 && slices.Contains(rw.codes, e.Code) == rw.notCode ||
		rw.fatal != "" && (rw.fatal == "yes") != e.Fatal ||
		!rw.detail.holds(e.Detail) || !rw.msg.holds(e.Msg) || !rw.src.holds(e.Src) ||
		rw.culprit == "rank" && len(e.Ranks) == 0 {
		return false
	}
	if len(rw.stages) > 0 {
		in := slices.Contains(rw.stages, stage) || slices.Contains(rw.stages, "stuck") && !young && stuckInInit(p, e)
		if in == rw.notStage {
			return false
		}
	}
	return rw.addr == "" || addr(rw.addr)
}

// stuckInInit: the event came during init, from a process none of whose communicators
// finished it (or that has none): an error it never got past.
func stuckInInit(p *Proc, e snapshot.Event) bool {
	if e.Stage != snapshot.StageInit {
		return false
	}
	for _, c := range p.Comms {
		if c.State != snapshot.CommInit {
			return false
		}
	}
	return true
}
