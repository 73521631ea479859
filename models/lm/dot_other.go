//go:build !amd64

package lm

// haveDot4 is false off amd64: the forward pass uses gonum's portable kernels.
var haveDot4 = false

func dot4x2AVX2(k int, w0, w1, a0, a1, a2, a3 *float32, out *[8]float32) {
	panic("lm: AVX2 kernel off amd64")
}

func dot1x4AVX2(k int, a, w0, w1, w2, w3 *float32, out *[4]float32) {
	panic("lm: AVX2 kernel off amd64")
}

func prefetchAVX2(p *float32, n int) {}
