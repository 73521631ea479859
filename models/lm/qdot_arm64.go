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

// haveSDOT selects the ARMv8.2 dot-product kernel; tests switch it off to
// run the base-NEON one on CPUs that have both.
var haveSDOT = cpu.ARM64.HasASIMDDP

// fastDot returns the NEON kernel for d (Q8_0 so far: the K-quants run the
// Go kernels on arm64), nil otherwise.
func fastDot(d gguf.DType) func(w, x []byte, nb int) float32 {
	if d != gguf.Q8_0 {
		return nil
	}
	k := dotQ8_0NEON
	if haveSDOT {
		k = dotQ8_0SDOT
	}
	return func(w, x []byte, nb int) float32 {
		return k(unsafe.SliceData(w), unsafe.SliceData(x), nb)
	}
}

// fastDot4: no four-token kernels on arm64 yet; mulQuant calls fastDot per token.
func fastDot4(gguf.DType) func(w, x []byte, stride, nb int, out *[4]float32) { return nil }
