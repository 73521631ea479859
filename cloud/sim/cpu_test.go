package sim

import (
	"math"
	"testing"
	"time"

	"github.com/phaseless/phaseless/models/lm"
)

// devBench is `phaselessctl lm bench --model dev.gguf --threads 1` on this
// machine (2026-12-01, load average 25), for the stand-in model of
// docs/cloud.md (lm init --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 128
// --ctx 1024).
var devBench = CPUBench{DecodeTokens: 64, PromptLen: 512, Result: lm.BenchResult{
	Decode:              []lm.BatchRate{{Batch: 1, TokensPerSec: 15912.7}, {Batch: 4, TokensPerSec: 28848.7}, {Batch: 16, TokensPerSec: 42485.5}},
	PrefillTokensPerSec: 6097.2, TTFTCached: 12774 * time.Microsecond, CachedPromptTokens: 448,
}}

var devShape = lm.Config{Vocab: 258, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 128, ContextLen: 1024}

// benchOf is what lm bench would measure on a deployment (the inverse of
// FitCPU), so the fit can be checked for recovering what made the figures.
func benchOf(d *Deployment) CPUBench {
	ctx := 16 + 32
	step := func(s StepShape) float64 { return d.StepTime(s).Seconds() }
	t1 := step(StepShape{Tokens: 1, Sampled: 1, AttnPairs: float64(ctx + 1), KVRead: ctx})
	t16 := step(StepShape{Tokens: 16, Sampled: 16, AttnPairs: 16 * float64(ctx+1), KVRead: 16 * ctx})
	tp := step(StepShape{Tokens: 512, Sampled: 1, AttnPairs: 512 * 513 / 2})
	tc := step(StepShape{Tokens: 64, Sampled: 1, AttnPairs: (512*513 - 448*449) / 2, KVRead: 448})
	return CPUBench{DecodeTokens: 64, PromptLen: 512, Result: lm.BenchResult{
		Decode:              []lm.BatchRate{{Batch: 1, TokensPerSec: 1 / t1}, {Batch: 16, TokensPerSec: 16 / t16}},
		PrefillTokensPerSec: 512 / tp, TTFTCached: time.Duration(tc * 1e9), CachedPromptTokens: 448,
	}}
}

// TestFitCPU: figures made by a known engine give that engine back; the
// figures measured here fit within a factor the machine's noise explains.
func TestFitCPU(t *testing.T) {
	m := ModelFromLM("dev", devShape)
	truth := &Deployment{GPU: GPU{Name: "cpu", PeakFLOPS: 8e9, HBMBytesPerSec: 4e9, MemBytes: math.Inf(1), LinkBytesPerS: 1}, Model: m, TP: 1,
		Engine:   EngineConfig{BlockSize: 16, MaxNumSeqs: 16, MaxBatchedTokens: 256, ComputeEff: 1, AttnEff: 0.2, MemEff: 1, StepOverhead: 40 * time.Microsecond},
		KVBlocks: 1024, MaxModelLen: 1024}
	d, err := FitCPU(m, benchOf(truth))
	if err != nil {
		t.Fatal(err)
	}
	rel := func(a, b float64) float64 { return math.Abs(a-b) / b }
	if rel(d.Engine.StepOverhead.Seconds(), 40e-6) > 0.01 || rel(d.GPU.PeakFLOPS*d.Engine.ComputeEff, 8e9) > 0.01 ||
		rel(d.GPU.PeakFLOPS*d.Engine.AttnEff, 1.6e9) > 0.01 || rel(d.GPU.HBMBytesPerSec, 4e9) > 0.01 {
		t.Fatalf("fit %+v / %+v, want the generating engine back", d.GPU, d.Engine)
	}
	if d.Engine.MaxNumSeqs != 16 || d.Engine.MaxBatchedTokens != 256 || d.MaxModelLen != 1024 {
		t.Fatalf("engine %+v", d.Engine)
	}
	d, err = FitCPU(m, devBench)
	if err != nil {
		t.Fatal(err)
	}
	back := benchOf(d)
	for i, want := range []float64{devBench.Result.PrefillTokensPerSec, devBench.Result.Decode[2].TokensPerSec, 1 / devBench.Result.TTFTCached.Seconds()} {
		got := []float64{back.Result.PrefillTokensPerSec, back.Result.Decode[1].TokensPerSec, 1 / back.Result.TTFTCached.Seconds()}[i]
		if got/want > 3 || want/got > 3 {
			t.Errorf("measured figure %d: %.4g, fitted engine %.4g", i, want, got)
		}
	}
	if _, err := FitCPU(m, CPUBench{}); err == nil {
		t.Fatal("empty bench accepted")
	}
}
