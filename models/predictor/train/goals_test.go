package train

import (
	"testing"

	"github.com/phaseless/phaseless/models/predictor"
)

// Issue 19's goals are open-domain questions of the fresh set ≥ 90% to
// the cloud, its car commands ≥ 90% local, and APGR ≥ 0.8 over graded
// held-out answers. The shipped router (textfeat v3) meets the car goal
// and misses the other two (docs/predictor.md, "Version 3"): these bounds
// are what it measured, less a margin, so that a regression fails here;
// the goals themselves are goal* and printed beside the measurement. The
// development set (dev.tsv), on which its choices were made, is held to
// its own measured levels.
//
// These are accuracy results of the deterministic shipped artifact on fixed
// data (the graded cache in models/data/routing), not timings.
const (
	goalFreshOpenToCloud = 0.9
	goalFreshCarLocal    = 0.9
	goalAPGR             = 0.8

	// Measured on the labels regraded after the edge model learned tool
	// calls (its replies changed, so the graded labels did): before that,
	// 83.1%, 0.726 and 77.5%.
	minFreshOpenToCloud = 0.8 // measured 81.9% (version 2: 60.3%)
	minShortAPGR        = 0.7 // measured 0.739 (version 2: 0.775), on the fresh set and the held-out fact questions
	minDevOpenToCloud   = 0.7 // measured 71.9% (version 2: 54.4%)
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
	if m.ReadsProbe() {
		t.Error("the shipped predictor reads the probe block: the agent would run the edge model's prefill before every request")
	}
	old, err := predictor.Load("../testdata/predictor-edge-v1.onnx")
	if err != nil {
		t.Fatal(err)
	}
	oldTh, _ := old.Threshold()
	v2m, err := predictor.Load("../testdata/predictor-edge-v2.onnx")
	if err != nil {
		t.Fatal(err)
	}
	v2Th, _ := v2m.Threshold()
	rep, err := EvaluateEdge([]Router{{Name: "shipped", P: m, Threshold: th}, {Name: "v1", P: old, Threshold: oldTh}, {Name: "v2", P: v2m, Threshold: v2Th}}, split, DefaultMaxCarToCloud)
	if err != nil {
		t.Fatal(err)
	}
	row, v1, v2 := rep.Rows[0], rep.Rows[1], rep.Rows[2]
	t.Logf("shipped: fresh open→cloud %.1f%%, fresh car local %.1f%%, APGR %.3f (fresh+facts %.3f), quality %.3f",
		100*row.ToCloud[SourceFreshOpen], 100*(1-row.ToCloud[SourceFreshCar]), row.APGR, row.ShortAPGR, row.Quality)
	t.Logf("v1:      fresh open→cloud %.1f%%, fresh car local %.1f%%, APGR %.3f", 100*v1.ToCloud[SourceFreshOpen], 100*(1-v1.ToCloud[SourceFreshCar]), v1.APGR)
	t.Logf("v2:      fresh open→cloud %.1f%%, fresh car local %.1f%%, APGR fresh+facts %.3f", 100*v2.ToCloud[SourceFreshOpen], 100*(1-v2.ToCloud[SourceFreshCar]), v2.ShortAPGR)
	t.Logf("goals: open→cloud ≥ %.0f%%, car local ≥ %.0f%%, APGR ≥ %.2f", 100*goalFreshOpenToCloud, 100*goalFreshCarLocal, goalAPGR)
	if got := row.ToCloud[SourceFreshOpen]; got < minFreshOpenToCloud || got < 2*v1.ToCloud[SourceFreshOpen] {
		t.Errorf("fresh open-domain questions to the cloud: %.1f%% (v1 %.1f%%), want ≥ %.0f%% and twice v1's", 100*got, 100*v1.ToCloud[SourceFreshOpen], 100*minFreshOpenToCloud)
	}
	if got := 1 - row.ToCloud[SourceFreshCar]; got < goalFreshCarLocal {
		t.Errorf("fresh car commands kept local: %.1f%%, goal ≥ %.0f%%", 100*got, 100*goalFreshCarLocal)
	}
	if got := row.ToCloud[SourceDevOpen]; got < minDevOpenToCloud || got <= v2.ToCloud[SourceDevOpen] {
		t.Errorf("dev open-domain questions to the cloud: %.1f%% (v2 %.1f%%), want ≥ %.0f%% and more than v2", 100*got, 100*v2.ToCloud[SourceDevOpen], 100*minDevOpenToCloud)
	}
	if got := 1 - row.ToCloud[SourceDevCar]; got < goalFreshCarLocal {
		t.Errorf("dev car commands kept local: %.1f%%, want ≥ %.0f%%", 100*got, 100*goalFreshCarLocal)
	}
	if got := row.ToCloud[SourceFreshOpen]; got <= v2.ToCloud[SourceFreshOpen] {
		t.Errorf("fresh open questions to the cloud %.1f%%, not more than the version-2 router's %.1f%%", 100*got, 100*v2.ToCloud[SourceFreshOpen])
	}
	if row.ShortAPGR < minShortAPGR {
		t.Errorf("APGR over graded fresh and fact answers %.3f, want ≥ %.2f", row.ShortAPGR, minShortAPGR)
	}
	if v1.ToCloud[SourceFreshOpen] >= goalFreshOpenToCloud {
		t.Errorf("the v1 router already sends %.1f%% of fresh open questions to the cloud: the goal does not separate them", 100*v1.ToCloud[SourceFreshOpen])
	}
}
