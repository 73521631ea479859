package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/phaseless/phaseless/models/predictor"
)

// Options is one `phaselessctl model train` run.
type Options struct {
	DataDir   string   // routing corpus (default models/data/routing)
	Telemetry []string // JSON-lines files of fleet.RequestRecord, extra training data
	Out       string   // where to write the ONNX file
	Config    Config
	Log       io.Writer // progress; nil for none
}

// Result is what a run made.
type Result struct {
	Model     []byte
	Net       *Net
	Examples  int
	Telemetry TelemetryStats
	Report    *Report
}

// Run loads the data, trains, writes the ONNX file, reloads it through the
// device runtime (onnx-go), checks it matches the trained weights, and
// evaluates it against the baselines on the held-out data.
func Run(ctx context.Context, opt Options) (*Result, error) {
	logf := func(format string, args ...any) {
		if opt.Log != nil {
			fmt.Fprintf(opt.Log, format, args...)
		}
	}
	data, err := LoadRouting(opt.DataDir)
	if err != nil {
		return nil, err
	}
	examples := data.TrainExamples()
	res := &Result{}
	for _, path := range opt.Telemetry {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
		ex, st, err := LoadTelemetry(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("telemetry %s: %w", path, err)
		}
		logf("telemetry %s: %d records, %d local + %d cloud labels, %d skipped (feature version), %d skipped (no label)\n",
			path, st.Records, st.Local, st.Cloud, st.SkippedVersion, st.SkippedUnknown)
		res.Telemetry.Records += st.Records
		res.Telemetry.Local += st.Local
		res.Telemetry.Cloud += st.Cloud
		res.Telemetry.SkippedVersion += st.SkippedVersion
		res.Telemetry.SkippedUnknown += st.SkippedUnknown
		examples = append(examples, ex...)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Examples = len(examples)
	logf("training on %d examples (%d MMLU prompts, %d CLINC utterances in the corpus)\n", len(examples), len(data.MMLU), len(data.CLINC))
	net, err := Fit(opt.Config, examples)
	if err != nil {
		return nil, err
	}
	res.Net = net
	logf("loss by epoch: first %.4f, last %.4f\n", net.Losses[0], net.Losses[len(net.Losses)-1])
	res.Model = net.ONNX()

	m, err := predictor.Read(res.Model)
	if err != nil {
		return nil, fmt.Errorf("exported model does not load: %w", err)
	}
	mmlu, clinc := data.EvalSets()
	if err := CheckAgainstNet(m, net, append(mmlu, clinc...)); err != nil {
		return nil, err
	}
	if opt.Out != "" {
		if err := os.WriteFile(opt.Out, res.Model, 0o644); err != nil {
			return nil, err
		}
		logf("wrote %s (%d bytes)\n", opt.Out, len(res.Model))
	}
	res.Report, err = Evaluate([]Router{
		{Name: "predictor (new)", P: m},
		{Name: "entropy > 4.2", P: predictor.EntropyRule{}},
	}, mmlu, clinc, opt.Config.Seed)
	return res, err
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
