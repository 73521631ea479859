package lmtrain

import (
	"math/rand/v2"
	"os"
	"testing"
)

// BenchmarkTrainStep measures one forward+backward+AdamW step of the edge
// shape against a forward-only pass in the same run (the ratio is the cost of
// training over inference, ideally about 3×).
func BenchmarkTrainStep(b *testing.B) {
	pr := EdgePreset()
	if os.Getenv("LMTRAIN_BENCH_PRESET") == "cloud" {
		pr = CloudPreset()
	}
	c := pr.Model
	tc := pr.Train
	p := NewParams(c)
	p.Init(1, 0.02)
	m := NewModel(p)
	opt := NewAdamW(p, tc)
	rng := rand.New(rand.NewPCG(1, 1))
	bs, s := 16, tc.SeqLen // fixed, so numbers compare across preset changes
	tokens, targets := randTokens(rng, bs*s, c.Vocab), randTokens(rng, bs*s, c.Vocab)
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			m.Loss(tokens, targets, bs, s, false)
		}
		b.ReportMetric(float64(b.N*bs*s)/b.Elapsed().Seconds(), "tok/s")
	})
	b.Run("train", func(b *testing.B) {
		for b.Loop() {
			m.ZeroGrad()
			m.Loss(tokens, targets, bs, s, true)
			ClipGradNorm(m.G.Flat, 1)
			opt.Update(p.Flat, m.G.Flat, 1e-3)
		}
		b.ReportMetric(float64(b.N*bs*s)/b.Elapsed().Seconds(), "tok/s")
	})
}
