package gpu

import (
	"slices"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// Thresholds of Classify, picked on the 2x H200 captures
// (testdata/captures/nccl-2.28.9-2xH200/*/nvml.rank*.csv, 700 W limit):
//   - idle: 0-9 % utilization before the first kernel, 0 % on a rank stuck in host code;
//     a host-bound straggler averages 20-25 %;
//   - waiting: an NCCL kernel spinning shows 100 % at 120-170 W (17-24 % of the limit);
//     a rank that waits most of each step for a straggler, 100 % at 230-245 W (35 %);
//   - computing: 99-100 % at 500-645 W (71-92 %).
//
// The power cut sits between the last two with margin on both sides and is relative to
// the enforced limit, so a power-capped or smaller GPU scales with it.
const (
	// IdleUtilBelow: utilization under this is idle, whatever the power (power is a
	// one-second average and lags; utilization does not).
	IdleUtilBelow = 30
	// SpinUtilAtLeast: a spinning NCCL kernel keeps the GPU busy all the time.
	SpinUtilAtLeast = 80
	// WaitPowerFraction: busy below this share of the enforced power limit is waiting.
	WaitPowerFraction = 0.45
	// WaitPowerWatts is the cut when the limit is unknown (a 700 W-class GPU assumed).
	WaitPowerWatts = 315
)

// Classify derives the state of one GPU sample: snapshot.GPUIdle for low utilization,
// snapshot.GPUWaiting for high utilization at low power, snapshot.GPUComputing otherwise, and "" when
// the sample lacks what it needs (no utilization, or high utilization without power).
// It is pure; Smoother applies it over a short window.
func Classify(g snapshot.GPU) snapshot.GPUState {
	if !g.Has("util") {
		return ""
	}
	if g.Util < IdleUtilBelow {
		return snapshot.GPUIdle
	}
	if g.Util < SpinUtilAtLeast {
		return snapshot.GPUComputing
	}
	if !g.Has("pw") {
		return ""
	}
	cut := float64(WaitPowerWatts)
	if g.PowerLimitW > 0 && g.Has("pwmax") {
		cut = WaitPowerFraction * g.PowerLimitW
	}
	if g.PowerW < cut {
		return snapshot.GPUWaiting
	}
	return snapshot.GPUComputing
}

// Smoother classifies each GPU on the mean utilization and power of its samples of the
// last Window, so that one odd sample (a kernel launch gap, the power average lagging a
// change) does not flip the state. It keeps at most Max samples per GPU and forgets a
// GPU's history when a sample cannot be classified. Not safe for concurrent use.
type Smoother struct {
	window time.Duration
	max    int
	hist   map[int][]smoothPoint // by GPU index
}

type smoothPoint struct {
	t            snapshot.Micros
	util, powerW float64
}

// DefaultWindow suits the sidecar's one sample per second: three samples.
const DefaultWindow = 2500 * time.Millisecond

// maxSmoothedGPUs bounds the smoother's map against a caller that invents indices.
const maxSmoothedGPUs = 1024

// NewSmoother returns a smoother over window (DefaultWindow if <= 0) keeping at most
// max samples per GPU (16 if <= 0).
func NewSmoother(window time.Duration, max int) *Smoother {
	if window <= 0 {
		window = DefaultWindow
	}
	if max <= 0 {
		max = 16
	}
	return &Smoother{window: window, max: max, hist: map[int][]smoothPoint{}}
}

// Observe adds a sample and returns the GPU's smoothed state.
func (m *Smoother) Observe(g snapshot.GPU) snapshot.GPUState {
	if Classify(g) == "" {
		delete(m.hist, g.Index)
		return ""
	}
	h, known := m.hist[g.Index]
	if !known && len(m.hist) >= maxSmoothedGPUs {
		return Classify(g)
	}
	// A clock that went backwards starts the window afresh.
	if n := len(h); n > 0 && g.T < h[n-1].t {
		h = h[:0]
	}
	h = append(h, smoothPoint{t: g.T, util: float64(g.Util), powerW: g.PowerW})
	oldest := g.T - snapshot.Micros(m.window.Microseconds())
	drop := 0
	for drop < len(h)-1 && (h[drop].t <= oldest || len(h)-drop > m.max) {
		drop++
	}
	h = append(h[:0], h[drop:]...)
	m.hist[g.Index] = h

	utils := make([]float64, len(h))
	powers := make([]float64, len(h))
	for i, p := range h {
		utils[i], powers[i] = p.util, p.powerW
	}
	mid := g
	mid.Util = int(median(utils))
	mid.PowerW = median(powers)
	return Classify(mid)
}

// median is the middle value, the upper one of an even count: unlike a mean, one odd
// sample cannot drag it into the band between two states.
func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// Forget drops a GPU's history.
func (m *Smoother) Forget(index int) { delete(m.hist, index) }
