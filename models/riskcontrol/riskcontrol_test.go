package riskcontrol

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestBinomialCDF(t *testing.T) {
	for _, c := range []struct {
		k, n int
		p    float64
		want float64
	}{
		{0, 59, 0.05, math.Pow(0.95, 59)},
		{0, 1, 0.5, 0.5},
		{1, 2, 0.5, 0.75},
		{2, 2, 0.3, 1},
		{-1, 5, 0.3, 0},
		{3, 10, 0.2, 0.8791261184}, // scipy.stats.binom.cdf(3, 10, 0.2)
	} {
		if got := BinomialCDF(c.k, c.n, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("BinomialCDF(%d, %d, %g) = %.10f, want %.10f", c.k, c.n, c.p, got, c.want)
		}
	}
}

// TestTooFewOutcomes: below MinOutcomes nothing is certified, however good
// the answers; at it, with every answer right, everything stays local.
func TestTooFewOutcomes(t *testing.T) {
	if m := MinOutcomes(0.05, 0.05); m != 59 {
		t.Fatalf("MinOutcomes(0.05, 0.05) = %d, want 59", m)
	}
	right := func(n int) []Outcome {
		out := make([]Outcome, n)
		for i := range out {
			out[i].Score = float64(i) / float64(n)
		}
		return out
	}
	if r, _ := Calibrate(right(58), 0.05, 0.05); r.OK {
		t.Errorf("58 outcomes certified %+v", r)
	}
	r, _ := Calibrate(right(59), 0.05, 0.05)
	if !r.OK || r.Threshold != float64(GridSteps-1)/GridSteps || r.Risk != 0 {
		t.Errorf("59 right outcomes: %+v, want the top of the grid", r)
	}
	if _, err := Calibrate(nil, 0, 0.05); err == nil {
		t.Error("alpha 0 accepted")
	}
}

// TestThresholdStopsBelowWrongAnswers: with every answer above 0.5 wrong
// the certified threshold cannot let in more wrong answers than the
// binomial bound allows.
func TestThresholdStopsBelowWrongAnswers(t *testing.T) {
	var out []Outcome
	for i := range 1000 {
		s := float64(i) / 1000
		out = append(out, Outcome{Score: s, Wrong: s >= 0.5})
	}
	r, _ := Calibrate(out, 0.05, 0.05)
	// 0.05 of 1000 is 50 wrong; the binomial lower tail at δ leaves ~38.
	if !r.OK || r.Threshold < 0.52 || r.Threshold > 0.55 || r.Risk > 0.05 {
		t.Errorf("%+v, want a threshold between 0.52 and 0.55", r)
	}
}

// TestRiskControlledOnExchangeableData is the guarantee itself: on
// synthetic exchangeable data (score uniform, the local answer wrong with
// probability score², so the risk at t is t³/3), the true risk at the
// calibrated threshold is at most α in at least 1 − δ of the trials, and
// the threshold is not far below the best one ((3α)^(1/3)).
func TestRiskControlledOnExchangeableData(t *testing.T) {
	const alpha, delta, n = 0.05, 0.05, 400
	trials := 400
	if testing.Short() {
		trials = 100
	}
	rng := rand.New(rand.NewPCG(35, 1))
	ok, sum := 0, 0.0
	for range trials {
		out := make([]Outcome, n)
		for i := range out {
			s := rng.Float64()
			out[i] = Outcome{Score: s, Wrong: rng.Float64() < s*s}
		}
		r, err := Calibrate(out, alpha, delta)
		if err != nil || !r.OK {
			t.Fatalf("%+v %v", r, err)
		}
		if math.Pow(r.Threshold, 3)/3 <= alpha {
			ok++
		}
		sum += r.Threshold
	}
	best := math.Cbrt(3 * alpha)
	if share := float64(ok) / float64(trials); share < 1-delta {
		t.Errorf("risk ≤ α in %.1f%% of %d trials, want ≥ %.0f%%", 100*share, trials, 100*(1-delta))
	}
	if mean := sum / float64(trials); mean < best-0.1 || mean > best {
		t.Errorf("mean threshold %.3f, best %.3f: too conservative", mean, best)
	}
	t.Logf("risk ≤ α in %d of %d trials; mean threshold %.3f (best %.3f)", ok, trials, sum/float64(trials), best)
}
