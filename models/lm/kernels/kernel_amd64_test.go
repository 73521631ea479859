package kernels

// The checks of the amd64-only kernels (AVX2, AVX-512). Off amd64 those
// kernels are stubs that panic, so these tests are built here only.

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas/blas32"
)

// skipWithoutKernels skips a check of one kernel set the CPU lacks, through
// requireKernels (so CI fails unless told).
func skipWithoutKernels(t *testing.T, dot4, dot8 bool) {
	t.Helper()
	if dot4 && dot8 {
		return
	}
	requireKernels(t, dot4, dot8)
	t.SkipNow()
}

// TestDot8x4MatchesAVX2Kernels checks the AVX-512 kernel against Dot1x4AVX2
// and dot4x2AVX2 bit for bit: the engine's batch invariance rests on it.
func TestDot8x4MatchesAVX2Kernels(t *testing.T) {
	skipWithoutKernels(t, HasAVX2, HasAVX512)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, k := range []int{8, 24, 64, 520, 1408} {
		w := [4][]float32{}
		for r := range w {
			w[r] = randFloats(rng, k)
		}
		x := randFloats(rng, 8*k)
		xp := packPairs(nil, x, 8, k, k)
		var out32 [32]float32
		dot8x4AVX512(k, &w[0][0], &w[1][0], &w[2][0], &w[3][0], &xp[0], &x[0], &out32[0], 16)
		for tok := range 8 {
			var out4 [4]float32
			Dot1x4AVX2(k, &x[tok*k], &w[0][0], &w[1][0], &w[2][0], &w[3][0], &out4)
			for r := range 4 {
				if !sameBits(out32[4*tok+r], out4[r]) {
					t.Fatalf("k=%d token %d row %d: dot8x4 %v, dot1x4 %v", k, tok, r, out32[4*tok+r], out4[r])
				}
			}
		}
		for g := 0; g < 8; g += 4 {
			var out8 [8]float32
			dot4x2AVX2(k, &w[2][0], &w[3][0], &x[g*k], &x[(g+1)*k], &x[(g+2)*k], &x[(g+3)*k], &out8)
			for j := range 4 {
				for r := range 2 {
					if !sameBits(out32[4*(g+j)+2+r], out8[2*j+r]) {
						t.Fatalf("k=%d token %d row %d: dot8x4 %v, dot4x2 %v", k, g+j, 2+r, out32[4*(g+j)+2+r], out8[2*j+r])
					}
				}
			}
		}
	}
}

// TestAttentionKernels checks the fused attention kernels against the loops
// they replace (Dot1x4AVX2 per key, gonum Saxpy per position) bit for bit,
// for head sizes with and without a 64-float block and zero weights.
func TestAttentionKernels(t *testing.T) {
	skipWithoutKernels(t, HasAVX2, true)
	rng := rand.New(rand.NewPCG(5, 6))
	impl := blas32.Implementation()
	for _, hd := range []int{8, 64, 72, 136} {
		const slotsN, kvHeads = 50, 3
		kvDim := kvHeads * hd
		kc, vc := randFloats(rng, slotsN*kvDim), randFloats(rng, slotsN*kvDim)
		q := randFloats(rng, hd)
		for _, npos := range []int{1, 2, 5, 33} {
			slots := make([]int32, npos)
			for i := range slots {
				slots[i] = int32(rng.IntN(slotsN))
			}
			kvh := rng.IntN(kvHeads)
			if !SlotsIn(slots, kvDim, len(kc)) {
				t.Fatal("slotsIn rejected slots in range")
			}
			got := make([]float32, npos)
			AttnScoresAVX2(hd, &q[0], &kc[kvh*hd], &slots[0], npos, 4*kvDim, &got[0])
			for p, s := range slots {
				k := kc[int(s)*kvDim+kvh*hd:]
				var out4 [4]float32
				Dot1x4AVX2(hd, &q[0], &k[0], &k[0], &k[0], &k[0], &out4)
				if !sameBits(got[p], out4[0]) {
					t.Fatalf("hd=%d npos=%d: score %d %v, dot1x4 %v", hd, npos, p, got[p], out4[0])
				}
			}
			alpha := randFloats(rng, npos)
			alpha[npos/2] = 0
			want := make([]float32, hd)
			for p, a := range alpha {
				off := int(slots[p])*kvDim + kvh*hd
				impl.Saxpy(hd, a, vc[off:off+hd], 1, want, 1)
			}
			mix := make([]float32, hd)
			AttnMixAVX2(hd, &alpha[0], &vc[kvh*hd], &slots[0], npos, 4*kvDim, &mix[0])
			for i := range mix {
				if !sameBits(mix[i], want[i]) {
					t.Fatalf("hd=%d npos=%d: out[%d] %v, Saxpy loop %v", hd, npos, i, mix[i], want[i])
				}
			}
		}
	}
	if SlotsIn([]int32{0, 50}, 8, 50*8) || SlotsIn([]int32{-1}, 8, 8) {
		t.Fatal("slotsIn accepted a slot outside the store")
	}
}

// TestSiLUKernel checks siluAVX2 against the Go expression it replaces, bit
// for bit, over ordinary values and the arguments math.Exp treats specially
// (which the kernel must hand back), at every alignment of the tail.
func TestSiLUKernel(t *testing.T) {
	skipWithoutKernels(t, HasAVX2, true)
	rng := rand.New(rand.NewPCG(7, 8))
	special := []float32{0, float32(math.Copysign(0, -1)), 707.9, -707.9, 708, -708, 709.8, -745.2, 800, -800,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -1e-40, 88.7, -88.7, 103.9, -103.9}
	for _, n := range []int{1, 3, 4, 7, 64, 1411} {
		for round := range 4 {
			gate, up := randFloats(rng, n), randFloats(rng, n)
			for i := range gate {
				gate[i] *= float32(math.Pow(10, float64(rng.IntN(5)))) // up to ±10,000
				if round > 0 && rng.IntN(8) == 0 {
					gate[i] = special[rng.IntN(len(special))]
				}
			}
			want := make([]float32, n)
			for i, v := range gate {
				want[i] = v / (1 + float32(math.Exp(float64(-v)))) * up[i]
			}
			got := append([]float32(nil), gate...)
			p := NewPool(1)
			SwiGLU(p, got, up, 1)
			for i := range got {
				if !sameBits(got[i], want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("n=%d: silu(%v)·%v = %v, want %v", n, gate[i], up[i], got[i], want[i])
				}
			}
			if done := siluAVX2(n, &gate[0], &up[0]); done > n&^3 || done%4 != 0 {
				t.Fatalf("n=%d: kernel did %d elements", n, done)
			}
			// Ordinary arguments: the kernel must do every whole group.
			small := randFloats(rng, n)
			for i := range small {
				small[i] *= 50
			}
			if done := siluAVX2(n, &small[0], &up[0]); done != n&^3 {
				t.Fatalf("n=%d: kernel did %d of %d elements of ordinary values", n, done, n&^3)
			}
		}
	}
}

// TestSoftmaxExpKernel checks SoftmaxExpAVX2 against attention's Go loop bit
// for bit, with scores far enough below the maximum to need math.Exp's
// special cases.
func TestSoftmaxExpKernel(t *testing.T) {
	skipWithoutKernels(t, HasAVX2, true)
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 4, 6, 33, 517, 1024} {
		for round := range 3 {
			// Round 1 keeps every weight near 1, where summing in another
			// order would change the total's low bits.
			sc := randFloats(rng, n)
			for i := range sc {
				sc[i] *= []float32{30, 0.1, 30}[round]
				if round == 2 && rng.IntN(10) == 0 {
					sc[i] = -800 - float32(rng.IntN(1000))
				}
			}
			maxS := float32(math.Inf(-1))
			for _, s := range sc {
				maxS = max(maxS, s)
			}
			want := append([]float32(nil), sc...)
			var wantSum float64
			for p, s := range want {
				e := math.Exp(float64(s - maxS))
				want[p] = float32(e)
				wantSum += e
			}
			got := append([]float32(nil), sc...)
			var sum float64
			for p := 0; p < n; p++ {
				var done int
				if done, sum = SoftmaxExpAVX2(n-p, &got[p], maxS, sum); p+done == n {
					break
				}
				p += done
				e := math.Exp(float64(got[p] - maxS))
				got[p] = float32(e)
				sum += e
			}
			if math.Float64bits(sum) != math.Float64bits(wantSum) {
				t.Fatalf("n=%d: sum %v, want %v", n, sum, wantSum)
			}
			for i := range got {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("n=%d: exp(%v) = %v, want %v", n, sc[i]-maxS, got[i], want[i])
				}
			}
			if round == 0 {
				if done, _ := SoftmaxExpAVX2(n, &sc[0], maxS, 0); done != n&^3 {
					t.Fatalf("n=%d: kernel did %d of %d ordinary scores", n, done, n&^3)
				}
			}
		}
	}
}
