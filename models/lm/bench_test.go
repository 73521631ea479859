package lm

import (
	"context"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// benchConfig is a model whose F32 weights (~88 MB) are far beyond the CPU
// caches, so decode is bound by memory as it is for real models.
func benchConfig() Config {
	return Config{Vocab: 4096, Dim: 512, Layers: 6, Heads: 8, KVHeads: 4, FFN: 1408, ContextLen: 1024}.WithDefaults()
}

var (
	benchOnce  sync.Once
	benchModel *Model
)

func loadBenchModel(b *testing.B) *Model {
	benchOnce.Do(func() {
		cfg := benchConfig()
		w, err := RandomWeights(cfg, 42)
		if err != nil {
			b.Fatal(err)
		}
		spec, err := tokenizer.PaddedByteSpec(cfg.Vocab)
		if err != nil {
			b.Fatal(err)
		}
		if benchModel, err = New(cfg, spec, w); err != nil {
			b.Fatal(err)
		}
	})
	return benchModel
}

// BenchmarkEngine runs the whole engine benchmark once per iteration and
// reports the ratios the issue sets goals for (run with -benchtime=1x):
// decode tok/s at batch 16 over batch 1 (goal ≥ 6), TTFT with a 90%-shared
// cached prefix over uncached (goal ≤ 0.2), and batch-1 decode's weight
// traffic as a fraction of the memory-copy bandwidth measured in the same run.
func BenchmarkEngine(b *testing.B) {
	m := loadBenchModel(b)
	b.ResetTimer()
	for range b.N {
		r, err := Bench(context.Background(), m, BenchConfig{})
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range r.Decode {
			b.Logf("batch %2d: %8.1f tok/s, %8.1f tok/CPU-s", d.Batch, d.TokensPerSec, d.TokensPerCPUSec)
		}
		b.Logf("prefill %.0f tok/s; TTFT uncached %v, cached %v (%d tokens cached); copy %.2f GB/s, matvec stream %.2f GB/s; weights %.1f MB",
			r.PrefillTokensPerSec, r.TTFTUncached, r.TTFTCached, r.CachedPromptTokens, r.CopyBytesPerSec/1e9, r.ReadBytesPerSec/1e9, float64(r.WeightBytes)/1e6)
		b.ReportMetric(r.Decode[0].TokensPerSec, "tok/s-batch1")
		b.ReportMetric(r.Speedup(16), "batch16/batch1")
		b.ReportMetric(r.CPUSpeedup(16), "batch16/batch1-cpu")
		b.ReportMetric(float64(r.TTFTCached)/float64(r.TTFTUncached), "ttft-cached/uncached")
		b.ReportMetric(r.SingleStreamFraction, "bw-fraction-copy")
		b.ReportMetric(r.SingleStreamReadFraction, "bw-fraction-stream")
	}
}

// BenchmarkForward measures one forward pass of n tokens of one sequence
// (prefill-shaped work) for the three storage types.
func BenchmarkForward(b *testing.B) {
	m := loadBenchModel(b)
	tokens := benchPrompt(m, 64, 1)
	b.ResetTimer()
	for range b.N {
		m.Logits(tokens)
	}
	b.ReportMetric(float64(len(tokens)*b.N)/b.Elapsed().Seconds(), "tok/s")
}
