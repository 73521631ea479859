package lmtrain

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"gonum.org/v1/gonum/blas"
)

// refGemm is C = alpha·op(A)·op(B) + beta·C in float64, element by element,
// and the bound on float32 rounding error each element may carry.
func refGemm(tA, tB bool, m, n, k int, alpha float64, a []float32, lda int, b []float32, ldb int, beta float64, c []float32, ldc int) (want, tol []float64) {
	at := func(i, p int) float64 {
		if tA {
			return float64(a[p*lda+i])
		}
		return float64(a[i*lda+p])
	}
	bt := func(p, j int) float64 {
		if tB {
			return float64(b[j*ldb+p])
		}
		return float64(b[p*ldb+j])
	}
	want, tol = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, mag float64
			for p := range k {
				s += at(i, p) * bt(p, j)
				mag += math.Abs(at(i, p) * bt(p, j))
			}
			w := alpha * s
			mag = math.Abs(alpha) * mag
			if beta != 0 {
				w += beta * float64(c[i*ldc+j])
				mag += math.Abs(beta * float64(c[i*ldc+j]))
			}
			want[i*n+j] = w
			// float32 accumulation over k terms plus the alpha/beta step.
			tol[i*n+j] = float64(k+4)*0x1p-23*mag + 1e-30
		}
	}
	return want, tol
}

func randMat(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func transName(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// checkGemm runs gemm on random matrices with leading dimensions pad wider
// than needed and compares every element with the float64 reference. The
// padding columns of C must come back untouched.
func checkGemm(t *testing.T, rng *rand.Rand, par, tA, tB bool, m, n, k, pad int, alpha, beta float32) {
	t.Helper()
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	lda, ldb, ldc := max(1, ac)+pad, max(1, bc)+pad, n+pad
	a, b := randMat(rng, max(0, ar*lda)), randMat(rng, max(0, br*ldb))
	c := randMat(rng, m*ldc)
	if beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN()) // beta 0 must not read C
		}
	}
	orig := slices.Clone(c)
	want, tol := refGemm(tA, tB, m, n, k, float64(alpha), a, lda, b, ldb, float64(beta), c, ldc)
	run := gemmSerial
	if par {
		run = gemm
	}
	run(transName(tA), transName(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	for i := range m {
		for j := range ldc {
			got := c[i*ldc+j]
			if j >= n {
				if math.Float32bits(got) != math.Float32bits(orig[i*ldc+j]) {
					t.Fatalf("tA=%v tB=%v %d×%d×%d pad %d: wrote C[%d][%d] outside the matrix", tA, tB, m, n, k, pad, i, j)
				}
				continue
			}
			if d := math.Abs(float64(got) - want[i*n+j]); !(d <= tol[i*n+j]) {
				t.Fatalf("tA=%v tB=%v %d×%d×%d pad %d alpha %g beta %g: C[%d][%d] = %g, want %g (tolerance %g)",
					tA, tB, m, n, k, pad, alpha, beta, i, j, got, want[i*n+j], tol[i*n+j])
			}
		}
	}
}

func testGemmForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Sizes around the 6×16 tile and the kc=256 depth block.
	ms := []int{1, 5, 6, 7, 13, 37}
	ns := []int{1, 15, 16, 17, 35}
	ks := []int{0, 1, 8, 31, 256, 300}
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			for _, m := range ms {
				for _, n := range ns {
					for _, k := range ks {
						for _, ab := range [][2]float32{{1, 0}, {1, 1}, {-0.5, 0.75}, {0, 0.5}} {
							checkGemm(t, rng, false, tA, tB, m, n, k, (m+n+k)%3, ab[0], ab[1])
						}
					}
				}
			}
			// Large enough to run on several goroutines.
			checkGemm(t, rng, true, tA, tB, 67, 45, 300, 2, 1, 1)
			checkGemm(t, rng, true, tA, tB, 128, 128, 64, 0, 0.125, 0)
		}
	}
}

// TestGemmMatchesReference checks every transposition form, odd sizes, depth
// blocking, alpha/beta and strided leading dimensions against float64, with
// the kernel this CPU uses.
func TestGemmMatchesReference(t *testing.T) { testGemmForms(t) }

// TestGemmPortableKernel runs the same checks through the plain-Go
// micro-kernel, which other architectures (and amd64 without AVX2) use.
func TestGemmPortableKernel(t *testing.T) {
	useGoKernel(t)
	testGemmForms(t)
}

// TestGemmKernelsAgree compares the assembly and Go micro-kernels on one
// tile: both sum in k order, so they differ only by FMA rounding.
func TestGemmKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const k, ldc = 77, nr + 3
	a, b := randMat(rng, k*mr), randMat(rng, k*nr)
	for _, beta := range []float32{0, 1, -0.25} {
		c0 := randMat(rng, mr*ldc)
		c1 := slices.Clone(c0)
		kernel(k, &a[0], 1, mr, &b[0], &c0[0], ldc, 0.5, beta)
		kernelGo(k, a, 1, mr, b, c1, ldc, 0.5, beta)
		for i := range c0 {
			if d := math.Abs(float64(c0[i] - c1[i])); d > 1e-4*(1+math.Abs(float64(c1[i]))) {
				t.Fatalf("beta %g: element %d: kernel %g, kernelGo %g", beta, i, c0[i], c1[i])
			}
		}
	}
}

// TestGemmDeterministic checks that the result does not depend on how many
// goroutines computed it: bit-identical for GOMAXPROCS 1, 2 and 3, and for
// the serial entry point.
func TestGemmDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const m, n, k = 203, 130, 515
	a, b := randMat(rng, m*k), randMat(rng, k*n)
	c0 := randMat(rng, m*n)
	var ref []float32
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 3, 0} {
		c := slices.Clone(c0)
		if procs == 0 {
			gemmSerial(blas.Trans, blas.NoTrans, m, n, k, 1, a, m, b, n, 1, c, n)
		} else {
			runtime.GOMAXPROCS(procs)
			gemm(blas.Trans, blas.NoTrans, m, n, k, 1, a, m, b, n, 1, c, n)
		}
		if ref == nil {
			ref = c
			continue
		}
		for i := range c {
			if math.Float32bits(c[i]) != math.Float32bits(ref[i]) {
				t.Fatalf("GOMAXPROCS %d: element %d = %g, with 1 it was %g", procs, i, c[i], ref[i])
			}
		}
	}
}

func TestGemmRejectsShortSlices(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"short c", func() {
			gemm(blas.NoTrans, blas.NoTrans, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
		}},
		{"small lda", func() {
			gemm(blas.NoTrans, blas.NoTrans, 2, 2, 2, 1, make([]float32, 4), 1, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			tc.f()
		}()
	}
}

// gemmShape is one of the trainer's products; attention's run serially (one
// (sequence, head) pair per goroutine) and skip the causal zeros tri names.
type gemmShape struct {
	name    string
	tA, tB  bool
	m, n, k int
	serial  bool
	tri     triangle
}

// gemmShapes are the trainer's products for a preset at the given token
// count, by name: the linear layers' three forms and one attention head's.
func gemmShapes(c Config, tokens int) []gemmShape {
	s, hd := 128, c.HeadDim()
	lin := func(name string, tA, tB bool, m, n, k int) gemmShape {
		return gemmShape{fmt.Sprintf("%s_%dx%dx%d", name, m, n, k), tA, tB, m, n, k, false, full}
	}
	att := func(name string, tA, tB bool, m, n, k int, tri triangle) gemmShape {
		return gemmShape{fmt.Sprintf("%s_%dx%dx%d", name, m, n, k), tA, tB, m, n, k, true, tri}
	}
	return []gemmShape{
		lin("fwd_x·Wᵀ", false, true, tokens, c.FFN, c.Dim),
		lin("fwd_x·Wᵀ", false, true, tokens, c.Dim, c.FFN),
		lin("fwd_logits", false, true, tokens, c.Vocab, c.Dim),
		lin("dx_dy·W", false, false, tokens, c.Dim, c.FFN),
		lin("dx_dy·W", false, false, tokens, c.FFN, c.Dim),
		lin("dW_dyᵀ·x", true, false, c.FFN, c.Dim, tokens),
		lin("dW_dyᵀ·x", true, false, c.Vocab, c.Dim, tokens),
		att("att_q·kᵀ", false, true, s, s, hd, lowerC),
		att("att_p·v", false, false, s, hd, s, lowerA),
		att("att_pᵀ·d", true, false, s, hd, s, upperA),
	}
}

// TestTrainerGemmMatchesGonum runs a forward and backward pass of a model big
// enough for gemm's parallel path and edge tiles (87 tokens, widths not
// multiples of the tile) with gemm and with gonum: the loss and every
// gradient must agree to float32 rounding.
func TestTrainerGemmMatchesGonum(t *testing.T) {
	c := Config{Vocab: 40, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 100, Context: 32}.WithDefaults()
	p := NewParams(c)
	p.Init(3, 0.1)
	rng := rand.New(rand.NewPCG(9, 9))
	const b, s = 3, 29
	tokens, targets := randTokens(rng, b*s, c.Vocab), randTokens(rng, b*s, c.Vocab)
	run := func(gonum bool) (float64, *Params) {
		m := NewModel(p)
		var loss float64
		withGonum(gonum, func() { loss = m.Loss(tokens, targets, b, s, true) })
		return loss, m.G
	}
	lossOwn, gOwn := run(false)
	lossRef, gRef := run(true)
	if math.Abs(lossOwn-lossRef) > 1e-5*math.Abs(lossRef) {
		t.Fatalf("loss %v with gemm, %v with gonum", lossOwn, lossRef)
	}
	for ti, tn := range gRef.Tensors {
		own, ref := gOwn.Tensors[ti].Data, tn.Data
		var scale, worst float64
		for i := range ref {
			scale = max(scale, math.Abs(float64(ref[i])))
			worst = max(worst, math.Abs(float64(own[i]-ref[i])))
		}
		if scale == 0 || worst > 1e-4*scale {
			t.Errorf("%s gradients differ by %g (largest %g)", tn.Name, worst, scale)
		}
	}
}

// TestGemmCausalMatchesFull checks that skipping the zeros of causal
// products changes nothing: gemmCausal equals the full product exactly on
// the elements it promises, for sizes around the tile and the kc block.
func TestGemmCausalMatchesFull(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, s := range []int{1, 5, 6, 29, 128, 300} {
		for _, n := range []int{7, 32} {
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					for _, tri := range []triangle{lowerC, lowerA, upperA} {
						// op(A) is s×s; op(B) s×n, except for lowerC where C
						// must be square: op(B) is s×s too.
						nn := n
						if tri == lowerC {
							nn = s
						}
						a := randMat(rng, s*s)
						opA := func(i, p int) *float32 {
							if tA {
								return &a[p*s+i]
							}
							return &a[i*s+p]
						}
						for i := range s {
							for p := range s {
								if (tri == lowerA && p > i) || (tri == upperA && p < i) {
									*opA(i, p) = 0
								}
							}
						}
						b := randMat(rng, s*nn)
						ldb := nn
						if tB {
							ldb = s
						}
						c0 := randMat(rng, s*nn)
						for _, beta := range []float32{0, 1} {
							want, got := slices.Clone(c0), slices.Clone(c0)
							gemmSerial(transName(tA), transName(tB), s, nn, s, 0.5, a, s, b, ldb, beta, want, nn)
							gemmCausal(tri, transName(tA), transName(tB), s, nn, s, 0.5, a, s, b, ldb, beta, got, nn)
							for i := range s {
								for j := range nn {
									if tri == lowerC && j > i {
										continue
									}
									if got[i*nn+j] != want[i*nn+j] {
										t.Fatalf("tri %d s %d n %d tA %v tB %v beta %g: C[%d][%d] = %g, full product %g",
											tri, s, nn, tA, tB, beta, i, j, got[i*nn+j], want[i*nn+j])
									}
								}
							}
						}
					}
				}
			}
		}
	}
}
