package lm

import (
	"context"
	"testing"
	"time"

	"github.com/phaseless/phaseless/models/lm/constraint"
	"github.com/phaseless/phaseless/models/lm/grammar"
)

// BenchmarkConstrainedDecode measures what grammar masking costs per
// generated token: each iteration decodes 64 tokens of one sequence free
// and 64 under a JSON-schema grammar (inside a long string, where nearly
// every token stays allowed, so the mask walks the most of the vocabulary
// trie), interleaved on the same engine, and reports both per-token times
// and their ratio. Shapes: the edge model's (byte vocabulary of 258) and a
// 4,096-token vocabulary (benchConfig). Run:
//
//	go test -run '^$' -bench ConstrainedDecode -benchtime 10x ./models/lm
func BenchmarkConstrainedDecode(b *testing.B) {
	edge := Config{Vocab: 258, Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, FFN: 352, ContextLen: 256}.WithDefaults()
	for _, tc := range []struct {
		name  string
		model func(b *testing.B) *Model
	}{
		{"edge-shape", func(b *testing.B) *Model { m, _ := buildModel(b, edge, F32, 1, false); return m }},
		{"vocab4096", loadBenchModel},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := tc.model(b)
			e, err := NewEngine(m, EngineConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			g, err := grammar.Schema([]byte(`{"type":"string","minLength":400}`))
			if err != nil {
				b.Fatal(err)
			}
			prompt := benchPrompt(m, 16, 1)
			var free, masked time.Duration
			var freeN, maskedN int
			run := func(opt GenOptions) (time.Duration, int) {
				start := time.Now()
				fin, err := e.GenerateTokens(context.Background(), prompt, opt, nil)
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(start), fin.CompletionTokens
			}
			m.vocabIndex() // the trie is built once per model, not per request
			b.ResetTimer()
			for i := range b.N {
				d, n := run(GenOptions{MaxTokens: 64, IgnoreEOS: true, Seed: uint64(i + 1), Temperature: 1})
				free += d
				freeN += n
				d, n = run(GenOptions{MaxTokens: 64, Seed: uint64(i + 1), Temperature: 1, grammar: g})
				masked += d
				maskedN += n
			}
			fpt := float64(free.Nanoseconds()) / float64(freeN)
			mpt := float64(masked.Nanoseconds()) / float64(maskedN)
			b.ReportMetric(fpt, "ns/token-free")
			b.ReportMetric(mpt, "ns/token-masked")
			b.ReportMetric(mpt/fpt, "masked/free")
		})
	}
}

// BenchmarkMask is the mask alone, for one state inside a string.
func BenchmarkMask(b *testing.B) {
	m := loadBenchModel(b)
	g, err := grammar.Schema([]byte(`{"type":"string"}`))
	if err != nil {
		b.Fatal(err)
	}
	c := constraint.New(m.vocabIndex(), m.tok, g)
	c.State, _ = c.State.AdvanceBytes([]byte(`"abc`))
	logits := make([]float32, m.Config.Vocab)
	b.ResetTimer()
	for range b.N {
		c.Mask(logits)
	}
}
