package analyze

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/detect"
	"github.com/ncclwatch/watchdog/logparse"
)

// replayedRank is one rank of a capture cut as e2e/gpu/replay.py cuts it: the header (init,
// the op before the training loop and the first two steps), one step's op lines, repeated
// for every later step.
type replayedRank struct {
	header   []string
	template []string
}

var (
	captureStamp = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] `)
	stepMarker   = regexp.MustCompile(`AllReduce: .* count 65536 `)
	opLine       = regexp.MustCompile(`NCCL INFO \w+: opCount `)
)

func cutCapture(t *testing.T, path string) replayedRank {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var marks []int
	for i, l := range lines {
		if stepMarker.MatchString(l) {
			marks = append(marks, i)
		}
	}
	if len(marks) < 7 {
		t.Fatalf("%s: step marker found %d times, want 7", path, len(marks))
	}
	r := replayedRank{header: lines[:marks[3]]}
	for _, l := range lines[marks[5]:marks[6]] {
		if opLine.MatchString(l) {
			r.template = append(r.template, l)
		}
	}
	return r
}

// stampedLine is one replayed line and the time it is written.
type stampedLine struct {
	at   time.Time
	rank int
	text string
}

// replayStartupSkew writes what replay.py writes for a healthy run: each rank's header with
// the capture's own spacing counted from that rank's first line (gaps capped at 0.5 s), so
// the rank whose header is longer reaches its first collectives later; then, once both
// headers are out, every step on both ranks at once, step apart.
func replayStartupSkew(t *testing.T, ranks []replayedRank, start time.Time, steps int, step time.Duration) []stampedLine {
	t.Helper()
	var out []stampedLine
	end := start
	for r, rk := range ranks {
		var prev time.Duration
		var first time.Time
		for _, l := range rk.header {
			m := captureStamp.FindStringSubmatch(l)
			off := prev
			if m != nil {
				ts, err := time.Parse("2006-01-02 15:04:05.000000", m[1])
				if err != nil {
					t.Fatal(err)
				}
				if first.IsZero() {
					first = ts
				}
				off = min(ts.Sub(first), prev+500*time.Millisecond)
			}
			prev = off
			out = append(out, stampedLine{start.Add(off), r, l})
			end = maxTime(end, start.Add(off))
		}
	}
	for i := 2; i < steps; i++ {
		at := end.Add(time.Duration(i-1) * step)
		for r, rk := range ranks {
			for _, l := range rk.template {
				out = append(out, stampedLine{at, r, l})
			}
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].at.Before(out[b].at) })
	for i := range out {
		out[i].text = captureStamp.ReplaceAllString(out[i].text, "["+out[i].at.UTC().Format("2006-01-02 15:04:05.000000")+"] ")
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestStartupSkewIsNotAStraggler: the false incident of issue 16 item 7. The multicomm
// capture replayed as the GPU harness's dry run replays it starts rank 0's collectives
// ~415 ms after rank 1's (its header is longer), then both ranks run level. Judged live
// every half second, as the detector judges what the sidecars publish (the last 32 ops and
// the marks of every communicator), the job is healthy throughout: a start-up skew is not a
// straggler.
func TestStartupSkewIsNotAStraggler(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(captures, "multicomm", "nccl.*.log"))
	if err != nil || len(paths) != 2 {
		t.Fatalf("capture: %v %v", paths, err)
	}
	sort.Strings(paths)
	ranks := []replayedRank{cutCapture(t, paths[0]), cutCapture(t, paths[1])}
	start := time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC)
	const step = 170 * time.Millisecond
	lines := replayStartupSkew(t, ranks, start, 60, step)

	trackers := []*logparse.Tracker{
		logparse.NewTracker(logparse.TrackerOptions{Location: time.UTC}),
		logparse.NewTracker(logparse.TrackerOptions{Location: time.UTC}),
	}
	cfg := detect.DefaultConfig()
	judged := 0
	firstOp := map[int]time.Time{}
	i := 0
	for now := start; i < len(lines); now = now.Add(500 * time.Millisecond) {
		for ; i < len(lines) && !lines[i].at.After(now); i++ {
			l := lines[i]
			trackers[l.rank].Observe([]byte(l.text), l.at)
			if _, ok := firstOp[l.rank]; !ok && opLine.MatchString(l.text) {
				firstOp[l.rank] = l.at
			}
		}
		procs := make([]*detect.Proc, len(trackers))
		for r, tr := range trackers {
			p := tr.Snapshot(logparse.SnapshotOptions{Recent: 32})
			procs[r] = &detect.Proc{Process: p, Node: p.Host}
		}
		j := detect.NewJob("replay", now, procs, nil)
		if len(j.Groups) == 0 {
			continue
		}
		judged++
		if res := detect.Evaluate(j, cfg, detect.TimingOK); len(res.Findings) > 0 {
			f := res.Findings[0]
			t.Fatalf("%s into the replay: %s: %s", now.Sub(start), f.Kind, f.Summary)
		}
	}
	if skew := firstOp[0].Sub(firstOp[1]); skew < 300*time.Millisecond || skew > 500*time.Millisecond {
		t.Errorf("rank 0's first collective %s after rank 1's, want the ~415 ms of the dry run", skew)
	}
	if judged < 15 {
		t.Errorf("judged %d times, want the whole replay", judged)
	}
}
