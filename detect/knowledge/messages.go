package knowledge

import (
	_ "embed"
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

// messagesCSV is what the messages of NCCL, CUDA, the HCA and PyTorch mean, one row per
// meaning; its header comment documents the columns.
//
//go:embed messages.csv
var messagesCSV string

// Messages is the table, read once. A bad row is left out and named in MessagesErr, which
// TestMessagesTable requires to be nil and detect reports as a note: never a crash.
var Messages, MessagesErr = ReadMessages(strings.NewReader(messagesCSV))

// Row is one meaning: the events it matches and the finding they make.
type Row struct {
	ID     string
	events []snapshot.EventKind
	codes  []int
	// notCode, notStage negate codes, stages.
	notCode, notStage bool
	stages            []string
	fatal             string // "", "yes", "no"
	detail, msg, src  pattern
	addr              string
	Ignore            bool
	Severity          incident.Severity
	Kind              incident.Kind
	Cause             incident.Cause
	Role              Role
	Culprit           string
	Key, Under        Template
	Summary, Advice   Template
	Then              []Follow
	// Origin tells the finding from others of its role, for the explains table.
	Origin Origin
	Index  int // its place in the table: the earlier row leads a finding
}

// pattern is an optional case-insensitive regexp, negated by a leading '!'.
type pattern struct {
	re  *regexp.Regexp
	not bool
}

func (p pattern) holds(s string) bool { return p.re == nil || p.re.MatchString(s) != p.not }

// Follow is a kind of event of the same process that follows from a row's event: every
// later one (Adj 0), or only the one just before (-1) or after (+1) it.
type Follow struct {
	Kind snapshot.EventKind
	Adj  int
}

// Template is a text with {placeholder}s (see messages.csv).
type Template string

var placeholder = regexp.MustCompile(`\{([a-z]+)\}`)

// Render fills a template in; value names the placeholders.
func (t Template) Render(value map[string]string) string {
	return placeholder.ReplaceAllStringFunc(string(t), func(p string) string { return value[p[1:len(p)-1]] })
}

// columns are the table's header, in order.
var columns = []string{"id", "event", "code", "stage", "fatal", "detail", "msg", "src", "addr", "severity", "kind",
	"cause", "role", "culprit", "key", "then", "under", "summary", "advice", "origin"}

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
	knownRoles  = []Role{RoleCause, RoleLink, RoleCrash, RoleStall, RoleNote, RoleFallback}
	rowOrigins  = []Origin{"", Witness, SilentInit, NetSize, Versions}
	knownCauses = []incident.Cause{"unknown", incident.CauseDied, incident.CauseHostStalled, incident.CauseHostSlow,
		incident.CauseGPUBusy, incident.CauseGPUThrottled, incident.CauseGPUFault, incident.CauseLink, incident.CauseNetwork,
		incident.CauseMismatch, incident.CauseOrder, incident.CauseInit, incident.CauseSetup, incident.CauseApplication,
		incident.CauseNCCL}
	knownCulprits = []string{"reporter", "host", "peer", "peers", "remote", "shared", "ranks", "rank", "coderank", "none"}
	placeholders  = []string{"who", "host", "proc", "hca", "port", "peer", "peerhost", "peername", "peeraddr", "blame",
		"culprit", "detail", "text", "msg", "code", "event", "src", "status", "result", "errno", "ranks", "rank", "when",
		"origin", "strayaddr", "wrongtype", "bytes"}
)

// ReadMessages reads the table. It keeps the good rows and returns every bad one's fault.
func ReadMessages(r io.Reader) ([]Row, error) {
	var rows []Row
	ids := map[string]bool{}
	err := readTable(r, "knowledge", columns, func(rec []string) error {
		rw, err := parseRow(rec)
		if err == nil && ids[rw.ID] {
			err = errors.New("the id is used twice")
		}
		if err == nil {
			ids[rw.ID], rw.Index = true, len(rows)
			rows = append(rows, rw)
		}
		return err
	})
	return rows, err
}

// parseRow reads and checks one record.
func parseRow(rec []string) (Row, error) {
	if len(rec) < len(columns)-optionalColumns || len(rec) > len(columns) {
		return Row{}, fmt.Errorf("%d fields, want %d to %d", len(rec), len(columns)-optionalColumns, len(columns))
	}
	f := map[string]string{}
	for i, c := range columns {
		if i < len(rec) {
			f[c] = strings.TrimSpace(rec[i])
		}
	}
	rw := Row{ID: f["id"], fatal: f["fatal"], addr: f["addr"], Kind: incident.Kind(f["kind"]), Cause: incident.Cause(f["cause"]),
		Role: Role(f["role"]), Culprit: f["culprit"], Ignore: f["severity"] == "ignore", Severity: incident.Severity(f["severity"]),
		Origin: Origin(f["origin"])}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	check := func(col string, ok bool) {
		if !ok {
			bad("%s %q is not one the table knows", col, f[col])
		}
	}
	check("id", rw.ID != "")
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
	check("origin", slices.Contains(rowOrigins, rw.Origin))
	check("addr", slices.Contains(knownAddrs, rw.addr))
	var err error
	for col, p := range map[string]*pattern{"detail": &rw.detail, "msg": &rw.msg, "src": &rw.src} {
		if *p, err = compile(f[col]); err != nil {
			bad("%s: %v", col, err)
		}
	}
	if rw.Ignore {
		return rw, errors.Join(errs...)
	}
	check("severity", rw.Severity == incident.SeverityCritical || rw.Severity == incident.SeverityWarning)
	check("kind", slices.Contains(incident.Kinds, rw.Kind))
	check("cause", slices.Contains(knownCauses, rw.Cause))
	if rw.Cause == "unknown" {
		rw.Cause = incident.CauseUnknown
	}
	check("role", slices.Contains(knownRoles, rw.Role))
	check("culprit", slices.Contains(knownCulprits, rw.Culprit))
	then, _ := list(f["then"])
	for _, t := range then {
		fl := Follow{Kind: snapshot.EventKind(strings.TrimLeft(t, "<>")), Adj: strings.Count(t, ">") - strings.Count(t, "<")}
		check("then", slices.Contains(knownEvents, fl.Kind))
		rw.Then = append(rw.Then, fl)
	}
	rw.Key, rw.Under, rw.Summary, rw.Advice = Template(f["key"]), Template(f["under"]), Template(f["summary"]), Template(f["advice"])
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
	if rw.Key == "" || rw.Summary == "" {
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

// Matches reports whether the row holds for an event logged at stage (see detect's stageOf);
// addr checks the addr column, stuck says the process never got past the init the event
// came in.
func (rw *Row) Matches(e snapshot.Event, stage string, addr func(string) bool, stuck func() bool) bool {
	if !slices.Contains(rw.events, e.Kind) ||
		len(rw.codes) > 0 && slices.Contains(rw.codes, e.Code) == rw.notCode ||
		rw.fatal != "" && (rw.fatal == "yes") != e.Fatal ||
		!rw.detail.holds(e.Detail) || !rw.msg.holds(e.Msg) || !rw.src.holds(e.Src) ||
		rw.Culprit == "rank" && len(e.Ranks) == 0 {
		return false
	}
	if len(rw.stages) > 0 {
		in := slices.Contains(rw.stages, stage) || slices.Contains(rw.stages, "stuck") && stuck()
		if in == rw.notStage {
			return false
		}
	}
	return rw.addr == "" || addr(rw.addr)
}
