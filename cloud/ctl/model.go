package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/phaseless/phaseless/cloud/fleetapi/trainset"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/edgemodel"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/predictor/train"
	"github.com/phaseless/phaseless/models/textfeat"
)

// DefaultRoutingData is the routing corpus the repository keeps, relative to
// the repository root (where `make models` runs).
const DefaultRoutingData = "models/data/routing"

func init() {
	register(&cli.Command{
		Name:    "model",
		Summary: "router predictor: features, score, train, eval",
		Subcommands: []*cli.Command{
			{Name: "features", Summary: "text lines on stdin → one JSON feature vector per line", Run: modelFeatures},
			{Name: "score", Summary: "text lines on stdin → one cloud probability per line (--model F)", Run: modelScore},
			{Name: "train", Summary: "train the predictor with gorgonia, choose its threshold on validation data, write ONNX (--out F)", Run: modelTrain},
			{Name: "grade", Summary: "run the edge and cloud models on the routing prompts, cache probes and replies for graded labels (slow; --data DIR)", Run: modelGrade},
			{Name: "eval", Summary: "held-out routing metrics of a model vs the entropy rule (--model F, --compare F)", Run: modelEval},
		},
	})
}

func parseFlags(fs *flag.FlagSet, cio cli.IO, args []string, summary string) error {
	err := cli.Parse(fs, args, cio.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		cli.PrintUsage(cio.Stdout, fs, summary)
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	return nil
}

// helpOK turns a help request into a clean exit.
func helpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func eachLine(ctx context.Context, r io.Reader, fn func(string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(sc.Text()); err != nil {
			return err
		}
	}
	return sc.Err()
}

func modelFeatures(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("model features", flag.ContinueOnError)
	fs.String("config", "", "optional YAML config file")
	probe := fs.Bool("probe", false, "fill the probe block with the shipped edge model's prefill (the agent does for a predictor that reads the block; the shipped one does not)")
	if err := parseFlags(fs, cio, args, fmt.Sprintf("phaselessctl model features < lines: textfeat v%d vectors (%d floats) as JSON arrays", textfeat.Version, textfeat.Dim)); err != nil {
		return helpOK(err)
	}
	pr, err := edgeProbe(*probe)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(cio.Stdout)
	defer w.Flush()
	return eachLine(ctx, cio.Stdin, func(line string) error {
		v := textfeat.Extract(line)
		pr(v, line)
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		w.Write(b)
		return w.WriteByte('\n')
	})
}

// edgeProbe returns what fills a vector's probe block: the shipped edge
// model's probe of the line (the agent's route.Config.Probe), or nothing.
func edgeProbe(on bool) (func(v []float32, line string), error) {
	if !on {
		return func([]float32, string) {}, nil
	}
	m, err := edgemodel.Open()
	if err != nil {
		return nil, err
	}
	return func(v []float32, line string) {
		p := m.ProbeChat(line, textfeat.ProbeSteps, textfeat.ProbeMaxTokens, 0)
		textfeat.SetProbe(v, textfeat.Probe{PromptNLL: p.PromptNLL, Entropy: p.Entropy, TopProb: p.TopProb})
	}, nil
}

// loadPredictor returns the model at path, the embedded default for "", or
// the entropy rule for "entropy".
func loadPredictor(path string) (predictor.Predictor, error) {
	switch path {
	case "":
		return predictor.Default()
	case "entropy":
		return predictor.EntropyRule{}, nil
	}
	return predictor.Load(path)
}

func modelScore(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("model score", flag.ContinueOnError)
	fs.String("config", "", "optional YAML config file")
	model := fs.String("model", "", "ONNX predictor; empty = the shipped model, \"entropy\" = the entropy>4.2 rule")
	probe := fs.Bool("probe", true, "fill the probe block with the shipped edge model's prefill when the predictor reads it, as the agent does (false: never)")
	if err := parseFlags(fs, cio, args, "phaselessctl model score [--model F] < lines: one cloud probability per line"); err != nil {
		return helpOK(err)
	}
	p, err := loadPredictor(*model)
	if err != nil {
		return err
	}
	if r, ok := p.(predictor.ProbeReader); ok && !r.ReadsProbe() {
		*probe = false
	}
	pr, err := edgeProbe(*probe)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(cio.Stdout)
	defer w.Flush()
	feat := make([]float32, textfeat.Dim)
	return eachLine(ctx, cio.Stdin, func(line string) error {
		textfeat.ExtractInto(feat, line)
		pr(feat, line)
		v, err := p.Predict(feat)
		if err != nil {
			return err
		}
		w.WriteString(strconv.FormatFloat(v, 'f', 6, 64))
		return w.WriteByte('\n')
	})
}

func modelTrain(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("model train", flag.ContinueOnError)
	fs.String("config", "", "optional YAML config file")
	data := fs.String("data", DefaultRoutingData, "routing corpus: mmlu/mmlu_*.csv[.gz] and clinc150-small.json[.gz]")
	out := fs.String("out", "predictor.onnx", "ONNX file to write")
	var telemetry cli.StringList
	fs.Var(&telemetry, "telemetry", "fleet telemetry to add as training data: an export's JSON lines, or the Parquet archive (--fleet-archive-dir, or one file of it); repeatable")
	labels := fs.String("labels", train.LabelsEdge, "label set: edge (what the device's edge model answers) or routellm (Mixtral-8x7B right/wrong, the first predictor's)")
	var compare cli.StringList
	fs.Var(&compare, "compare", "another ONNX predictor to evaluate in the same run, e.g. the previous shipped model (repeatable)")
	seed := fs.Uint64("seed", train.ShippedSeed, "seed for initialisation and shuffling (same seed → same bytes)")
	hidden := fs.Int("hidden", 0, "hidden units (0 = default: 64 with edge labels, 32 with routellm)")
	epochs := fs.Int("epochs", 0, "epochs (0 = default 15)")
	lr := fs.Float64("learn-rate", 0, "Adam learning rate (0 = default 0.003)")
	maxCar := fs.Float64("max-car-to-cloud", 0, "where the threshold is chosen on validation (--val-threshold, or data without dev.tsv): the largest share of validation car requests labelled local it may send to the cloud (0 = default 0.05; 1 = maximise balanced accuracy alone)")
	valThreshold := fs.Bool("val-threshold", false, "choose the threshold on the validation split even where the data has a development set (dev.tsv), whose rule is the default: the best smaller share of dev's open questions to the cloud and its car commands kept local")
	unanswered := fs.Float64("unanswered-target", 0, "edge labels: training target of cloud-labelled requests the cloud model does not answer right either (0 = 1, like the rest)")
	trainProbe := fs.Bool("probe", false, "train on the edge model's prefill probe (the device then runs it before each routed request); default: the probe block is left empty and ignored")
	telWeight := fs.Float64("telemetry-weight", 0, "share of the loss on the --telemetry examples, edge labels only (0 = the default, 0.2)")
	augment := fs.Int("augment", train.EdgeAugment, "edge labels: unseen-word copies of each short training request (train.AugmentUnseen; 0 none)")
	head := fs.String("head", "", "retrain only the output layer of this ONNX router (written by model train), keeping its first layer byte for byte, and choose the threshold again: an update that devices running it fetch as a few KB (firmware.ChunkingONNX)")
	devOnly := fs.Bool("dev-only", false, "edge labels: print no number of the held-out sets (fresh.tsv, fresh2.tsv), for the runs that choose features and settings")
	if err := parseFlags(fs, cio, args, "phaselessctl model train [--data DIR] [--telemetry FILE] --out F: train the router predictor and evaluate it"); err != nil {
		return helpOK(err)
	}
	if *out == "" {
		return &cli.FieldError{Field: "out", Err: errors.New("must name a file")}
	}
	if err := checkLabels(*labels); err != nil {
		return err
	}
	if *labels == train.LabelsRouteLLM {
		augmentSet := false
		fs.Visit(func(f *flag.Flag) { augmentSet = augmentSet || f.Name == "augment" })
		if !augmentSet {
			*augment = 0 // the first predictor's run has no augmentation (an explicit --augment is refused by train.Run)
		}
	}
	others, err := compareRouters(compare, *labels)
	if err != nil {
		return err
	}
	weights, err := telemetryWeights(*telWeight, *labels)
	if err != nil {
		return err
	}
	var fleetExamples []train.Example
	for _, path := range telemetry {
		f, err := openTelemetry(path)
		if err != nil {
			return fmt.Errorf("telemetry: %w", err)
		}
		// Quality signals relabel local answers; the held-out slice stays
		// out for model evaluate (cloud/fleetapi/trainset).
		ex, fst, err := trainset.Load(f, trainset.Train)
		f.Close()
		if err != nil {
			return fmt.Errorf("telemetry %s: %w", path, err)
		}
		st := fst.RequestStats
		fmt.Fprintf(cio.Stderr, "telemetry %s: %d feedback and %d shadow grades joined: %d local answers relabelled cloud, %d confirmed local; %d requests held out\n",
			path, fst.Feedback, fst.ShadowGrades, fst.BadLocal, fst.GoodLocal, fst.OtherPart)
		fmt.Fprintf(cio.Stderr, "telemetry %s: %d records, %d local + %d cloud labels, %d skipped (feature version), %d skipped (no label)\n",
			path, st.Records, st.Local, st.Cloud, st.SkippedVersion, st.SkippedUnknown)
		fleetExamples = append(fleetExamples, ex...)
	}
	var headNet *train.Net
	if *head != "" {
		raw, err := os.ReadFile(*head)
		if err != nil {
			return &cli.FieldError{Field: "head", Err: err}
		}
		if headNet, err = train.NetFromONNX(raw); err != nil {
			return &cli.FieldError{Field: "head", Err: err}
		}
	}
	res, err := train.Run(ctx, train.Options{
		DataDir:   *data,
		Labels:    *labels,
		Compare:   others,
		Telemetry: fleetExamples,
		Out:       *out,
		Config:    train.Config{Seed: *seed, Hidden: *hidden, Epochs: *epochs, LearnRate: *lr, MaxCarToCloud: *maxCar, ValThreshold: *valThreshold, UnansweredTarget: *unanswered, SourceWeights: weights, Probe: *trainProbe, Augment: *augment, Head: headNet},
		Log:       cio.Stderr,
	})
	if err != nil {
		return err
	}
	if res.EdgeReport != nil {
		where := "the validation split"
		if res.ThresholdOnDev {
			where = "the development set"
		}
		fmt.Fprintf(cio.Stdout, "threshold %.4f (chosen on %s; validation balanced accuracy %.3f; stored in the model's metadata as %s)\n",
			res.Threshold, where, res.ValBalanced, predictor.MetaThreshold)
		res.EdgeReport.HideFresh = *devOnly
		res.EdgeReport.Print(cio.Stdout)
		return nil
	}
	res.Report.Print(cio.Stdout)
	return nil
}

func modelGrade(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("model grade", flag.ContinueOnError)
	fs.String("config", "", "optional YAML config file")
	data := fs.String("data", DefaultRoutingData, "routing corpus; the cache is written there as "+train.GradedFile)
	batch := fs.Int("batch", 32, "prompts per probe pass and generations in flight")
	threads := fs.Int("threads", 0, "cores the models may use (0 = all)")
	if err := parseFlags(fs, cio, args, "phaselessctl model grade [--data DIR]: measure what model train's graded labels and probe features read"); err != nil {
		return helpOK(err)
	}
	return train.GradeRun(ctx, train.GradeOptions{DataDir: *data, Batch: *batch, Threads: *threads, Log: cio.Stderr})
}

func checkLabels(labels string) error {
	if labels != train.LabelsEdge && labels != train.LabelsRouteLLM {
		return &cli.FieldError{Field: "labels", Err: fmt.Errorf("%q: want %s or %s", labels, train.LabelsEdge, train.LabelsRouteLLM)}
	}
	return nil
}

// routerThreshold is the threshold agent/route would use with p when the
// operator sets none: the model's own, else the router's 0.5.
func routerThreshold(p predictor.Predictor) float64 {
	if t, ok := p.(predictor.Thresholder); ok {
		if th, ok := t.Threshold(); ok {
			return th
		}
	}
	return 0.5
}

// compareRouters loads each --compare model. With edge labels each gives
// two rows: at the threshold the router would use with it, and with a
// threshold chosen on the validation split (what it could do at best).
func compareRouters(paths []string, labels string) ([]train.Router, error) {
	var out []train.Router
	for _, path := range paths {
		p, err := loadPredictor(path)
		if err != nil {
			return nil, &cli.FieldError{Field: "compare", Err: err}
		}
		out = append(out, train.Router{Name: path, P: p, Threshold: routerThreshold(p)})
		if labels == train.LabelsEdge {
			out = append(out, train.Router{Name: path + ", threshold tuned", P: p})
		}
	}
	return out, nil
}

func modelEval(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("model eval", flag.ContinueOnError)
	fs.String("config", "", "optional YAML config file")
	model := fs.String("model", "", "ONNX predictor to evaluate; empty = the shipped model")
	data := fs.String("data", DefaultRoutingData, "routing corpus: mmlu/mmlu_*.csv[.gz] and clinc150-small.json[.gz]")
	labels := fs.String("labels", train.LabelsEdge, "label set: edge (held-out split by prompt, threshold from the model) or routellm (APGR/CPT on held-out MMLU subjects)")
	var compare cli.StringList
	fs.Var(&compare, "compare", "another ONNX predictor to evaluate in the same run (repeatable)")
	seed := fs.Uint64("seed", 1, "seed of the random-routing baseline (routellm labels)")
	maxCar := fs.Float64("max-car-to-cloud", train.DefaultMaxCarToCloud, "for routers without a threshold, where the data has no development set (dev.tsv; with one their threshold is chosen on it): the largest share of validation car requests the threshold chosen for them may send to the cloud")
	if err := parseFlags(fs, cio, args, "phaselessctl model eval [--model F] [--compare F] [--labels edge|routellm] [--data DIR]: held-out routing metrics vs the entropy rule"); err != nil {
		return helpOK(err)
	}
	if err := checkLabels(*labels); err != nil {
		return err
	}
	p, err := loadPredictor(*model)
	if err != nil {
		return err
	}
	others, err := compareRouters(compare, *labels)
	if err != nil {
		return err
	}
	d, err := train.LoadRouting(*data)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	name := *model
	if name == "" {
		name = "predictor (shipped)"
	}
	if *labels == train.LabelsEdge {
		split, err := d.GradedSplit(*data)
		if err != nil {
			return err
		}
		routers := append([]train.Router{{Name: name, P: p, Threshold: routerThreshold(p)}}, others...)
		rep, err := train.EvaluateEdge(append(routers, train.EntropyRouters()...), split, *maxCar)
		if err != nil {
			return err
		}
		rep.Print(cio.Stdout)
		return nil
	}
	mmlu, clinc := d.EvalSets()
	routers := append([]train.Router{{Name: name, P: p}}, others...)
	rep, err := train.Evaluate(append(routers, train.Router{Name: "entropy > 4.2", P: predictor.EntropyRule{}}), mmlu, clinc, *seed)
	if err != nil {
		return err
	}
	rep.Print(cio.Stdout)
	return nil
}
