package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/textfeat"
)

// Options is one `phaselessctl model train` run.
type Options struct {
	DataDir string // routing corpus (default models/data/routing)
	Labels  string // LabelsEdge (default when empty) or LabelsRouteLLM
	// Telemetry are labelled examples of the fleet's requests
	// (cloud/fleetapi/trainset.Load, its training part), extra training data.
	Telemetry []Example
	Out       string // where to write the ONNX file
	// Compare are routers evaluated beside the new model and the entropy
	// rule in the same run, e.g. the previously shipped model.
	Compare []Router
	Config  Config
	Log     io.Writer // progress; nil for none
}

// Result is what a run made.
type Result struct {
	Model    []byte
	Net      *Net
	Examples int
	// Threshold is the decision threshold chosen on the validation split
	// and stored in the model (edge labels; 0 with RouteLLM labels), and
	// ValBalanced its balanced accuracy there.
	Threshold   float64
	ValBalanced float64
	// ThresholdOnDev: the threshold was chosen on the development set
	// (ChooseDevThreshold), not on validation.
	ThresholdOnDev bool
	Report         *Report     // RouteLLM labels
	EdgeReport     *EdgeReport // edge labels
}

// Run loads the data, trains, chooses the decision threshold on the
// validation split (edge labels), writes the ONNX file, reloads it through
// the device runtime (onnx-go), checks it matches the trained weights, and
// evaluates it against the baselines on the held-out data.
func Run(ctx context.Context, opt Options) (*Result, error) {
	logf := func(format string, args ...any) {
		if opt.Log != nil {
			fmt.Fprintf(opt.Log, format, args...)
		}
	}
	labels := opt.Labels
	if labels == "" {
		labels = LabelsEdge
	}
	if labels != LabelsEdge && labels != LabelsRouteLLM {
		return nil, fmt.Errorf("train: labels %q, want %s or %s", opt.Labels, LabelsEdge, LabelsRouteLLM)
	}
	if labels == LabelsRouteLLM && opt.Config.Augment > 0 {
		return nil, fmt.Errorf("train: augment needs edge labels (the RouteLLM run reproduces the first predictor)")
	}
	data, err := LoadRouting(opt.DataDir)
	if err != nil {
		return nil, err
	}
	var examples, check []Example
	var split *EdgeSplit
	cfg := opt.Config
	cfg.fill()
	if labels == LabelsEdge {
		if split, err = data.GradedSplit(opt.DataDir); err != nil {
			return nil, err
		}
		if cfg.Probe {
			dropProbes(split.Train)
		} else {
			clearProbes(split.Train)
		}
		if cfg.UnansweredTarget > 0 {
			softenUnanswered(split.Train, float32(cfg.UnansweredTarget))
		}
		examples = split.Train
		if cfg.Augment > 0 {
			aug := AugmentUnseen(split.Train, cfg.Augment, UnseenVocabulary(), cfg.Seed)
			logf("unseen-word augmentation: %d copies of %d training requests\n", len(aug), len(split.Train))
			examples = append(slices.Clip(examples), aug...)
		}
		check = append(append(append([]Example(nil), split.Val...), split.Test...), split.Fresh...)
		if opt.Config.SourceWeights == nil {
			cfg.SourceWeights = EdgeSourceWeights
		}
		if opt.Config.L2 == 0 {
			cfg.L2 = EdgeL2
		}
		if opt.Config.Hidden == 0 {
			cfg.Hidden = EdgeHidden
		}
	} else {
		examples = data.TrainExamples()
		mmlu, clinc := data.EvalSets()
		check = append(mmlu, clinc...)
	}
	res := &Result{}
	if len(opt.Telemetry) > 0 {
		// A fresh array: examples may share one with the split.
		examples = append(examples[:len(examples):len(examples)], opt.Telemetry...)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if labels == LabelsRouteLLM {
		// The first predictor read version 1 of the features, which is a
		// prefix of the current vector: it trains on that prefix, so that
		// `--labels routellm` still reproduces it byte for byte.
		examples = v1Prefix(examples)
	}
	res.Examples = len(examples)
	logf("training on %d examples (%s labels)\n", len(examples), labels)
	net, err := Fit(cfg, examples)
	if err != nil {
		return nil, err
	}
	if labels == LabelsEdge && !cfg.Probe && cfg.Head == nil { // a head's first layer stays as it is
		net.IgnoreProbe()
	}
	res.Net = net
	logf("loss by epoch: first %.4f, last %.4f\n", net.Losses[0], net.Losses[len(net.Losses)-1])

	if split != nil {
		// The threshold is chosen on what the device will run: the
		// exported model's answers, not the float64 reference.
		m0, err := predictor.Read(net.ONNX())
		if err != nil {
			return nil, fmt.Errorf("exported model does not load: %w", err)
		}
		at := split
		if cfg.ValThreshold {
			at = &EdgeSplit{Val: split.Val}
		}
		th, onDev, err := chooseThreshold(m0, at, cfg.MaxCarToCloud)
		if err != nil {
			return nil, err
		}
		vs, err := scoreAll(m0, split.Val)
		if err != nil {
			return nil, err
		}
		// The metadata holds four decimals; report what ships.
		net.Threshold = math.Round(th*1e4) / 1e4
		res.Threshold, res.ValBalanced, res.ThresholdOnDev = net.Threshold, BalancedAccuracy(vs, split.Val, net.Threshold), onDev
		if onDev {
			logf("threshold %.4f chosen on %d development prompts (the larger of the smaller of open→cloud and car local; validation balanced accuracy %.3f)\n",
				net.Threshold, len(split.Dev), res.ValBalanced)
		} else {
			logf("threshold %.4f chosen on %d validation prompts (balanced accuracy %.3f, at most %.0f%% of car requests to the cloud)\n",
				net.Threshold, len(split.Val), res.ValBalanced, 100*cfg.MaxCarToCloud)
		}
	}
	res.Model = net.ONNX()
	m, err := predictor.Read(res.Model)
	if err != nil {
		return nil, fmt.Errorf("exported model does not load: %w", err)
	}
	if th, ok := m.Threshold(); split != nil && (!ok || th != net.Threshold) {
		return nil, fmt.Errorf("exported model's threshold %v (present %v), want %.4f", th, ok, net.Threshold)
	}
	if err := CheckAgainstNet(m, net, check); err != nil {
		return nil, err
	}
	if opt.Out != "" {
		if err := os.WriteFile(opt.Out, res.Model, 0o644); err != nil {
			return nil, err
		}
		logf("wrote %s (%d bytes)\n", opt.Out, len(res.Model))
	}
	if split == nil {
		routers := append([]Router{{Name: "predictor (new)", P: m}}, opt.Compare...)
		routers = append(routers, Router{Name: "entropy > 4.2", P: predictor.EntropyRule{}})
		mmlu, clinc := data.EvalSets()
		res.Report, err = Evaluate(routers, mmlu, clinc, opt.Config.Seed)
		return res, err
	}
	th, _ := m.Threshold()
	routers := []Router{{Name: "predictor (new)", P: m, Threshold: th}}
	if !net.IgnoresProbe {
		routers = append(routers, Router{Name: "predictor (new), no probe", P: Unprobed{m}, Threshold: th})
	}
	routers = append(routers, opt.Compare...)
	routers = append(routers, EntropyRouters()...)
	res.EdgeReport, err = EvaluateEdge(routers, split, cfg.MaxCarToCloud)
	return res, err
}

// EntropyRouters are the entropy-rule baselines of an edge evaluation: the
// source articles' rule as agent/route runs it without a model (byte
// entropy ≥ 4.2 bits), and the same feature with its bound chosen on the
// validation split (scored with a 1-bit softness so the bound can move
// anywhere in 4.2 ± 4.6 bits; the row's name gives it in bits).
//
// The third is the design card's entropy predictor on the model that would
// answer: the edge model's mean next-token entropy over the first
// textfeat.ProbeSteps steps of its reply (nats), its bound chosen on the
// validation split.
func EntropyRouters() []Router {
	return []Router{
		{Name: "entropy ≥ 4.2 bits (route default)", P: predictor.EntropyRule{}, Threshold: 0.5},
		{Name: "entropy, bound tuned", P: predictor.EntropyRule{Softness: 1}},
		{Name: "edge-model entropy, bound tuned", P: predictor.EntropyRule{Feature: textfeat.IdxEntropyMean, Threshold: 1, Softness: 0.5}},
	}
}

// CheckAgainstNet runs examples through the ONNX model and the float64
// reference and fails when they differ by more than 1e-4: an export bug
// would otherwise ship silently.
func CheckAgainstNet(m predictor.Predictor, net *Net, examples []Example) error {
	worst := 0.0
	for _, e := range examples {
		a, err := m.Predict(e.Features)
		if err != nil {
			return err
		}
		b, _ := net.Predict(e.Features)
		worst = math.Max(worst, math.Abs(a-b))
	}
	if worst > 1e-4 {
		return fmt.Errorf("exported model differs from the trained weights by %g", worst)
	}
	return nil
}

// v1Prefix copies examples with their features cut to textfeat.V1Dim.
func v1Prefix(ex []Example) []Example {
	out := make([]Example, len(ex))
	for i, e := range ex {
		e.Features = e.Features[:textfeat.V1Dim:textfeat.V1Dim]
		out[i] = e
	}
	return out
}

// softenUnanswered sets the target of every cloud-labelled example the
// cloud model does not answer right (Config.UnansweredTarget).
func softenUnanswered(ex []Example, target float32) {
	for i := range ex {
		if ex[i].Label > 0.5 && !ex[i].CloudOK {
			ex[i].Label = target
		}
	}
}
