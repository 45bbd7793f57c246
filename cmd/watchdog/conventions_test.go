package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestEveryCommandHelpExitsZero: --help of every command prints its usage and flags on
// stdout and exits 0, and -h does the same.
func TestEveryCommandHelpExitsZero(t *testing.T) {
	for _, c := range commands() {
		for _, flag := range []string{"--help", "-h"} {
			t.Run(c.name+" "+flag, func(t *testing.T) {
				var out, errb bytes.Buffer
				var code int
				out.WriteString(captureStdout(t, func() { code = run(t.Context(), []string{c.name, flag}, &out, &errb) }))
				if code != exitOK || errb.Len() != 0 {
					t.Fatalf("exit %d, stderr %q", code, errb.String())
				}
				if c.name != "version" && !strings.Contains(out.String(), "usage: watchdog "+c.name) {
					t.Errorf("no usage line:\n%s", out.String())
				}
			})
		}
	}
}

// TestDurationsLoggedAsDurations: a retry delay reads "1.5s" in the JSON logs, not 1500000000.
func TestDurationsLoggedAsDurations(t *testing.T) {
	var b bytes.Buffer
	lf := logFlags{format: "json", level: "info"}
	log, err := lf.logger(&b)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("retry", "retry_in", 1500*time.Millisecond, slog.Group("g", "wait", 2*time.Minute))
	if !strings.Contains(b.String(), `"retry_in":"1.5s"`) || !strings.Contains(b.String(), `"wait":"2m0s"`) {
		t.Errorf("log line %s", b.String())
	}
}
