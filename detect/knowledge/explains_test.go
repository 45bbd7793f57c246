package knowledge

import (
	"strings"
	"testing"
)

// TestExplainsTable: every row of the embedded table reads; a bad one fails here, never at
// run time.
func TestExplainsTable(t *testing.T) {
	if ExplainsErr != nil {
		t.Fatal(ExplainsErr)
	}
	if len(Explains) < 20 {
		t.Fatalf("only %d rows read", len(Explains))
	}
}

// TestExplainsRejectsBadRows: a bad row is named with its line and left out; the rest stay.
func TestExplainsRejectsBadRows(t *testing.T) {
	header := strings.Join(explainsColumns, ",") + "\n"
	good := "ok,role=cause,role=crash dated,culprit,first,absorb\n"
	for _, c := range []struct{ name, row, say string }{
		{"unknown role", "a,role=boss,role=crash,any,first,absorb\n", `role "boss"`},
		{"unknown facet", "a,colour=red,role=crash,any,first,absorb\n", `no facet "colour"`},
		{"unknown kind", "a,kind=oops,role=crash,any,first,absorb\n", `kind "oops"`},
		{"unknown relation", "a,role=cause,role=crash,neighbour,first,absorb\n", `equal "neighbour"`},
		{"unknown action", "a,role=cause,role=crash,any,first,smite\n", `action "smite"`},
		{"become what", "a,,role=ras,,,become:boss\n", `action "become:boss"`},
		{"bad lead", "a,role=cause,role=crash,any,last,absorb\n", `lead "last"`},
		{"no target", "a,role=cause,,any,first,absorb\n", "needs a target"},
		{"source without equal", "a,role=cause,role=crash,,first,absorb\n", "needs an equal"},
		{"absorbed into nothing", "a,,role=crash,,,absorb\n", "does not go"},
		{"a reasoner with a target", "a,,role=crash,,,reason\n", "names no source"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rules, err := ReadExplains(strings.NewReader("# comment\n" + header + good + c.row))
			if err == nil || !strings.Contains(err.Error(), c.say) || !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %v, want one saying %q with its line", err, c.say)
			}
			if len(rules) != 1 || rules[0].Step != "ok" {
				t.Fatalf("the good row should stay: %+v", rules)
			}
		})
	}
	if _, err := ReadExplains(strings.NewReader("step,source\n")); err == nil {
		t.Fatal("a wrong header should fail")
	}
}

// TestMatch: terms all hold, alternatives any; a negated term holds where the value differs.
func TestMatch(t *testing.T) {
	m, err := parseMatch("role=cause origin!=silent-init or role=link severity=critical measured")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		facets map[string]string
		want   bool
	}{
		{map[string]string{"role": "cause"}, true},
		{map[string]string{"role": "cause", "origin": "silent-init"}, false},
		{map[string]string{"role": "link", "severity": "critical", "measured": "yes"}, true},
		{map[string]string{"role": "link", "severity": "critical"}, false},
		{map[string]string{"role": "stall"}, false},
	} {
		if got := m.Holds(func(f string) string { return c.facets[f] }); got != c.want {
			t.Errorf("%v: %v, want %v", c.facets, got, c.want)
		}
	}
	if got := m.Roles(); len(got) != 2 || got[0] != RoleCause || got[1] != RoleLink {
		t.Errorf("roles %v", got)
	}
}
