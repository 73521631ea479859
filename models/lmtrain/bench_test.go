package lmtrain

import (
	"math/rand/v2"
	"os"
	"testing"

	"gonum.org/v1/gonum/blas"
)

// benchPreset is the preset the benchmarks use: edge, or cloud when
// LMTRAIN_BENCH_PRESET=cloud.
func benchPreset() Preset {
	if os.Getenv("LMTRAIN_BENCH_PRESET") == "cloud" {
		return CloudPreset()
	}
	return EdgePreset()
}

// withGonum runs fn with every product routed through gonum (on) or gemm.
func withGonum(on bool, fn func()) {
	old := gonumGemm
	gonumGemm = on
	defer func() { gonumGemm = old }()
	fn()
}

var gemmImpls = []struct {
	name  string
	gonum bool
}{{"gonum", true}, {"gemm", false}}

// BenchmarkTrainStep measures one forward+backward+AdamW step, and a
// forward-only pass, with gonum's Sgemm and with gemm in the same run (the
// ratio gemm/gonum is the speedup; train/forward is the cost of training over
// inference, ideally about 3×).
func BenchmarkTrainStep(b *testing.B) {
	pr := benchPreset()
	c := pr.Model
	tc := pr.Train
	bs, s := 16, tc.SeqLen // fixed, so numbers compare across preset changes
	for _, impl := range gemmImpls {
		p := NewParams(c)
		p.Init(1, 0.02)
		m := NewModel(p)
		opt := NewAdamW(p, tc)
		rng := rand.New(rand.NewPCG(1, 1))
		tokens, targets := randTokens(rng, bs*s, c.Vocab), randTokens(rng, bs*s, c.Vocab)
		b.Run(impl.name+"/forward", func(b *testing.B) {
			withGonum(impl.gonum, func() {
				for b.Loop() {
					m.Loss(tokens, targets, bs, s, false)
				}
			})
			b.ReportMetric(float64(b.N*bs*s)/b.Elapsed().Seconds(), "tok/s")
		})
		b.Run(impl.name+"/train", func(b *testing.B) {
			withGonum(impl.gonum, func() {
				for b.Loop() {
					m.ZeroGrad()
					m.Loss(tokens, targets, bs, s, true)
					ClipGradNorm(m.G.Flat, 1)
					opt.Update(p.Flat, m.G.Flat, 1e-3)
				}
			})
			b.ReportMetric(float64(b.N*bs*s)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkGemm measures each of the trainer's product shapes (16×128 tokens
// of the bench preset) with gonum and with gemm; attention shapes run serially
// as the trainer runs them, one (sequence, head) pair per goroutine, and with
// gemm skip their causal zeros (GFLOP/s counts the full product, so it is the
// effective rate against gonum's).
func BenchmarkGemm(b *testing.B) {
	c := benchPreset().Model
	rng := rand.New(rand.NewPCG(2, 2))
	for _, sh := range gemmShapes(c, 16*128) {
		ar, ac := sh.m, sh.k
		if sh.tA {
			ar, ac = sh.k, sh.m
		}
		br, bc := sh.k, sh.n
		if sh.tB {
			br, bc = sh.n, sh.k
		}
		a, bm, cm := randMat(rng, ar*ac), randMat(rng, br*bc), randMat(rng, sh.m*sh.n)
		run := gemm
		if sh.serial {
			run = func(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
				gemmCausal(sh.tri, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
			}
		}
		for _, impl := range gemmImpls {
			b.Run(sh.name+"/"+impl.name, func(b *testing.B) {
				withGonum(impl.gonum, func() {
					for b.Loop() {
						run(transName(sh.tA), transName(sh.tB), sh.m, sh.n, sh.k, 1, a, ac, bm, bc, 1, cm, sh.n)
					}
				})
				b.ReportMetric(2*float64(sh.m*sh.n*sh.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
