//go:build !arm64

package kernels

import "github.com/phaseless/phaseless/models/lm/gguf"

// fastDot2x2: the two-row, two-token kernels are arm64's (i8mm) only.
func fastDot2x2(gguf.DType) func(w []byte, wstride int, x []byte, xstride, nb int, out *[4]float32) {
	return nil
}
