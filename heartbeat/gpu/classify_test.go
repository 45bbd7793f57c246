package gpu

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

const captures = "../../testdata/captures/nccl-2.28.9-2xH200"

// h200LimitW is the enforced power limit of the captures' GPUs (not in the CSVs).
const h200LimitW = 700

// loadNVMLCSV reads one capture CSV (t,gpu_util,mem_util,power_mw,sm_clock,...) into
// samples as the sampler would produce them.
func loadNVMLCSV(t *testing.T, path string, index int) []snapshot.GPU {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []snapshot.GPU
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		if line == 0 {
			continue
		}
		c := strings.Split(sc.Text(), ",")
		if len(c) < 5 {
			t.Fatalf("%s:%d: %d columns", path, line+1, len(c))
		}
		ts, err1 := strconv.ParseFloat(c[0], 64)
		util, err2 := strconv.Atoi(c[1])
		mem, err3 := strconv.Atoi(c[2])
		mw, err4 := strconv.Atoi(c[3])
		sm, err5 := strconv.Atoi(c[4])
		for _, err := range []error{err1, err2, err3, err4, err5} {
			if err != nil {
				t.Fatalf("%s:%d: %v", path, line+1, err)
			}
		}
		out = append(out, snapshot.GPU{
			Index:       index,
			T:           snapshot.Micros(ts * 1e6),
			Util:        util,
			MemUtil:     mem,
			PowerW:      float64(mw) / 1000,
			PowerLimitW: h200LimitW,
			SMClockMHz:  sm,
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// phase is a ground-truth state from a time (unix seconds) until the next phase. The
// times come from what each case did (README, job.py) and where its CSV shows it: the
// first busy sample, the sample where memory traffic stops at the hang.
type phase struct {
	from  float64
	state snapshot.GPUState
}

type captureCase struct {
	dir    string
	rank   int
	phases []phase
}

func captureTruth() []captureCase {
	const b = 1795300000.0
	idle := phase{0, snapshot.GPUIdle}
	return []captureCase{
		{"healthy", 0, []phase{idle, {b + 1244.559, snapshot.GPUComputing}}},
		{"healthy", 1, []phase{idle, {b + 1244.409, snapshot.GPUComputing}}},
		{"crash", 0, []phase{idle, {b + 1524.134, snapshot.GPUComputing}}},
		{"crash", 1, []phase{idle, {b + 1524.331, snapshot.GPUComputing}}},
		{"socket", 0, []phase{idle, {b + 1533.181, snapshot.GPUComputing}}},
		{"socket", 1, []phase{idle, {b + 1533.301, snapshot.GPUComputing}}},
		{"timestamps", 0, []phase{idle, {b + 1542.543, snapshot.GPUComputing}}},
		{"timestamps", 1, []phase{idle, {b + 1542.469, snapshot.GPUComputing}}},
		// Both ranks hang in different collectives: both spin.
		{"mismatch_op", 0, []phase{idle, {b + 1302.560, snapshot.GPUComputing}, {b + 1303.411, snapshot.GPUWaiting}}},
		{"mismatch_op", 1, []phase{idle, {b + 1302.556, snapshot.GPUComputing}, {b + 1303.407, snapshot.GPUWaiting}}},
		// Rank 1 stops in host code at step 15; rank 0 waits for it in its collective.
		{"silent", 0, []phase{idle, {b + 1453.094, snapshot.GPUComputing}, {b + 1453.945, snapshot.GPUWaiting}}},
		{"silent", 1, []phase{idle, {b + 1453.006, snapshot.GPUComputing}, {b + 1453.857, snapshot.GPUIdle}}},
		// Rank 1 sleeps 0.25 s per step before ~50 ms of matmuls: rank 0 spends most
		// of each step spinning in AllReduce, rank 1's GPU is busy 0-56 % (mean 21 %):
		// idle or computing are both right for it, waiting is not.
		{"straggler", 0, []phase{idle, {b + 1255.874, snapshot.GPUWaiting}}},
		{"straggler", 1, []phase{idle, {b + 1255.852, notWaiting}}},
	}
}

// notWaiting is a truth that accepts idle and computing.
const notWaiting = "idle|computing"

func matches(got, want snapshot.GPUState) bool {
	if want == notWaiting {
		return got == snapshot.GPUIdle || got == snapshot.GPUComputing
	}
	return got == want
}

func (c captureCase) truthAt(t snapshot.Micros) (state snapshot.GPUState, sincePhase time.Duration) {
	sec := float64(t) / 1e6
	state, start := c.phases[0].state, 0.0
	for _, p := range c.phases {
		if sec >= p.from {
			state, start = p.state, p.from
		}
	}
	if start == 0 {
		return state, time.Hour
	}
	return state, time.Duration((sec - start) * float64(time.Second))
}

type score struct{ ok, n, okSettled, nSettled int }

func (s *score) add(got, want snapshot.GPUState, since time.Duration) {
	s.n++
	if matches(got, want) {
		s.ok++
	}
	// Power is a ~1 s average on these GPUs: the first second of a phase lags by design.
	if since >= time.Second {
		s.nSettled++
		if matches(got, want) {
			s.okSettled++
		}
	}
}

func (s score) String() string {
	return fmt.Sprintf("%d/%d = %.1f%% (settled: %d/%d = %.1f%%)", s.ok, s.n, pct(s.ok, s.n),
		s.okSettled, s.nSettled, pct(s.okSettled, s.nSettled))
}

func pct(a, b int) float64 {
	if b == 0 {
		return 100
	}
	return 100 * float64(a) / float64(b)
}

// TestClassifyCaptures measures Classify and the Smoother against every capture CSV, at
// the captures' ~7 Hz and resampled to the sidecar's 1 Hz, and checks the hang endings.
func TestClassifyCaptures(t *testing.T) {
	var raw, smooth7, smooth1 score
	for _, c := range captureTruth() {
		samples := loadNVMLCSV(t, filepath.Join(captures, c.dir, fmt.Sprintf("nvml.rank%d.csv", c.rank)), c.rank)
		var r, s7, s1 score
		m7, m1 := NewSmoother(DefaultWindow, 0), NewSmoother(DefaultWindow, 0)
		var last1 snapshot.Micros
		for _, g := range samples {
			want, since := c.truthAt(g.T)
			r.add(Classify(g), want, since)
			got7 := m7.Observe(g)
			s7.add(got7, want, since)
			// Once a phase has lasted a full window, the smoothed state must be right.
			if since >= DefaultWindow && !matches(got7, want) {
				t.Errorf("%s rank %d at %.3f (%d%%, %.0f W): smoothed %s, want %s",
					c.dir, c.rank, float64(g.T)/1e6, g.Util, g.PowerW, got7, want)
			}
			if last1 == 0 || g.T-last1 >= 950_000 { // the sidecar's rate
				last1 = g.T
				s1.add(m1.Observe(g), want, since)
			}
		}
		t.Logf("%-11s rank %d: raw %v | smoothed 7Hz %v | smoothed 1Hz %v", c.dir, c.rank, r, s7, s1)
		for _, x := range []struct{ dst, src *score }{{&raw, &r}, {&smooth7, &s7}, {&smooth1, &s1}} {
			x.dst.ok += x.src.ok
			x.dst.n += x.src.n
			x.dst.okSettled += x.src.okSettled
			x.dst.nSettled += x.src.nSettled
		}
	}
	t.Logf("ALL raw %v", raw)
	t.Logf("ALL smoothed 7Hz %v", smooth7)
	t.Logf("ALL smoothed 1Hz %v", smooth1)
	for name, s := range map[string]score{"raw": raw, "smoothed 7Hz": smooth7, "smoothed 1Hz": smooth1} {
		if pct(s.okSettled, s.nSettled) < 97 {
			t.Errorf("%s settled accuracy %.1f%%, want >= 97%%", name, pct(s.okSettled, s.nSettled))
		}
	}
}

func TestClassifyHangEndings(t *testing.T) {
	// The brief's check, stated plainly: the silent case's last seconds.
	for rank, want := range map[int]snapshot.GPUState{0: snapshot.GPUWaiting, 1: snapshot.GPUIdle} {
		samples := loadNVMLCSV(t, filepath.Join(captures, "silent", fmt.Sprintf("nvml.rank%d.csv", rank)), rank)
		m := NewSmoother(0, 0)
		var got snapshot.GPUState
		for _, g := range samples {
			got = m.Observe(g)
		}
		if got != want {
			t.Errorf("silent rank %d ends %q, want %q", rank, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	at := snapshot.Micros(1)
	tests := []struct {
		name string
		g    snapshot.GPU
		want snapshot.GPUState
	}{
		{"spinning NCCL kernel", snapshot.GPU{T: at, Util: 100, PowerW: 121, PowerLimitW: 700}, snapshot.GPUWaiting},
		{"mismatch spin", snapshot.GPU{T: at, Util: 100, PowerW: 167, PowerLimitW: 700}, snapshot.GPUWaiting},
		{"straggler's peer", snapshot.GPU{T: at, Util: 100, PowerW: 245, PowerLimitW: 700}, snapshot.GPUWaiting},
		{"matmul", snapshot.GPU{T: at, Util: 99, PowerW: 630, PowerLimitW: 700}, snapshot.GPUComputing},
		{"stuck host", snapshot.GPU{T: at, Util: 0, PowerW: 120, PowerLimitW: 700}, snapshot.GPUIdle},
		{"just stopped, power lags", snapshot.GPU{T: at, Util: 0, PowerW: 551, PowerLimitW: 700}, snapshot.GPUIdle},
		{"partly busy", snapshot.GPU{T: at, Util: 54, PowerW: 238, PowerLimitW: 700}, snapshot.GPUComputing},
		{"power-capped at 400 W, computing", snapshot.GPU{T: at, Util: 99, PowerW: 390, PowerLimitW: 400}, snapshot.GPUComputing},
		{"power-capped at 400 W, spinning", snapshot.GPU{T: at, Util: 100, PowerW: 110, PowerLimitW: 400}, snapshot.GPUWaiting},
		{"no limit: absolute cut, low", snapshot.GPU{T: at, Util: 100, PowerW: 150}, snapshot.GPUWaiting},
		{"no limit: absolute cut, high", snapshot.GPU{T: at, Util: 100, PowerW: 500}, snapshot.GPUComputing},
		{"limit missing", snapshot.GPU{T: at, Util: 100, PowerW: 300, PowerLimitW: 0, Missing: []string{"pwmax"}}, snapshot.GPUWaiting},
		{"no power, busy", snapshot.GPU{T: at, Util: 100, Missing: []string{"pw"}}, ""},
		{"no power, idle", snapshot.GPU{T: at, Util: 3, Missing: []string{"pw"}}, snapshot.GPUIdle},
		{"no utilization", snapshot.GPU{T: at, PowerW: 100, Missing: []string{"util", "memutil"}}, ""},
		{"never sampled", snapshot.GPU{}, ""},
		{"gpu lost", snapshot.GPU{T: at, Err: "gpu is lost"}, ""},
	}
	for _, tt := range tests {
		if got := Classify(tt.g); got != tt.want {
			t.Errorf("%s: Classify = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestSmootherHoldsOverOneOddSample(t *testing.T) {
	m := NewSmoother(3*time.Second, 0)
	sec := func(s int) snapshot.Micros { return snapshot.Micros(int64(s) * 1e6) }
	spin := snapshot.GPU{Util: 100, PowerW: 121, PowerLimitW: 700}
	for s := 1; s <= 5; s++ {
		spin.T = sec(s)
		if got := m.Observe(spin); got != snapshot.GPUWaiting {
			t.Fatalf("second %d: %s", s, got)
		}
	}
	// One sample of a launch gap does not make the waiting rank idle.
	gap := spin
	gap.T, gap.Util = sec(6), 0
	if got := m.Observe(gap); got != snapshot.GPUWaiting {
		t.Errorf("one idle sample flipped the state to %s", got)
	}
	// Idle for a whole window does.
	for s := 7; s <= 9; s++ {
		gap.T = sec(s)
		m.Observe(gap)
	}
	if got := m.Observe(snapshot.GPU{T: sec(10), Util: 0, PowerW: 120, PowerLimitW: 700}); got != snapshot.GPUIdle {
		t.Errorf("after a window of idle samples: %s", got)
	}
	// Unknown samples reset, and the history stays bounded.
	if got := m.Observe(snapshot.GPU{T: sec(11), Missing: []string{"util"}}); got != "" {
		t.Errorf("unknown sample: %q", got)
	}
	if len(m.hist[0]) != 0 {
		t.Errorf("history kept across an unknown sample: %d", len(m.hist[0]))
	}
	small := NewSmoother(time.Hour, 4)
	for s := 1; s <= 100; s++ {
		spin.T = sec(s)
		small.Observe(spin)
	}
	if n := len(small.hist[0]); n != 4 {
		t.Errorf("history of %d samples, want 4", n)
	}
}
