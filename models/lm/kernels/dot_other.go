//go:build !amd64

package kernels

// HasAVX2 and HasAVX512 are false off amd64: the products use gonum's
// portable kernels, and the AVX2 functions below must not be called.
var HasAVX2, HasAVX512 = false, false

func Dot1x4AVX2(k int, a, w0, w1, w2, w3 *float32, out *[4]float32) {
	panic("kernels: AVX2 kernel off amd64")
}

func AttnScoresAVX2(k int, q, kc *float32, slots *int32, n, stride int, out *float32) {
	panic("kernels: AVX2 kernel off amd64")
}

func AttnMixAVX2(k int, alpha, vc *float32, slots *int32, n, stride int, out *float32) {
	panic("kernels: AVX2 kernel off amd64")
}

func siluAVX2(n int, gate, up *float32) (done int) {
	panic("kernels: AVX2 kernel off amd64")
}

func SoftmaxExpAVX2(n int, sc *float32, maxS float32, sum float64) (done int, total float64) {
	panic("kernels: AVX2 kernel off amd64")
}

// mulDot4 is amd64's (matmul_amd64.go); Mul calls it only when HasAVX2.
func (m *Matrix) mulDot4(p *Pool, y, x []float32, n int) {
	panic("kernels: AVX2 product off amd64")
}
