package lm

import (
	"unsafe"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

//go:noescape
func dotQ8_0AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ4KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ6KAVX2(w, x *byte, nb int) float32

// fastDot returns the assembly kernel for d where this CPU has one (AVX2;
// the kernels also use F16C, which every AVX2 CPU has and the pinned
// x/sys/cpu does not report), nil otherwise. The kernels index w and x unchecked: mulQuant passes whole rows
// and whole activation rows of nb blocks.
func fastDot(d gguf.DType) func(w, x []byte, nb int) float32 {
	if !haveDot4 {
		return nil
	}
	var k func(w, x *byte, nb int) float32
	switch d {
	case gguf.Q8_0:
		k = dotQ8_0AVX2
	case gguf.Q4_K:
		k = dotQ4KAVX2
	case gguf.Q6_K:
		k = dotQ6KAVX2
	default:
		return nil
	}
	return func(w, x []byte, nb int) float32 {
		return k(unsafe.SliceData(w), unsafe.SliceData(x), nb)
	}
}
