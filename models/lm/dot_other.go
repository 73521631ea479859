//go:build !amd64

package lm

// haveDot4 is false off amd64: the forward pass uses gonum's portable kernels.
var haveDot4 = false

func dot4AVX2(k int, w, a0, a1, a2, a3 *float32, out *[4]float32) {
	panic("lm: dot4AVX2 without AVX2")
}
