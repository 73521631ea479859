package train

import (
	"testing"

	"github.com/phaseless/phaseless/models/predictor"
)

// Issue 19's goals are open-domain questions ≥ 90% to the cloud, car
// commands ≥ 90% local, and APGR ≥ 0.8 over graded held-out answers,
// measured on requests nobody trained or tuned on: the fresh set and the
// second held-out set (fresh2.tsv). The shipped router (version 5:
// unseen-word augmentation, the threshold chosen on both development sets)
// meets the car goal on both, the open goal on fresh2 and misses it on the
// fresh set by two questions (89.5%), and misses APGR (docs/predictor.md,
// "Version 5"); these bounds are what it measured, less
// a margin, so that a regression fails here, and the goals are goal*,
// printed beside the measurement. The development sets (dev.tsv, dev2.tsv), on which
// the threshold was chosen, are held to their own measured levels.
//
// These are accuracy results of the deterministic shipped artifact on fixed
// data (the graded cache in models/data/routing), not timings. After a
// regrade (a new edge model changes the labels) and retrain, rerun and
// reset the floors to the new measurement less the same margins.
const (
	goalOpenToCloud = 0.9
	goalCarLocal    = 0.9
	goalAPGR        = 0.8

	minFreshOpenToCloud  = 0.87 // measured 89.5% (version 4: 94.1%, version 3: 81.9%)
	minFreshCarLocal     = 0.92 // measured 95.1% (version 4: 93.0%, version 3: 95.7%)
	minFresh2OpenToCloud = 0.87 // measured 90.0% (version 4: 92.7%, version 3: 78.2%)
	minFresh2CarLocal    = 0.88 // measured 91.1% (version 4: 75.9%, version 3: 92.4%)
	minDevOpenToCloud    = 0.81 // measured 84.4% (version 4: 88.8%); the threshold is chosen on it
	minDevCarLocal       = 0.92 // measured 96.4% (version 4: 88.2%); the threshold is chosen on it
	minDev2OpenToCloud   = 0.81 // measured 83.9% (version 4: 93.1%); the threshold is chosen on it
	minDev2CarLocal      = 0.81 // measured 84.6% (version 4: 57.1%); the threshold is chosen on it
	minShortAPGR         = 0.68 // measured 0.725 (version 4: 0.725, version 3: 0.744; oracle 0.922), the fresh set and the held-out fact questions
)

// TestShippedRouterGoals checks the shipped predictor, at its own
// threshold, on the fresh sets and the graded held-out answers, against the
// earlier shipped routers in the same run (testdata/predictor-edge-v1.onnx:
// intent labels, 83 features; -v2: graded labels and the probe; -v3: the
// edge block, its threshold chosen on validation; -v4: its threshold chosen
// on dev.tsv, more spoken data).
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
	routers := []Router{{Name: "shipped", P: m, Threshold: th}}
	for _, f := range []string{"v1", "v2", "v3", "v4"} {
		old, err := predictor.Load("../testdata/predictor-edge-" + f + ".onnx")
		if err != nil {
			t.Fatal(err)
		}
		oldTh, _ := old.Threshold()
		routers = append(routers, Router{Name: f, P: old, Threshold: oldTh})
	}
	rep, err := EvaluateEdge(routers, split, DefaultMaxCarToCloud)
	if err != nil {
		t.Fatal(err)
	}
	row, v1, v3 := rep.Rows[0], rep.Rows[1], rep.Rows[3]
	for _, r := range rep.Rows {
		t.Logf("%-8s fresh open→cloud %.1f%%, car local %.1f%% | fresh2 %.1f%%, %.1f%% | dev %.1f%%, %.1f%% | APGR fresh+facts %.3f, fresh2+facts %.3f",
			r.Name, 100*r.ToCloud[SourceFreshOpen], 100*(1-r.ToCloud[SourceFreshCar]), 100*r.ToCloud[SourceFresh2Open], 100*(1-r.ToCloud[SourceFresh2Car]),
			100*r.ToCloud[SourceDevOpen], 100*(1-r.ToCloud[SourceDevCar]), r.ShortAPGR, r.Fresh2APGR)
	}
	t.Logf("oracle APGR: fresh+facts %.3f, fresh2+facts %.3f", rep.OracleShort, rep.OracleFresh2)
	t.Logf("goals: open→cloud ≥ %.0f%%, car local ≥ %.0f%%, APGR ≥ %.2f", 100*goalOpenToCloud, 100*goalCarLocal, goalAPGR)
	for _, c := range []struct {
		what      string
		got, min  float64
		v3        float64
		beatOpen  bool // must also beat version 3 (an open share)
		goalShare float64
	}{
		{"fresh open questions to the cloud", row.ToCloud[SourceFreshOpen], minFreshOpenToCloud, v3.ToCloud[SourceFreshOpen], true, goalOpenToCloud},
		{"fresh car commands kept local", 1 - row.ToCloud[SourceFreshCar], minFreshCarLocal, 1 - v3.ToCloud[SourceFreshCar], false, goalCarLocal},
		{"fresh2 open questions to the cloud", row.ToCloud[SourceFresh2Open], minFresh2OpenToCloud, v3.ToCloud[SourceFresh2Open], true, goalOpenToCloud},
		{"fresh2 car commands kept local", 1 - row.ToCloud[SourceFresh2Car], minFresh2CarLocal, 1 - v3.ToCloud[SourceFresh2Car], false, goalCarLocal},
		{"dev open questions to the cloud", row.ToCloud[SourceDevOpen], minDevOpenToCloud, v3.ToCloud[SourceDevOpen], true, goalOpenToCloud},
		{"dev car commands kept local", 1 - row.ToCloud[SourceDevCar], minDevCarLocal, 1 - v3.ToCloud[SourceDevCar], false, goalCarLocal},
		{"dev2 open questions to the cloud", row.ToCloud[SourceDev2Open], minDev2OpenToCloud, v3.ToCloud[SourceDev2Open], true, goalOpenToCloud},
		{"dev2 car commands kept local", 1 - row.ToCloud[SourceDev2Car], minDev2CarLocal, 1 - v3.ToCloud[SourceDev2Car], false, goalCarLocal},
	} {
		t.Logf("%s: %.1f%% (version 3 %.1f%%; goal %.0f%%)", c.what, 100*c.got, 100*c.v3, 100*c.goalShare)
		if c.got < c.min {
			t.Errorf("%s: %.1f%%, want ≥ %.0f%%", c.what, 100*c.got, 100*c.min)
		}
		if c.beatOpen && c.got <= c.v3 {
			t.Errorf("%s: %.1f%%, not more than version 3's %.1f%%", c.what, 100*c.got, 100*c.v3)
		}
	}
	if row.ShortAPGR < minShortAPGR {
		t.Errorf("APGR over graded fresh and fact answers %.3f, want ≥ %.2f", row.ShortAPGR, minShortAPGR)
	}
	if v1.ToCloud[SourceFreshOpen] >= goalOpenToCloud {
		t.Errorf("the v1 router already sends %.1f%% of fresh open questions to the cloud: the goal does not separate them", 100*v1.ToCloud[SourceFreshOpen])
	}
}
