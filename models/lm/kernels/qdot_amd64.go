package kernels

import (
	"unsafe"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

//go:noescape
func dotQ8_0AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ4KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ2KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ2Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ3KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ3Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ5KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ5Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ6KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ4_0AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ4_1AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ5_0AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ5_1AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ4_0x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ4_1x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ5_0x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ5_1x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ8_0x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ4Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ6Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)

// amd64Kernels are the assembly kernels by type: one token, and four.
var amd64Kernels = map[gguf.DType]struct {
	one  func(w, x *byte, nb int) float32
	four func(w, x *byte, xstride, nb int, out *[4]float32)
}{
	gguf.Q4_0: {dotQ4_0AVX2, dotQ4_0x4AVX2},
	gguf.Q4_1: {dotQ4_1AVX2, dotQ4_1x4AVX2},
	gguf.Q5_0: {dotQ5_0AVX2, dotQ5_0x4AVX2},
	gguf.Q5_1: {dotQ5_1AVX2, dotQ5_1x4AVX2},
	gguf.Q8_0: {dotQ8_0AVX2, dotQ8_0x4AVX2},
	gguf.Q2_K: {dotQ2KAVX2, dotQ2Kx4AVX2},
	gguf.Q3_K: {dotQ3KAVX2, dotQ3Kx4AVX2},
	gguf.Q4_K: {dotQ4KAVX2, dotQ4Kx4AVX2},
	gguf.Q5_K: {dotQ5KAVX2, dotQ5Kx4AVX2},
	gguf.Q6_K: {dotQ6KAVX2, dotQ6Kx4AVX2},
}

// fastDot returns the assembly kernel for d where this CPU has one (AVX2;
// the kernels also use F16C, which every AVX2 CPU has and the pinned
// x/sys/cpu does not report), nil otherwise. The kernels index w and x
// unchecked: mulQuant passes whole rows and whole activation rows of nb blocks.
func fastDot(d gguf.DType) func(w, x []byte, nb int) float32 {
	k, ok := amd64Kernels[d]
	if !HasAVX2 || !ok {
		return nil
	}
	return func(w, x []byte, nb int) float32 {
		return k.one(unsafe.SliceData(w), unsafe.SliceData(x), nb)
	}
}

// fastDot4 returns the kernel that takes one row against four tokens whose
// activation rows are stride bytes apart, nil where there is none. x must
// hold the four rows (checked here: the kernel reads unchecked).
func fastDot4(d gguf.DType) func(w, x []byte, stride, nb int, out *[4]float32) {
	k, ok := amd64Kernels[d]
	if !HasAVX2 || !ok {
		return nil
	}
	return func(w, x []byte, stride, nb int, out *[4]float32) {
		_ = x[4*stride-1]
		k.four(unsafe.SliceData(w), unsafe.SliceData(x), stride, nb, out)
	}
}
