// Package riskcontrol sets a router's threshold from graded outcomes so
// that the share of requests answered locally and wrong stays at most α
// with probability at least 1 − δ, whatever the distribution of the
// requests, as long as the outcomes calibrated on and the requests to come
// are exchangeable (drawn alike, in any order).
//
// The method is Learn-then-Test (A. N. Angelopoulos, S. Bates, E. J.
// Candès, M. I. Jordan, L. Lei, "Learn then Test: Calibrating Predictive
// Algorithms to Achieve Risk Control", 2021, arXiv:2110.01052) with the
// exact binomial p-value and fixed-sequence testing over a fixed grid of
// thresholds: the loss of a request at threshold t, 1 when it stays local
// (score < t) and its local answer is wrong, grows with t, so the grid is
// tested from the strictest threshold up and the largest threshold whose
// null "risk > α" is rejected at level δ is returned. Each test spends the
// whole δ; the fixed order is what keeps the family-wise error at δ.
//
// How it fits: the fleet (cloud/fleet) keeps each device's recent shadow
// grades, calibrates on them as they arrive and ships the threshold as the
// device's route-threshold config; the router itself never changes
// (docs/predictor.md, "Per-device calibration").
package riskcontrol

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Outcome is one graded request: the router's cloud probability for it and
// whether the device's own answer was wrong (graded against the cloud's).
type Outcome struct {
	Score float64
	Wrong bool
}

// GridSteps is the number of grid intervals: thresholds k/GridSteps for
// k = 1 … GridSteps−1, fixed before any data is seen (LTT's requirement).
const GridSteps = 1000

// Result is a calibration.
type Result struct {
	// Threshold is the largest grid threshold certified (requests scoring
	// below it stay local); meaningful only when OK.
	Threshold float64
	// OK is false when no threshold is certified: too few outcomes (with
	// none wrong, n must reach log δ / log(1−α), 59 for α = δ = 0.05).
	OK bool
	// N is the number of outcomes; Risk the share of them that would have
	// been local and wrong at Threshold (0 when not OK).
	N    int
	Risk float64
}

// ErrParams reports α or δ outside (0,1).
var ErrParams = errors.New("riskcontrol: alpha and delta must be in (0,1)")

// MinOutcomes is the fewest outcomes with which any threshold can be
// certified at α and δ: all of them right and local.
func MinOutcomes(alpha, delta float64) int {
	return int(math.Ceil(math.Log(delta) / math.Log1p(-alpha)))
}

// Calibrate returns the largest grid threshold t such that the share of
// requests with score < t whose local answer is wrong is at most alpha
// with probability at least 1 − delta over the outcomes, when out and the
// requests to come are exchangeable.
func Calibrate(out []Outcome, alpha, delta float64) (Result, error) {
	if !(alpha > 0 && alpha < 1 && delta > 0 && delta < 1) {
		return Result{}, fmt.Errorf("%w: alpha %g, delta %g", ErrParams, alpha, delta)
	}
	n := len(out)
	res := Result{N: n}
	// Scores of the wrong answers, ascending: the loss count at t is how
	// many lie below t.
	var wrong []float64
	for _, o := range out {
		if o.Wrong {
			wrong = append(wrong, o.Score)
		}
	}
	sort.Float64s(wrong)
	k := 0
	for g := 1; g < GridSteps; g++ {
		t := float64(g) / GridSteps
		for k < len(wrong) && wrong[k] < t {
			k++
		}
		if BinomialCDF(k, n, alpha) > delta {
			break // fixed sequence: the first null not rejected ends it
		}
		res.Threshold, res.OK, res.Risk = t, true, float64(k)/float64(n)
	}
	return res, nil
}

// BinomialCDF is P(X ≤ k) for X ~ Binomial(n, p): the p-value of "risk >
// p" when k of n losses are 1 (a larger risk makes k this small rarer).
func BinomialCDF(k, n int, p float64) float64 {
	if k < 0 {
		return 0
	}
	if k >= n {
		return 1
	}
	lp, lq := math.Log(p), math.Log1p(-p)
	ln, _ := math.Lgamma(float64(n + 1))
	sum := 0.0
	for i := 0; i <= k; i++ {
		li, _ := math.Lgamma(float64(i + 1))
		lr, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(ln - li - lr + float64(i)*lp + float64(n-i)*lq)
	}
	return math.Min(sum, 1)
}

// Risk is the share of out that is local and wrong at threshold t: the
// realised rate when out are the requests a device served at t.
func Risk(out []Outcome, t float64) float64 {
	if len(out) == 0 {
		return 0
	}
	k := 0
	for _, o := range out {
		if o.Wrong && o.Score < t {
			k++
		}
	}
	return float64(k) / float64(len(out))
}
