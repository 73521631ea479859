//go:build arm && arm.6

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// The armv7 NEON kernels (qdot_arm.s). Built for GOARM=6 and 7 (the arm.6
// feature tag: hardware VFP, which the kernels' float steps use like the
// Go kernels do) and chosen at run time where the CPU has NEON, so a
// GOARM=6 binary uses them on a Raspberry Pi 2/3 and not on a Pi 1. GOARM=5
// (software float) builds take qdot_other.go: the Go kernels.

//go:noescape
func dotQ8_0ARMNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ4_0ARMNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ5_0ARMNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ4_1ARMNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ5_1ARMNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ4KARMNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ6KARMNEON(w, x *byte, nb int) float32

// f16BitsARM is the kernels' f16 → float32 conversion (F16_BITS in
// qdot_arm.s) of the two bytes at p, as float32 bits; only the tests call
// it, to check it against gguf.F16ToF32 on every input.
//
//go:noescape
func f16BitsARM(p *byte) uint32

// armNEONKernels are the types with an armv7 NEON kernel; the others run
// the Go kernels.
var armNEONKernels = map[gguf.DType]func(w, x *byte, nb int) float32{
	gguf.Q8_0: dotQ8_0ARMNEON,
	gguf.Q4_0: dotQ4_0ARMNEON,
	gguf.Q5_0: dotQ5_0ARMNEON,
	gguf.Q4_1: dotQ4_1ARMNEON,
	gguf.Q5_1: dotQ5_1ARMNEON,
	gguf.Q4_K: dotQ4KARMNEON,
	gguf.Q6_K: dotQ6KARMNEON,
}

// haveNEON selects the kernels (Linux's HWCAP_NEON); tests switch it off to
// check the fallback.
var haveNEON = cpu.ARM.HasNEON

// fastDot returns d's NEON kernel where the CPU has NEON, else nil (the Go
// kernel runs). The kernels index w and x unchecked: mulQuant passes whole
// rows.
func fastDot(d gguf.DType) func(w, x []byte, nb int) float32 {
	f, ok := armNEONKernels[d]
	if !ok || !haveNEON {
		return nil
	}
	return func(w, x []byte, nb int) float32 {
		return f(unsafe.SliceData(w), unsafe.SliceData(x), nb)
	}
}

// fastDot4: no one-row, four-token kernels on armv7 yet.
func fastDot4(gguf.DType) func(w, x []byte, stride, nb int, out *[4]float32) { return nil }
