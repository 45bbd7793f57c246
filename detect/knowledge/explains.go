package knowledge

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ncclwatch/watchdog/incident"
)

// explainsCSV is which finding explains which; its header comment documents the columns.
//
//go:embed explains.csv
var explainsCSV string

// Explains is the table, read once. A bad row is left out and named in ExplainsErr, which
// TestExplainsTable requires to be nil and detect reports as a note.
var Explains, ExplainsErr = ReadExplains(strings.NewReader(explainsCSV))

// Rule is one row: a target that Source explains, when they share Equal, takes Action.
type Rule struct {
	Step           string
	Source, Target Match
	Equal          []string // any of: culprit, key, comm, member, sender, later, not-earlier, any
	Earliest       bool     // the source leads by time, not by its place in the roles it names
	ToLead         bool     // Equal relates the target to the lead only (later, not-earlier, any)
	Action         string   // absorb, follow, behind, drop, become (to Become), reason
	Become         Role
}

// Match is a finding matcher: any of its alternatives, each all of its terms.
type Match [][]Term

// Term holds where Facet's value is one of Values (or none of them, Not).
type Term struct {
	Facet  string
	Values []string
	Not    bool
}

// Holds evaluates the matcher; facet gives a finding's value of a facet ("yes" or "" for a
// flag). An empty matcher holds for every finding.
func (m Match) Holds(facet func(string) string) bool {
	for _, alt := range m {
		if !slices.ContainsFunc(alt, func(t Term) bool { return slices.Contains(t.Values, facet(t.Facet)) == t.Not }) {
			return true
		}
	}
	return len(m) == 0
}

// Roles are the roles a matcher names, in its order; nil when it names none (any role).
func (m Match) Roles() []Role {
	var out []Role
	for _, alt := range m {
		i := slices.IndexFunc(alt, func(t Term) bool { return t.Facet == "role" && !t.Not })
		if i < 0 {
			return nil
		}
		for _, v := range alt[i].Values {
			if !slices.Contains(out, Role(v)) {
				out = append(out, Role(v))
			}
		}
	}
	return out
}

var (
	explainsColumns = []string{"step", "source", "target", "equal", "lead", "action"}
	relations       = []string{"culprit", "key", "comm", "member", "sender", "later", "not-earlier", "any"}
	// facets are the values each facet may take: a flag's is "yes".
	facets = func() map[string][]string {
		m := map[string][]string{"severity": {string(incident.SeverityCritical), string(incident.SeverityWarning)}}
		for _, flag := range []string{"measured", "dated", "culprits", "level", "unconfirmed"} {
			m[flag] = []string{"yes"}
		}
		for _, r := range Roles {
			m["role"] = append(m["role"], string(r))
		}
		for _, o := range Origins {
			m["origin"] = append(m["origin"], string(o))
		}
		for _, k := range incident.Kinds {
			m["kind"] = append(m["kind"], string(k))
		}
		for _, c := range knownCauses[1:] { // "unknown" is no cause's value
			m["cause"] = append(m["cause"], string(c))
		}
		return m
	}()
)

// ReadExplains reads the table. It keeps the good rows and returns every bad one's fault.
func ReadExplains(r io.Reader) ([]Rule, error) {
	var rules []Rule
	err := readTable(r, "explains", explainsColumns, func(rec []string) error {
		rl, err := parseRule(rec)
		if err == nil {
			rules = append(rules, rl)
		}
		return err
	})
	return rules, err
}

func parseRule(rec []string) (Rule, error) {
	if len(rec) != len(explainsColumns) {
		return Rule{}, fmt.Errorf("%d fields, want %d", len(rec), len(explainsColumns))
	}
	for i := range rec {
		rec[i] = strings.TrimSpace(rec[i])
	}
	rl := Rule{Step: rec[0], Earliest: rec[4] == "earliest", Action: rec[5]}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if rec[4] != "" && rec[4] != "first" && !rl.Earliest {
		bad("lead %q is neither first nor earliest", rec[4])
	}
	if a, role, ok := strings.Cut(rl.Action, ":"); ok && a == "become" && slices.Contains(Roles, Role(role)) {
		rl.Action, rl.Become = a, Role(role)
	} else if !slices.Contains([]string{"absorb", "follow", "behind", "drop", "reason"}, rl.Action) {
		bad("action %q is not one the table knows", rl.Action)
	}
	var err error
	if rl.Source, err = parseMatch(rec[1]); err != nil {
		bad("source: %w", err)
	}
	if rl.Target, err = parseMatch(rec[2]); err != nil {
		bad("target: %w", err)
	}
	if rec[3] != "" {
		rl.Equal = strings.Split(rec[3], "|")
	}
	for _, e := range rl.Equal {
		if !slices.Contains(relations, e) {
			bad("equal %q is not one the table knows", e)
		}
		rl.ToLead = rl.ToLead || e == "later" || e == "not-earlier" || e == "any"
	}
	switch {
	case rl.Step == "":
		bad("a row needs a step")
	case rl.Action == "reason" && (len(rl.Source) > 0 || len(rl.Target) > 0 || len(rl.Equal) > 0):
		bad("a reasoner's row names no source, target or equal")
	case rl.Action != "reason" && len(rl.Target) == 0:
		bad("a row needs a target")
	case (len(rl.Source) == 0) != (len(rl.Equal) == 0):
		bad("a source needs an equal, and an equal a source")
	case len(rl.Source) == 0 && !slices.Contains([]string{"drop", "become", "reason"}, rl.Action):
		bad("action %s does not go without a source", rl.Action)
	}
	return rl, errors.Join(errs...)
}

// parseMatch reads a matcher: alternatives joined by " or ", each terms split by spaces;
// a term is facet=a|b, facet!=a|b, a flag, or !flag.
func parseMatch(s string) (Match, error) {
	var m Match
	var errs []error
	for alt := range strings.SplitSeq(s, " or ") {
		var terms []Term
		for _, f := range strings.Fields(alt) {
			t := Term{Facet: strings.TrimPrefix(f, "!"), Values: []string{"yes"}, Not: strings.HasPrefix(f, "!")}
			if k, v, ok := strings.Cut(f, "="); ok {
				t = Term{Facet: strings.TrimSuffix(k, "!"), Values: strings.Split(v, "|"), Not: strings.HasSuffix(k, "!")}
			}
			known, ok := facets[t.Facet]
			if !ok {
				errs = append(errs, fmt.Errorf("%q: no facet %q", f, t.Facet))
			}
			for _, v := range t.Values {
				if ok && !slices.Contains(known, v) {
					errs = append(errs, fmt.Errorf("%q: %s %q is not one the table knows", f, t.Facet, v))
				}
			}
			terms = append(terms, t)
		}
		if len(terms) > 0 {
			m = append(m, terms)
		}
	}
	return m, errors.Join(errs...)
}
