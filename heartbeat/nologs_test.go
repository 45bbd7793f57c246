package heartbeat_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/heartbeat"
	"github.com/ncclwatch/watchdog/internal/syncbuf"
)

// TestWarnsWhenNoLogMatches: a sidecar whose patterns match nothing says so soon after it
// starts, and again, as an error, when they still match nothing after NoLogsAfter; one
// whose patterns match says neither.
func TestWarnsWhenNoLogMatches(t *testing.T) {
	var none, some syncbuf.Buffer
	logs := t.TempDir()
	newRankWriter(t, logs, 77, 0)
	for _, c := range []struct {
		dir string
		out *syncbuf.Buffer
	}{{filepath.Join(t.TempDir(), "missing"), &none}, {logs, &some}} {
		runLocalSidecar(t, c.dir, func(o *heartbeat.Options) {
			o.NoLogsAfter = 3 * time.Second
			o.Logger = slog.New(slog.NewTextHandler(c.out, nil))
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(none.String(), "still no NCCL log matches") {
		if time.Now().After(deadline) {
			t.Fatalf("no second warning:\n%s", none.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := none.String()
	for _, want := range []string{`level=WARN msg="no NCCL log matches the log patterns yet`, "no such file or directory", `level=ERROR msg="still no NCCL log matches`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(some.String(), "no NCCL log matches") {
		t.Errorf("warned although a log matches:\n%s", some.String())
	}
}
