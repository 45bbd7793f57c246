package fleet

import (
	"math"
	"time"
)

// How unlikely a part's roots are at the rest of the fleet's rate.

// PoissonTail is P(X >= k) for X ~ Poisson(lambda).
func PoissonTail(k int, lambda float64) float64 {
	if k <= 0 {
		return 1
	}
	if lambda <= 0 {
		return 0
	}
	// Sum the terms from k upwards (in log space: k may be large); they fall fast once
	// i > lambda.
	sum := 0.0
	for i := k; i < k+1000; i++ {
		lg, _ := math.Lgamma(float64(i + 1))
		t := math.Exp(float64(i)*math.Log(lambda) - lambda - lg)
		sum += t
		if float64(i) > lambda && t < sum*1e-12 {
			break
		}
	}
	return min(sum, 1)
}

// pValue is how likely the part's roots are by chance, class by class, at the rate the
// rest of the fleet shows for each class (the part's own roots left out, so that a bad
// part does not raise the bar it is judged against) over its node's exposure: the
// smallest over its classes, times their number.
func (v *View) pValue(pv *PartView) float64 {
	e := 0.0
	for _, r := range v.records {
		if s := r.nodes[pv.Part.Node]; s != nil {
			e += prorate(s, v.At.Add(-v.Window), v.At)
		}
	}
	best := 1.0
	for class, n := range pv.ByClass {
		others := -n
		for _, o := range v.parts {
			if o.Part.Kind == pv.Part.Kind {
				others += o.ByClass[class]
			}
		}
		if pv.Part.Kind == PartLink {
			// A link root is booked at both ends, and a node collects ends as either: the
			// rate is of ends, less the far ends of this node's own.
			others -= n
		}
		lambda := 0.0
		if others > 0 && v.ExposureHours > e {
			lambda = float64(others) * e / (v.ExposureHours - e)
		}
		best = min(best, PoissonTail(n, lambda))

	}
	return min(1, best*float64(len(pv.ByClass)))
}

// cleanHours is the node's exposure after t (prorated), from the records behind the view.
func (v *View) cleanHours(node string, t, now time.Time) float64 {
	h := 0.0
	for _, r := range v.records {
		h += r.exposureIn(node, t, now)
	}
	return h
}
