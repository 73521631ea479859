package learn

import (
	"bytes"
	"context"
	"testing"

	"github.com/phaseless/phaseless/cloud/replay"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sim"
)

// small is a training run that takes about a second: one cluster, one
// rate, two windows of the Azure code head, every second request sampled.
func small(seed uint64) Config {
	return Config{Clusters: []string{"4xh100,8xl4"}, Rates: []float64{8}, Window: 100, HoldOut: 3, MaxWindows: 2,
		SampleEach: 2, Centres: 6, Hidden: 16, Steps: 150, Seed: seed}
}

func azureHead(t *testing.T) []Trace {
	t.Helper()
	reqs, err := replay.ReadTrace("../../replay/testdata/traces/azure-code-head.csv", "azure", 300)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]sim.Request, len(reqs))
	for i, r := range reqs {
		out[i] = sim.Request{At: r.At, Input: r.Input, Output: r.Output, Blocks: r.Blocks}
	}
	return []Trace{{Name: "azure-code-head", Reqs: out}}
}

// TestTrainSmall: a small training run is deterministic for its seed, and
// the classifier it learns beats always choosing the one best combination
// on its training samples, and on the held-out window does at least as
// well as that fixed choice less a margin (a learned split that does not
// generalise shows there).
func TestTrainSmall(t *testing.T) {
	ctx := context.Background()
	model, _ := sim.LookupModel("llama3.1-8b")
	traces := azureHead(t)
	cfg := small(7)
	samples, err := Collect(ctx, cfg, model, traces)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 2*100/2 {
		t.Fatalf("%d samples, want 100 (2 windows × 50)", len(samples))
	}
	m, err := Fit(cfg, samples)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Fit(cfg, samples)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.ONNX(), again.ONNX()) {
		t.Fatal("two fits with one seed differ")
	}
	if other, _ := Fit(small(8), samples); bytes.Equal(m.ONNX(), other.ONNX()) {
		t.Fatal("the seed changes nothing")
	}
	if _, err := sched.ReadLearned(m.ONNX()); err != nil {
		t.Fatalf("the ONNX it writes does not load: %v", err)
	}
	train := Evaluate(m, samples)
	t.Logf("training samples: %+v", train)
	if train.Chosen < train.Fixed || train.Agree < 0.6 {
		t.Fatalf("on its training samples the classifier scores %.3f (agrees %.0f%%), the best fixed combination %.3f",
			train.Chosen, 100*train.Agree, train.Fixed)
	}
	held, err := CollectHeld(ctx, cfg, model, traces)
	if err != nil {
		t.Fatal(err)
	}
	ev := Evaluate(m, held)
	t.Logf("held-out samples: %+v", ev)
	if ev.Samples != 50 || ev.Chosen < ev.Fixed-0.1 {
		t.Fatalf("held out: %+v", ev)
	}
}
