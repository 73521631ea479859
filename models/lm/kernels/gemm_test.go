package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// TestQuantizeBlockMatchesGo checks the quantizer the GEMM uses against
// quantizeAct byte for byte: random values at several scales, exact halves
// (x/d landing on k+0.5 both ways), zeros, subnormals, and the non-finite
// inputs it hands back to quantizeAct.
func TestQuantizeBlockMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	inputs := [][]float32{make([]float32, 256)} // all zero: d = 0
	for _, scale := range []float64{1, 1e-3, 1e4, 1e-38, 1e-43} {
		for range 20 {
			v := randVec(rng, 256)
			for i := range v {
				v[i] = float32(float64(v[i]) * scale)
			}
			inputs = append(inputs, v)
		}
	}
	// Halves: with max 127 the scale is 1, so x itself is rounded.
	halves := make([]float32, 256)
	for i := range halves {
		halves[i] = float32(i%254-127) + 0.5*float32(1-2*(i%2))
	}
	halves[0] = 127
	inputs = append(inputs, halves)
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32} {
		v := randVec(rng, 256)
		v[37] = bad
		inputs = append(inputs, v)
	}
	for i, x := range inputs {
		for _, superK := range []bool{false, true} {
			bl, ab := 32, act32Bytes
			if superK {
				bl, ab = 256, actKBytes
			}
			for b := 0; b+bl <= len(x); b += bl {
				want, got := make([]byte, ab), make([]byte, ab)
				quantizeAct(want, x[b:b+bl], superK)
				quantizeBlock(got, x[b:b+bl], superK)
				if !bytes.Equal(want, got) {
					t.Fatalf("input %d block at %d (superK %v): quantizeBlock\n%v\nquantizeAct\n%v", i, b, superK, got, want)
				}
			}
		}
	}
}

// TestGEMMMatchesPerRow multiplies prompt-sized batches through the tiled
// GEMM and the per-row loop it replaced, on one thread and several: every
// output must be the same bits. Wide matrices make token tiles of four, so
// several tiles, partial ones, and rows split over token ranges all occur.
func TestGEMMMatchesPerRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, d := range []gguf.DType{gguf.Q8_0, gguf.Q4_K, gguf.Q6_K, gguf.Q5_0} {
		for _, shape := range [][2]int{{21, 4096}, {70, 512}} {
			m := quantMatrix(t, rng, d, shape[0], shape[1])
			for _, n := range []int{1, 6, 45} {
				x := randVec(rng, n*m.cols)
				want := make([]float32, n*m.rows)
				old := NewPool(1)
				old.PerRow = true
				m.Mul(old, want, x, n)
				for _, threads := range []int{1, 3} {
					got := make([]float32, n*m.rows)
					m.Mul(NewPool(threads), got, x, n)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s %v, %d tokens, %d threads: output %d is %v, per-row %v", d, shape, n, threads, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}
