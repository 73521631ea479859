package train

import (
	"math"
	"sort"
)

// RoutingCurve is RouteLLM's quality-vs-cost curve for one router on MMLU:
// route the k prompts the router scores highest to the strong model and the
// rest to the weak one, for k = 0..N.
type RoutingCurve struct {
	Share []float64 // k/N: fraction of calls that go to the strong model
	PGR   []float64 // performance gap recovered: (quality − weak)/(strong − weak)
	// Weak and Gap are the all-weak quality and strong − weak, as shares
	// of the prompts: quality at k is Weak + PGR[k]·Gap.
	Weak, Gap float64
}

// Curve computes the routing curve of scores (higher = more likely to need
// the strong model) over prompts. A threshold cannot split prompts of equal
// score, so within a run of ties the curve is the straight line between the
// run's ends: the expected curve over the orders the tie could be broken in,
// and what RouteLLM's evaluation gets by sweeping thresholds over the scores
// (routellm/evals: a prompt goes to the strong model when its score is at
// least the threshold). A constant router thus scores 0.5 whatever the order
// of its input.
func Curve(scores []float64, prompts []Example) RoutingCurve {
	n := len(prompts)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return scores[idx[a]] > scores[idx[b]] })
	weak, strong := 0.0, 0.0
	for _, p := range prompts {
		weak += b2f(p.Weak)
		strong += b2f(p.Strong)
	}
	gap := strong - weak
	c := RoutingCurve{Share: make([]float64, n+1), PGR: make([]float64, n+1)}
	if n > 0 {
		c.Weak, c.Gap = weak/float64(n), gap/float64(n)
	}
	q := weak
	for k := 0; k <= n; k++ {
		c.Share[k] = float64(k) / float64(n)
	}
	for start := 0; start < n; {
		end := start + 1
		for end < n && scores[idx[end]] == scores[idx[start]] {
			end++
		}
		q0 := q
		for _, i := range idx[start:end] {
			q += b2f(prompts[i].Strong) - b2f(prompts[i].Weak)
		}
		if gap != 0 {
			for k := start + 1; k <= end; k++ {
				f := float64(k-start) / float64(end-start)
				c.PGR[k] = (q0 + f*(q-q0) - weak) / gap
			}
		}
		start = end
	}
	return c
}

// APGR is the area under PGR over the strong-call share (trapezoid rule):
// 0.5 for a random router, 1 when the gap is recovered at once.
func (c RoutingCurve) APGR() float64 {
	a := 0.0
	for k := 1; k < len(c.Share); k++ {
		a += (c.Share[k] - c.Share[k-1]) * (c.PGR[k] + c.PGR[k-1]) / 2
	}
	return a
}

// CPT is the smallest strong-call share at which PGR reaches target
// (0.5 for CPT(50%)).
func (c RoutingCurve) CPT(target float64) float64 {
	for k, p := range c.PGR {
		if p >= target-1e-12 {
			return c.Share[k]
		}
	}
	return 1
}

// ShareAtQuality is the smallest strong-call share at which the share of
// prompts answered right reaches quality, or -1 when no share does.
func (c RoutingCurve) ShareAtQuality(quality float64) float64 {
	for k, p := range c.PGR {
		if c.Weak+p*c.Gap >= quality-1e-12 {
			return c.Share[k]
		}
	}
	return -1
}

// AUC is the probability that a random positive (label 1) scores above a
// random negative, ties counting one half (Mann–Whitney U).
func AUC(scores []float64, labels []float32) float64 {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return scores[idx[a]] < scores[idx[b]] })
	var pos, neg, rankSum float64
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && scores[idx[j]] == scores[idx[i]] {
			j++
		}
		mid := float64(i+j+1) / 2 // average 1-based rank of the tie block
		for _, t := range idx[i:j] {
			if labels[t] > 0.5 {
				rankSum += mid
			}
		}
		i = j
	}
	for _, l := range labels {
		if l > 0.5 {
			pos++
		} else {
			neg++
		}
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return (rankSum - pos*(pos+1)/2) / (pos * neg)
}

// Accuracy is the share of examples where score > threshold agrees with the
// label.
func Accuracy(scores []float64, labels []float32, threshold float64) float64 {
	ok := 0
	for i, s := range scores {
		if (s > threshold) == (labels[i] > 0.5) {
			ok++
		}
	}
	return float64(ok) / float64(len(scores))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
