package detect

import "testing"

// The others' median is the upper median of the waits less the rank's own.
func TestMedianWithout(t *testing.T) {
	for _, tc := range []struct {
		sorted []float64
		v      float64
		want   float64
	}{
		{[]float64{45}, 45, 0},
		{[]float64{2, 2, 2, 45}, 45, 2},
		{[]float64{0.1, 0.1, 245}, 245, 0.1},
		{[]float64{1, 2, 3, 4, 5}, 1, 4},
		{[]float64{1, 2, 3, 4, 5}, 5, 3},
		{[]float64{45, 45, 45, 45}, 45, 45},
	} {
		if got := medianWithout(tc.sorted, tc.v); got != tc.want {
			t.Errorf("medianWithout(%v, %v) = %v, want %v", tc.sorted, tc.v, got, tc.want)
		}
	}
}
