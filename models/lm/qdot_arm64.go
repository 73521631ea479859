package lm

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

//go:noescape
func dotQ8_0SDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ8_0NEON(w, x *byte, nb int) float32

//go:noescape
func dotQ4KSDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ6KSDOT(w, x *byte, nb int) float32

// haveSDOT selects the ARMv8.2 dot-product kernel; tests switch it off to
// run the base-NEON one on CPUs that have both.
var haveSDOT = cpu.ARM64.HasASIMDDP

// fastDot returns the NEON kernel for d: Q8_0 with SDOT or base NEON, Q4_K
// and Q6_K with SDOT only (without it they run the Go kernels); nil
// otherwise.
func fastDot(d gguf.DType) func(w, x []byte, nb int) float32 {
	var k func(w, x *byte, nb int) float32
	switch {
	case d == gguf.Q8_0 && haveSDOT:
		k = dotQ8_0SDOT
	case d == gguf.Q8_0:
		k = dotQ8_0NEON
	case d == gguf.Q4_K && haveSDOT:
		k = dotQ4KSDOT
	case d == gguf.Q6_K && haveSDOT:
		k = dotQ6KSDOT
	default:
		return nil
	}
	return func(w, x []byte, nb int) float32 {
		return k(unsafe.SliceData(w), unsafe.SliceData(x), nb)
	}
}

// fastDot4: no four-token kernels on arm64 yet; mulQuant calls fastDot per token.
func fastDot4(gguf.DType) func(w, x []byte, stride, nb int, out *[4]float32) { return nil }
