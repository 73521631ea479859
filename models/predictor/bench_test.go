package predictor

import (
	"slices"
	"testing"
	"time"

	"github.com/phaseless/phaseless/models/edgemodel"
	"github.com/phaseless/phaseless/models/textfeat"
)

// The router's budget is features + inference ≤ 50 µs median per request
// (docs/predictor.md). Each benchmark reports the median of per-call times
// as p50-ns besides the mean; EntropyRule is the baseline in the same run.
var benchTexts = map[string]string{
	"command": "set a timer for ten minutes and navigate home",
	"mmlu":    "Which of the following structures is derived from ectomesenchyme?\nA. Motor neurons\nB. Skeletal muscles\nC. Melanocytes\nD. Sweat glands\nAnswer:",
	"cjk":     "東京駅までの道を教えてください？🚗 渋滞を避けて、高速道路は使わないで。",
}

func benchRoute(b *testing.B, p Predictor) { benchRouteWith(b, p, nil) }

// benchRouteWith adds probe, the local model's prefill probe, per request,
// as the agent runs it (agent/engine.go probeText).
func benchRouteWith(b *testing.B, p Predictor, probe func(string) textfeat.Probe) {
	for name, s := range benchTexts {
		b.Run(name, func(b *testing.B) {
			feat := make([]float32, textfeat.Dim)
			times := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				textfeat.ExtractInto(feat, s)
				if probe != nil {
					textfeat.SetProbe(feat, probe(s))
				}
				if _, err := p.Predict(feat); err != nil {
					b.Fatal(err)
				}
				if len(times) < cap(times) {
					times = append(times, time.Since(t0))
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
		})
	}
}

// BenchmarkRouteModel: features + ONNX inference with the shipped model,
// all the agent runs to route a request since textfeat v3 (the shipped
// model does not read the probe block, so the agent does not probe).
func BenchmarkRouteModel(b *testing.B) {
	m, err := Default()
	if err != nil {
		b.Fatal(err)
	}
	benchRoute(b, m)
}

// BenchmarkRouteV3 is the same with the previous shipped model
// (testdata/predictor-edge-v3.onnx: 32 hidden units where the shipped one
// has 64), the baseline of its cost in the same run.
func BenchmarkRouteV3(b *testing.B) {
	m, err := Load("testdata/predictor-edge-v3.onnx")
	if err != nil {
		b.Fatal(err)
	}
	benchRoute(b, m)
}

// BenchmarkRouteV2Probed is what the agent paid per request with the
// previous shipped model (testdata/predictor-edge-v2.onnx, textfeat v2):
// features, the shipped edge model's probe (prefill of at most
// textfeat.ProbeMaxTokens prompt tokens and textfeat.ProbeSteps greedy
// steps, one core, as agent/engine.go ran it) and ONNX inference.
func BenchmarkRouteV2Probed(b *testing.B) {
	m, err := Load("testdata/predictor-edge-v2.onnx")
	if err != nil {
		b.Fatal(err)
	}
	edge, err := edgemodel.Open()
	if err != nil {
		b.Fatal(err)
	}
	benchRouteWith(b, m, func(s string) textfeat.Probe {
		p := edge.ProbeChat(s, textfeat.ProbeSteps, textfeat.ProbeMaxTokens, 1)
		return textfeat.Probe{PromptNLL: p.PromptNLL, Entropy: p.Entropy, TopProb: p.TopProb}
	})
}

// BenchmarkRouteEntropyRule is features + the articles' rule: the baseline.
func BenchmarkRouteEntropyRule(b *testing.B) { benchRoute(b, EntropyRule{}) }

// BenchmarkPredictOnly is the onnx-go forward pass alone, of the shipped
// model and of the previous one (testdata/predictor-edge-v3.onnx, half the
// hidden units) in the same run.
func BenchmarkPredictOnly(b *testing.B) {
	shipped, err := Default()
	if err != nil {
		b.Fatal(err)
	}
	v3, err := Load("testdata/predictor-edge-v3.onnx")
	if err != nil {
		b.Fatal(err)
	}
	feat := textfeat.Extract(benchTexts["mmlu"])
	for _, m := range []struct {
		name string
		p    Predictor
	}{{"shipped", shipped}, {"v3", v3}} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.p.Predict(feat); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
