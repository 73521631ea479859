package train

import (
	"bytes"
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/intents"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/predictor/onnxpb"
	"github.com/phaseless/phaseless/models/textfeat"
)

const repoData = "../../data/routing"

func TestMetrics(t *testing.T) {
	// Weak right on 0 and 1, strong right on 0, 1 and 2: the gap is prompt 2.
	prompts := []Example{{Weak: true, Strong: true}, {Weak: true, Strong: true}, {Strong: true}, {}}
	oracle := Curve([]float64{0, 0, 1, 0.5}, prompts) // sends prompt 2 first
	if got := oracle.PGR[1]; got != 1 {
		t.Fatalf("oracle PGR at 25%% = %v, want 1", got)
	}
	if got := oracle.CPT(0.5); got != 0.25 {
		t.Fatalf("oracle CPT(50%%) = %v, want 0.25", got)
	}
	worst := Curve([]float64{1, 1, 0, 0}, prompts)
	if !(oracle.APGR() > 0.5 && worst.APGR() < 0.5) {
		t.Fatalf("APGR oracle %v, worst %v", oracle.APGR(), worst.APGR())
	}
	// Trapezoid over PGR 0, 1, 1, 1, 1 at shares 0, .25, ..., 1: 0.125 + 0.75.
	if got := oracle.APGR(); math.Abs(got-0.875) > 1e-12 {
		t.Fatalf("oracle APGR = %v, want 0.875", got)
	}
	// Prompts 2 and 3 tie at 0: at 75% of calls half of prompt 2's gain is
	// expected (PGR 0, 0, 0, 0.5, 1): 0.0625 + 0.1875.
	if got := worst.APGR(); math.Abs(got-0.25) > 1e-12 {
		t.Fatalf("worst APGR = %v, want 0.25", got)
	}
	// A constant router is a random one, whatever the order of its input.
	for _, order := range [][]Example{prompts, {prompts[3], prompts[2], prompts[1], prompts[0]}} {
		if got := Curve([]float64{0.7, 0.7, 0.7, 0.7}, order).APGR(); math.Abs(got-0.5) > 1e-12 {
			t.Fatalf("constant router APGR = %v, want 0.5", got)
		}
	}
	labels := []float32{0, 0, 1, 1}
	if got := AUC([]float64{0.1, 0.2, 0.8, 0.9}, labels); got != 1 {
		t.Fatalf("AUC perfect = %v", got)
	}
	if got := AUC([]float64{0.5, 0.5, 0.5, 0.5}, labels); got != 0.5 {
		t.Fatalf("AUC ties = %v", got)
	}
	if got := AUC([]float64{0.9, 0.1, 0.8, 0.2}, labels); got != 0.5 {
		t.Fatalf("AUC mixed = %v", got)
	}
	if got := Accuracy([]float64{0.1, 0.6, 0.8, 0.4}, labels, 0.5); got != 0.5 {
		t.Fatalf("accuracy = %v", got)
	}
}

func TestRandomBaselineIsHalf(t *testing.T) {
	d, err := LoadRouting(repoData)
	if err != nil {
		t.Fatal(err)
	}
	mmlu, clinc := d.EvalSets()
	rep, err := Evaluate(nil, mmlu, clinc, 7)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Rows[0]
	if math.Abs(r.APGR-0.5) > 0.05 || math.Abs(r.CLINCAUC-0.5) > 0.05 {
		t.Fatalf("random router: APGR %v, CLINC AUC %v; both should be near 0.5", r.APGR, r.CLINCAUC)
	}
}

func TestSplitHoldsOutWholeGroups(t *testing.T) {
	d, err := LoadRouting(repoData)
	if err != nil {
		t.Fatal(err)
	}
	trainGroups := map[string]bool{}
	for _, e := range d.TrainExamples() {
		if e.Source != "clinc-oos" {
			trainGroups[e.Group] = true
		}
	}
	mmlu, clinc := d.EvalSets()
	for _, e := range append(mmlu, clinc...) {
		if trainGroups[e.Group] {
			t.Fatalf("%s %q is on both sides of the split", e.Source, e.Group)
		}
	}
	if len(mmlu) == 0 || len(clinc) == 0 {
		t.Fatal("empty evaluation set")
	}
}

// The shipped model must be what `phaselessctl model train` makes from the
// repository's data with the default seed and augmentation: byte for byte,
// threshold included.
func TestRunReproducesShippedModel(t *testing.T) {
	res, err := Run(context.Background(), Options{DataDir: repoData, Config: Config{Seed: ShippedSeed, Augment: EdgeAugment}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.Model, predictor.Shipped()) {
		t.Fatalf("training from models/data/routing gives %d bytes that differ from the shipped predictor.onnx (%d bytes): retrain with `phaselessctl model train --out models/predictor/predictor.onnx`",
			len(res.Model), len(predictor.Shipped()))
	}
	if len(res.Model) > 64<<10 {
		t.Fatalf("model is %d bytes, budget 64 KiB", len(res.Model))
	}
	// The learned router must beat the entropy rule it replaces, at the
	// threshold each would run with, on the held-out prompts.
	rows := res.EdgeReport.Rows
	model, entropy := rows[0], rows[len(rows)-3]
	if !strings.HasPrefix(entropy.Name, "entropy ≥ 4.2") {
		t.Fatalf("row %q is not the entropy rule", entropy.Name)
	}
	if model.Balanced <= entropy.Balanced || model.AUC <= entropy.AUC {
		t.Fatalf("model %+v does not beat the entropy rule %+v", model, entropy)
	}
	if model.Threshold != res.Threshold || model.Tuned {
		t.Fatalf("model row used threshold %v (tuned %v), the run chose %v", model.Threshold, model.Tuned, res.Threshold)
	}
}

// The RouteLLM-label path still makes the first shipped predictor, kept as
// testdata for comparisons, byte for byte.
func TestRunRouteLLMReproducesFirstModel(t *testing.T) {
	want, err := os.ReadFile("../testdata/predictor-routellm.onnx")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Options{DataDir: repoData, Labels: LabelsRouteLLM, Config: Config{Seed: ShippedSeed}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.Model, want) {
		t.Fatalf("RouteLLM labels give %d bytes that differ from testdata/predictor-routellm.onnx (%d bytes)", len(res.Model), len(want))
	}
	if res.Threshold != 0 || res.EdgeReport != nil {
		t.Fatalf("RouteLLM run chose threshold %v / made an edge report", res.Threshold)
	}
	model, random := res.Report.Rows[0], res.Report.Rows[len(res.Report.Rows)-1]
	if model.APGR <= random.APGR || model.CLINCAUC <= random.CLINCAUC {
		t.Fatalf("model %+v does not beat random %+v", model, random)
	}
	if _, err := Run(context.Background(), Options{DataDir: repoData, Labels: "mixtral"}); err == nil || !strings.Contains(err.Error(), "labels") {
		t.Fatalf("unknown label set: %v", err)
	}
}

// toCloud is the share of ex whose source matches keep that p sends to the
// cloud at threshold th.
func toCloud(t *testing.T, p predictor.Predictor, th float64, ex []Example, keep func(string) bool) (float64, int) {
	t.Helper()
	n, cloud := 0, 0
	for _, e := range ex {
		if !keep(e.Source) {
			continue
		}
		v, err := p.Predict(e.Features)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if v >= th {
			cloud++
		}
	}
	if n == 0 {
		t.Fatal("no examples")
	}
	return float64(cloud) / float64(n), n
}

// The shipped predictor at its own threshold keeps most held-out car
// requests on the device and sends held-out exam questions to the cloud;
// the first predictor, at the router's old default 0.5, kept the exam
// questions. Measured (docs/predictor.md, "Version 4"): 20.5% of car
// requests (16.1% of those labelled local; version 3 at its threshold
// 9.5%) and 100% of MMLU to the cloud. The car share rose with the
// threshold chosen on the development set for issue 19's goals, which the
// held-out CLINC150 commands pay for; the bounds are generous on purpose.
func TestShippedPredictorOnHeldOut(t *testing.T) {
	_, split := loadSplit(t, true) // the shipped model reads the probe block
	m, err := predictor.Default()
	if err != nil {
		t.Fatal(err)
	}
	th, ok := m.Threshold()
	if !ok {
		t.Fatal("shipped model has no threshold")
	}
	car, nCar := toCloud(t, m, th, split.Test, IsCarSource)
	mmlu, nMMLU := toCloud(t, m, th, split.Test, func(s string) bool { return s == SourceMMLU })
	wiki, _ := toCloud(t, m, th, split.Test, func(s string) bool { return s == SourceWiki })
	facts, nFacts := toCloud(t, m, th, split.Test, func(s string) bool { return s == SourceFacts })
	t.Logf("threshold %.4f: %.1f%% of %d car requests, %.1f%% of %d MMLU questions, %.1f%% of wiki questions, %.1f%% of %d fact questions to the cloud",
		th, 100*car, nCar, 100*mmlu, nMMLU, 100*wiki, 100*facts, nFacts)
	if car > 0.25 {
		t.Errorf("%.1f%% of held-out car requests go to the cloud, want ≤ 25%%", 100*car)
	}
	if mmlu < 0.90 {
		t.Errorf("%.1f%% of held-out MMLU questions go to the cloud, want ≥ 90%%", 100*mmlu)
	}
	if wiki < 0.55 {
		t.Errorf("%.1f%% of held-out general-knowledge questions go to the cloud, want ≥ 55%%", 100*wiki)
	}
	if facts < 0.65 {
		t.Errorf("%.1f%% of held-out fact questions go to the cloud, whose model answers them; want ≥ 65%%", 100*facts)
	}
	old, err := predictor.Load("../testdata/predictor-routellm.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if oldMMLU, _ := toCloud(t, old, 0.5, split.Test, func(s string) bool { return s == SourceMMLU }); oldMMLU >= mmlu {
		t.Errorf("the first predictor sends %.1f%% of MMLU to the cloud, no fewer than the shipped one", 100*oldMMLU)
	}
}

func TestEdgeSplitIsDisjointByPrompt(t *testing.T) {
	d, s := loadSplit(t, false)
	local := map[string]bool{}
	for _, in := range intents.CLINC() {
		local[in] = true
	}
	where := map[string]string{}
	for name, set := range map[string][]Example{"train": s.Train, "val": s.Val, "test": s.Test} {
		for _, e := range set {
			k := PromptKey(e.Text)
			if w, dup := where[k]; dup {
				t.Fatalf("prompt %q is in %s and %s", e.Text, w, name)
			}
			where[k] = name
			want := float32(1)
			if IsCarSource(e.Source) {
				want = 0
			}
			if e.Label != want || len(e.Features) != textfeat.Dim {
				t.Fatalf("%s example %+v: label %v, want %v", name, e.Source, e.Label, want)
			}
			if (e.Source == SourceEdgeCLINC) != (local[e.Group] && e.Source != SourceInCar && e.Source != SourceWiki && e.Source != SourceFacts && e.Source != SourceMMLU) {
				t.Fatalf("%s %q of intent %q is labelled %s", name, e.Text, e.Group, e.Source)
			}
		}
		counts := CountSources(set)
		for _, src := range EdgeSources {
			spoken := src == SourceSpokenCar || src == SourceSpokenOpen
			if counts[src] == 0 && !(spoken && name == "test") {
				t.Errorf("%s split has no %s prompts", name, src)
			}
			if spoken && name == "test" && counts[src] > 0 {
				t.Errorf("test split has %d %s prompts: the spoken set is training data (the fresh and dev sets test)", counts[src], src)
			}
		}
	}
	// The demo draws its commands from CLINC150's test split and its exam
	// questions from held-out subjects: none of them may be trained on.
	for _, u := range d.CLINC {
		if u.Split == "test" && where[PromptKey(u.Text)] != "test" {
			t.Fatalf("CLINC150 test utterance %q is in %s", u.Text, where[PromptKey(u.Text)])
		}
	}
}

func TestChooseThreshold(t *testing.T) {
	ex := []Example{
		{Source: SourceEdgeCLINC}, {Source: SourceEdgeCLINC}, {Source: SourceEdgeCLINC}, {Source: SourceEdgeCLINC},
		{Source: SourceMMLU, Label: 1}, {Source: SourceMMLU, Label: 1},
		{Source: SourceWiki, Label: 1}, {Source: SourceWiki, Label: 1},
	}
	// One car request (0.8) scores above the wiki questions (0.5, 0.7).
	scores := []float64{0.1, 0.2, 0.3, 0.8, 0.9, 0.95, 0.5, 0.7}
	// Unconstrained: the best cut sends the car request at 0.8 to the
	// cloud to catch both wiki questions (between 0.3 and 0.5).
	th, acc := ChooseThreshold(scores, ex, 1)
	if math.Abs(th-0.4) > 1e-9 || math.Abs(acc-(0.75+1)/2) > 1e-12 {
		t.Fatalf("unconstrained: threshold %v, balanced accuracy %v; want 0.4, 0.875", th, acc)
	}
	// No car request to the cloud: the cut moves above 0.8, the wiki
	// questions stay local.
	th, acc = ChooseThreshold(scores, ex, 0)
	if math.Abs(th-0.85) > 1e-9 || math.Abs(acc-(1+0.5)/2) > 1e-12 {
		t.Fatalf("constrained: threshold %v, balanced accuracy %v; want 0.85, 0.75", th, acc)
	}
	if got := BalancedAccuracy(scores, ex, th); math.Abs(got-acc) > 1e-12 {
		t.Fatalf("BalancedAccuracy at the chosen threshold %v, ChooseThreshold said %v", got, acc)
	}
	// Every candidate stays inside the router's (0,1).
	th, _ = ChooseThreshold([]float64{1, 1, 1, 1, 1, 1, 1, 1}, ex, 1)
	if th < minThreshold || th > maxThreshold {
		t.Fatalf("threshold %v outside [%v, %v]", th, minThreshold, maxThreshold)
	}
}

func TestChooseDevThreshold(t *testing.T) {
	open := func(n int) []Example {
		ex := make([]Example, n)
		for i := range ex {
			ex[i] = Example{Source: SourceDevOpen, Label: 1}
		}
		return ex
	}
	car := func(n int) []Example {
		ex := make([]Example, n)
		for i := range ex {
			ex[i] = Example{Source: SourceDevCar}
		}
		return ex
	}
	// Four open questions (0.3, 0.6, 0.7, 0.9) and four car commands
	// (0.1, 0.2, 0.4, 0.65). Cut at 0.5: open 3/4 to the cloud, car 3/4
	// local; every other cut leaves one of the two at 2/4 or less (0.35:
	// car 2/4; 0.675: open 2/4).
	ex := append(open(4), car(4)...)
	ex = append(ex, Example{Source: SourceMMLU, Label: 1}) // not a dev source: ignored
	scores := []float64{0.3, 0.6, 0.7, 0.9, 0.1, 0.2, 0.4, 0.65, 0.99}
	th, worst, ok := ChooseDevThreshold(scores, ex)
	if !ok || math.Abs(th-0.5) > 1e-9 || math.Abs(worst-0.75) > 1e-12 {
		t.Fatalf("threshold %v, worst share %v, ok %v; want 0.5, 0.75, true", th, worst, ok)
	}
	// Moving one car command above every open question moves the best cut
	// no further: at 0.95 the open share is 0.
	scores[7] = 0.95
	if th, worst, _ = ChooseDevThreshold(scores, ex); math.Abs(th-0.5) > 1e-9 || math.Abs(worst-0.75) > 1e-12 {
		t.Fatalf("threshold %v, worst share %v; want 0.5, 0.75", th, worst)
	}
	// A second development set counts on its own, not pooled: two dev2
	// car commands at 0.45 and 0.55 and one dev2 open question at 0.8.
	// Pooled, the car side at 0.5 would be 4/6; dev2's own car share is
	// 1/2 there, so the best cut moves to 0.575, between 0.55 and 0.6
	// (dev2 car 2/2, dev open 3/4, dev car 3/4, dev2 open 1/1).
	scores[7] = 0.65
	ex2 := append(slices.Clone(ex), Example{Source: SourceDev2Car}, Example{Source: SourceDev2Car}, Example{Source: SourceDev2Open, Label: 1})
	scores2 := append(slices.Clone(scores), 0.45, 0.55, 0.8)
	if th, worst, _ = ChooseDevThreshold(scores2, ex2); math.Abs(th-0.575) > 1e-9 || math.Abs(worst-0.75) > 1e-12 {
		t.Fatalf("two sets: threshold %v, worst share %v; want 0.575, 0.75", th, worst)
	}
	// Without both kinds there is no dev rule.
	if _, _, ok := ChooseDevThreshold([]float64{0.5}, open(1)); ok {
		t.Fatal("ok without car commands")
	}
	// Every candidate stays inside the router's (0,1).
	if th, _, _ = ChooseDevThreshold([]float64{1, 1, 1, 1, 1, 1, 1, 1, 1}, ex); th < minThreshold || th > maxThreshold {
		t.Fatalf("threshold %v outside [%v, %v]", th, minThreshold, maxThreshold)
	}
}

func TestFitSeeded(t *testing.T) {
	d, err := LoadRouting(repoData)
	if err != nil {
		t.Fatal(err)
	}
	ex := d.TrainExamples()[:2000]
	cfg := Config{Seed: 5, Epochs: 2, Hidden: 8}
	a, err := Fit(cfg, ex)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Fit(cfg, ex)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.ONNX(), b.ONNX()) {
		t.Fatal("same seed gave different model bytes")
	}
	cfg.Seed = 6
	c, err := Fit(cfg, ex)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.ONNX(), c.ONNX()) {
		t.Fatal("different seeds gave the same model")
	}
	if a.Losses[len(a.Losses)-1] >= a.Losses[0] {
		t.Fatalf("loss did not fall: %v", a.Losses)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Hidden: -1, Epochs: 1, BatchSize: 1, LearnRate: 1}, "hidden"},
		{Config{Hidden: 1, Epochs: 0, BatchSize: 1, LearnRate: 1}, "epochs"},
		{Config{Hidden: 1, Epochs: 1, BatchSize: 0, LearnRate: 1}, "batch-size"},
		{Config{Hidden: 1, Epochs: 1, BatchSize: 1, LearnRate: math.NaN()}, "learn-rate"},
		{Config{Hidden: 1, Epochs: 1, BatchSize: 1, LearnRate: 1, L2: -1}, "l2"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}

// TestRunWithTelemetry trains with examples of the fleet's requests
// (cloud/fleetapi/trainset reads them from the export): they join the
// training data and change the model.
func TestRunWithTelemetry(t *testing.T) {
	local, open := textfeat.Extract("open the sunroof"), textfeat.Extract("what is the capital of Peru")
	telemetry := []Example{
		{Features: local, Label: 0, Source: SourceTelemetry, Group: SourceTelemetry},
		{Features: local, Label: 1, Source: SourceTelemetry, Group: SourceTelemetry},
		{Features: open, Label: 1, Source: SourceTelemetry, Group: SourceTelemetry},
		{Features: open, Label: 0, Source: SourceTelemetry, Group: SourceTelemetry},
	}
	base, err := Run(context.Background(), Options{DataDir: repoData, Config: Config{Seed: 1, Epochs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Options{DataDir: repoData, Telemetry: telemetry, Config: Config{Seed: 1, Epochs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Examples != base.Examples+len(telemetry) {
		t.Fatalf("examples %d, want the base's %d and %d from telemetry", res.Examples, base.Examples, len(telemetry))
	}
	if bytes.Equal(res.Model, base.Model) {
		t.Fatal("telemetry did not change the model")
	}
}

// loadSplit loads the repository's routing data and its edge split, with
// the graded cache applied when graded.
func loadSplit(t *testing.T, graded bool) (*Data, *EdgeSplit) {
	t.Helper()
	d, err := LoadRouting(repoData)
	if err != nil {
		t.Fatal(err)
	}
	var s *EdgeSplit
	if graded {
		s, err = d.GradedSplit(repoData)
	} else {
		s, err = d.EdgeSplit()
	}
	if err != nil {
		t.Fatal(err)
	}
	return d, s
}

// A head-only run (Config.Head, model train --head) keeps the shipped
// router's first layer bit for bit, its export included, and trains the
// output layer: the update a device fetches as its output layer's chunks.
func TestFitHead(t *testing.T) {
	shipped := predictor.Shipped()
	head, err := NetFromONNX(shipped)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(head.ONNX(), shipped) {
		t.Fatal("NetFromONNX(shipped).ONNX() is not the shipped file")
	}
	d, err := LoadRouting(repoData)
	if err != nil {
		t.Fatal(err)
	}
	net, err := Fit(Config{Seed: 5, Epochs: 1, Head: head}, d.TrainExamples()[:2000])
	if err != nil {
		t.Fatal(err)
	}
	bits := func(v []float32) []uint32 {
		out := make([]uint32, len(v))
		for i, f := range v {
			out[i] = math.Float32bits(f)
		}
		return out
	}
	m, err := onnxpb.Unmarshal(net.ONNX())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range m.Graph.Initializers {
		switch in.Name {
		case "w1":
			if !slices.Equal(bits(in.Floats), bits(head.W1)) {
				t.Error("the exported first layer's weights changed")
			}
		case "b1":
			if !slices.Equal(bits(in.Floats), bits(head.B1)) {
				t.Error("the exported first layer's bias changed")
			}
		case "w2":
			if slices.Equal(bits(in.Floats), bits(head.W2)) {
				t.Error("the output layer did not train")
			}
		}
	}
	if _, err := Fit(Config{Seed: 5, Epochs: 1, Head: head}, v1Prefix(d.TrainExamples()[:100])); err == nil {
		t.Error("a head of another feature width was accepted")
	}
}
