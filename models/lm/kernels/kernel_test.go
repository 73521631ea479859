package kernels

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// randFloats returns n values in [-1, 1) with a spread of magnitudes, so that
// a different summation order would show up in the low bits.
func randFloats(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((rng.Float64()*2 - 1) * math.Pow(10, float64(rng.IntN(4)-2)))
	}
	return v
}

func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

// simdOptionalEnv names the environment variable with which a CI run on a
// CPU without AVX2/FMA or AVX-512 says it knows (.ci/run sets it from
// /proc/cpuinfo and prints why): otherwise the kernel checks that cannot run
// there fail under CI instead of skipping unseen.
const simdOptionalEnv = "PHASELESS_SIMD_OPTIONAL"

// requireKernels fails the test under CI when a SIMD kernel set is missing
// and the run has not acknowledged it; elsewhere it only logs.
func requireKernels(t *testing.T, dot4, dot8 bool) {
	t.Helper()
	var missing []string
	if !dot4 {
		missing = append(missing, "AVX2/FMA")
	}
	if !dot8 {
		missing = append(missing, "AVX-512")
	}
	if len(missing) == 0 {
		return
	}
	msg := "this CPU has no " + strings.Join(missing, " and ") + ": those kernels are not checked here"
	if os.Getenv("CI") != "" && os.Getenv(simdOptionalEnv) == "" {
		t.Fatalf("%s; set %s=1 to accept that in CI", msg, simdOptionalEnv)
	}
	t.Log(msg)
}

// TestMulBatchInvariant multiplies odd-shaped matrices (a scalar tail, a
// partial tile, a partial row group) for token counts that exercise every
// kernel path, and checks each token's result equals multiplying it alone, bit
// for bit, with every kernel set this CPU has: the portable Go loops always,
// AVX2 and AVX-512 where present. It logs which sets it checked, and under CI
// a CPU without AVX2 or AVX-512 fails it unless the run says it knows
// (requireKernels).
func TestMulBatchInvariant(t *testing.T) {
	origDot4, origDot8 := HasAVX2, HasAVX512
	defer func() { HasAVX2, HasAVX512 = origDot4, origDot8 }()
	sets := []struct {
		name       string
		dot4, dot8 bool
	}{{"portable", false, false}}
	if origDot4 {
		sets = append(sets, struct {
			name       string
			dot4, dot8 bool
		}{"AVX2", true, false})
	}
	if origDot8 {
		sets = append(sets, struct {
			name       string
			dot4, dot8 bool
		}{"AVX-512", true, true})
	}
	requireKernels(t, origDot4, origDot8)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, shape := range [][2]int{{67, 77}, {130, 64}, {5, 1408}} {
		rows, cols := shape[0], shape[1]
		m := &Matrix{rows: rows, cols: cols, dtype: gguf.F32, f32: randFloats(rng, rows*cols)}
		p := NewPool(2)
		for _, n := range []int{1, 3, 5, 8, 13, 16, 17, 24} {
			x := randFloats(rng, n*cols)
			for _, set := range sets {
				HasAVX2, HasAVX512 = set.dot4, set.dot8
				batched := make([]float32, n*rows)
				m.Mul(p, batched, x, n)
				for tok := range n {
					alone := make([]float32, rows)
					m.Mul(p, alone, x[tok*cols:(tok+1)*cols], 1)
					for r := range rows {
						if !sameBits(batched[tok*rows+r], alone[r]) {
							t.Fatalf("%s, %dx%d, %d tokens: token %d row %d batched %v, alone %v", set.name, rows, cols, n, tok, r, batched[tok*rows+r], alone[r])
						}
					}
				}
			}
		}
	}
	var names []string
	for _, s := range sets {
		names = append(names, s.name)
	}
	t.Logf("batch invariance checked with the %s kernels", strings.Join(names, ", "))
}
