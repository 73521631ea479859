package train

import (
	"testing"

	"github.com/phaseless/phaseless/models/predictor"
)

// Issue 19's goals are open-domain questions of the fresh set ≥ 90% to
// the cloud, its car commands ≥ 90% local, and APGR ≥ 0.8 over graded
// held-out answers. The shipped router meets the car goal and misses the
// other two (docs/predictor.md, "Fresh set"): these bounds are what it
// measured, less a margin, so that a regression fails here; the goals
// themselves are goal* and printed beside the measurement.
//
// These are accuracy results of the deterministic shipped artifact on fixed
// data (the graded cache in models/data/routing), not timings.
const (
	goalFreshOpenToCloud = 0.9
	goalFreshCarLocal    = 0.9
	goalAPGR             = 0.8

	minFreshOpenToCloud = 0.5  // measured 53.6%
	minShortAPGR        = 0.75 // measured 0.777, on the fresh set and the held-out fact questions
)

// TestShippedRouterGoals checks the shipped predictor, at its own
// threshold, on the fresh set and the graded held-out answers, against the
// previous shipped router (testdata/predictor-edge-v1.onnx: intent labels,
// 83 features) in the same run.
func TestShippedRouterGoals(t *testing.T) {
	_, split := loadSplit(t, true)
	m, err := predictor.Default()
	if err != nil {
		t.Fatal(err)
	}
	th, ok := m.Threshold()
	if !ok {
		t.Fatal("the shipped predictor carries no threshold")
	}
	old, err := predictor.Load("../testdata/predictor-edge-v1.onnx")
	if err != nil {
		t.Fatal(err)
	}
	oldTh, _ := old.Threshold()
	rep, err := EvaluateEdge([]Router{{Name: "shipped", P: m, Threshold: th}, {Name: "v1", P: old, Threshold: oldTh}}, split, DefaultMaxCarToCloud)
	if err != nil {
		t.Fatal(err)
	}
	row, v1 := rep.Rows[0], rep.Rows[1]
	t.Logf("shipped: fresh open→cloud %.1f%%, fresh car local %.1f%%, APGR %.3f (fresh+facts %.3f), quality %.3f",
		100*row.ToCloud[SourceFreshOpen], 100*(1-row.ToCloud[SourceFreshCar]), row.APGR, row.ShortAPGR, row.Quality)
	t.Logf("v1:      fresh open→cloud %.1f%%, fresh car local %.1f%%, APGR %.3f", 100*v1.ToCloud[SourceFreshOpen], 100*(1-v1.ToCloud[SourceFreshCar]), v1.APGR)
	t.Logf("goals: open→cloud ≥ %.0f%%, car local ≥ %.0f%%, APGR ≥ %.2f", 100*goalFreshOpenToCloud, 100*goalFreshCarLocal, goalAPGR)
	if got := row.ToCloud[SourceFreshOpen]; got < minFreshOpenToCloud || got < 2*v1.ToCloud[SourceFreshOpen] {
		t.Errorf("fresh open-domain questions to the cloud: %.1f%% (v1 %.1f%%), want ≥ %.0f%% and twice v1's", 100*got, 100*v1.ToCloud[SourceFreshOpen], 100*minFreshOpenToCloud)
	}
	if got := 1 - row.ToCloud[SourceFreshCar]; got < goalFreshCarLocal {
		t.Errorf("fresh car commands kept local: %.1f%%, goal ≥ %.0f%%", 100*got, 100*goalFreshCarLocal)
	}
	if row.ShortAPGR < minShortAPGR {
		t.Errorf("APGR over graded fresh and fact answers %.3f, want ≥ %.2f", row.ShortAPGR, minShortAPGR)
	}
	if v1.ToCloud[SourceFreshOpen] >= goalFreshOpenToCloud {
		t.Errorf("the v1 router already sends %.1f%% of fresh open questions to the cloud: the goal does not separate them", 100*v1.ToCloud[SourceFreshOpen])
	}
}
