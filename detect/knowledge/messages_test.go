package knowledge

import (
	"strings"
	"testing"
)

// TestMessagesTable: every row of the embedded table reads; a bad one fails here, never at
// run time.
func TestMessagesTable(t *testing.T) {
	if MessagesErr != nil {
		t.Fatal(MessagesErr)
	}
	if len(Messages) < 50 {
		t.Fatalf("only %d rows read", len(Messages))
	}
}

// TestMessagesRejectBadRows: a bad row is named with its line and left out; the rest stay.
func TestMessagesRejectBadRows(t *testing.T) {
	header := strings.Join(columns, ",") + "\n"
	good := "ok,warn,,,,,,,,warning,nccl_warning,unknown,fallback,reporter,k,,,{who} warned,\n"
	for _, c := range []struct{ name, row, say string }{
		{"unknown event", "a,no_such_event,,,,,,,,ignore,,,,,,,,,\n", "event \"no_such_event\""},
		{"bad code", "a,warn,x,,,,,,,ignore,,,,,,,,,\n", "code \"x\""},
		{"bad regexp", "a,warn,,,,(,,,,ignore,,,,,,,,,\n", "detail"},
		{"bad stage", "a,warn,,later,,,,,,ignore,,,,,,,,,\n", "stage \"later\""},
		{"bad placeholder", "a,warn,,,,,,,,warning,nccl_warning,unknown,fallback,reporter,k,,,{nobody} warned,\n", "unknown placeholder"},
		{"bad kind", "a,warn,,,,,,,,warning,no_kind,unknown,fallback,reporter,k,,,x,\n", "kind \"no_kind\""},
		{"bad cause", "a,warn,,,,,,,,warning,config,bad_luck,fallback,reporter,k,,,x,\n", "cause \"bad_luck\""},
		{"bad culprit", "a,warn,,,,,,,,warning,config,unknown,fallback,everyone,k,,,x,\n", "culprit \"everyone\""},
		{"no key", "a,warn,,,,,,,,warning,config,unknown,fallback,reporter,,,,x,\n", "needs a key"},
		{"twice", good, "used twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, err := ReadMessages(strings.NewReader("# comment\n" + header + good + c.row))
			if err == nil || !strings.Contains(err.Error(), c.say) || !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %v, want one saying %q with its line", err, c.say)
			}
			if len(rows) != 1 || rows[0].ID != "ok" {
				t.Fatalf("the good row should stay: %+v", rows)
			}
		})
	}
	if _, err := ReadMessages(strings.NewReader("id,event\n")); err == nil {
		t.Fatal("a wrong header should fail")
	}
}
