package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

//go:noescape
func dotQ4_0SDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ4_0NEON(w, x *byte, nb int) float32

//go:noescape
func dotQ4_1SDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ4_1NEON(w, x *byte, nb int) float32

//go:noescape
func dotQ5_0SDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ5_0NEON(w, x *byte, nb int) float32

//go:noescape
func dotQ5_1SDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ5_1NEON(w, x *byte, nb int) float32

//go:noescape
func dotQ8_0SDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ8_0NEON(w, x *byte, nb int) float32

//go:noescape
func dotQ2KSDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ2KNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ3KSDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ3KNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ4KSDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ4KNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ5KSDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ5KNEON(w, x *byte, nb int) float32

//go:noescape
func dotQ6KSDOT(w, x *byte, nb int) float32

//go:noescape
func dotQ6KNEON(w, x *byte, nb int) float32

// The one-row, four-token kernels (Q4_0, Q5_0, Q8_0; end of qdot_arm64.s):
// out[k] is the row at w times the token at x + k·xstride.

//go:noescape
func dotQ4_0x4SDOT(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ4_0x4NEON(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ5_0x4SDOT(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ5_0x4NEON(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ8_0x4SDOT(w, x *byte, xstride, nb int, out *[4]float32)

//go:noescape
func dotQ8_0x4NEON(w, x *byte, xstride, nb int, out *[4]float32)

// dotQ8_0MMLA is the Q8_0 product of the rows at w and w+wstride with the
// tokens at x and x+xstride (qdot_i8mm_arm64.s), out = [r0·t0, r0·t1,
// r1·t0, r1·t1].
//
//go:noescape
func dotQ8_0MMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)

// dotQ4_0MMLA and dotQ5_0MMLA are dotQ8_0MMLA with the rows' blocks
// unpacked as dot32 does (same file).
//
//go:noescape
func dotQ4_0MMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)

//go:noescape
func dotQ5_0MMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)

// dotQ4KMMLA is dotQ8_0MMLA's Q4_K counterpart (same file).
//
//go:noescape
func dotQ4KMMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)

// dotQ6KMMLA is dotQ8_0MMLA's Q6_K counterpart.
//
//go:noescape
func dotQ6KMMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)

// arm64Kernel is one type's pair of kernels: with the ARMv8.2 dot-product
// extension (SDOT) and with base NEON (SMULL/SMLAL/SADDLP, for Cortex-A53,
// A55 without it, A72: Raspberry Pi 3 and 4). Both give the Go kernel's bits.
// sdot4 and neon4 take one row against four tokens (nil for types without).
type arm64Kernel struct {
	sdot, neon   func(w, x *byte, nb int) float32
	sdot4, neon4 func(w, x *byte, xstride, nb int, out *[4]float32)
}

var arm64Kernels = map[gguf.DType]arm64Kernel{
	gguf.Q4_0: {dotQ4_0SDOT, dotQ4_0NEON, dotQ4_0x4SDOT, dotQ4_0x4NEON},
	gguf.Q4_1: {dotQ4_1SDOT, dotQ4_1NEON, nil, nil},
	gguf.Q5_0: {dotQ5_0SDOT, dotQ5_0NEON, dotQ5_0x4SDOT, dotQ5_0x4NEON},
	gguf.Q5_1: {dotQ5_1SDOT, dotQ5_1NEON, nil, nil},
	gguf.Q8_0: {dotQ8_0SDOT, dotQ8_0NEON, dotQ8_0x4SDOT, dotQ8_0x4NEON},
	gguf.Q2_K: {dotQ2KSDOT, dotQ2KNEON, nil, nil},
	gguf.Q3_K: {dotQ3KSDOT, dotQ3KNEON, nil, nil},
	gguf.Q4_K: {dotQ4KSDOT, dotQ4KNEON, nil, nil},
	gguf.Q5_K: {dotQ5KSDOT, dotQ5KNEON, nil, nil},
	gguf.Q6_K: {dotQ6KSDOT, dotQ6KNEON, nil, nil},
}

// haveSDOT selects the dot-product kernels; haveNEON (ASIMD, which every
// arm64 Linux CPU has) the base ones where SDOT is missing. Tests switch
// haveSDOT off to run the base kernels on CPUs that have both.
// haveI8MM (FEAT_I8MM, from HWCAP2 on Linux) selects the two-row,
// two-token SMMLA kernels.
var (
	haveSDOT = cpu.ARM64.HasASIMDDP
	haveNEON = cpu.ARM64.HasASIMD
	haveI8MM = cpu.ARM64.HasI8MM
)

// fastDot returns the NEON kernel for d (arm64Kernels' types; SDOT where the
// CPU has it), nil for other types or without ASIMD (the Go kernels run).
// The kernels index w and x unchecked: mulQuant passes whole rows.
func fastDot(d gguf.DType) func(w, x []byte, nb int) float32 {
	k, ok := arm64Kernels[d]
	if !ok || !haveNEON {
		return nil
	}
	f := k.neon
	if haveSDOT {
		f = k.sdot
	}
	return func(w, x []byte, nb int) float32 {
		return f(unsafe.SliceData(w), unsafe.SliceData(x), nb)
	}
}

// i8mmKernels are the types with a two-row, two-token SMMLA kernel.
var i8mmKernels = map[gguf.DType]func(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32){
	gguf.Q4_0: dotQ4_0MMLA,
	gguf.Q5_0: dotQ5_0MMLA,
	gguf.Q8_0: dotQ8_0MMLA,
	gguf.Q4_K: dotQ4KMMLA,
	gguf.Q6_K: dotQ6KMMLA,
}

// fastDot2x2 returns d's SMMLA kernel where the CPU has i8mm, else nil. It
// reads rows w and w[wstride:], tokens x and x[xstride:], nb blocks each,
// unchecked: quantProduct.block passes whole rows.
func fastDot2x2(d gguf.DType) func(w []byte, wstride int, x []byte, xstride, nb int, out *[4]float32) {
	f, ok := i8mmKernels[d]
	if !ok || !haveI8MM {
		return nil
	}
	return func(w []byte, wstride int, x []byte, xstride, nb int, out *[4]float32) {
		f(unsafe.SliceData(w), wstride, unsafe.SliceData(x), xstride, nb, out)
	}
}

// fastDot4 returns d's one-row, four-token kernel (SDOT where the CPU has
// it), nil where there is none. x must hold the four rows (checked here: the
// kernel reads unchecked).
func fastDot4(d gguf.DType) func(w, x []byte, stride, nb int, out *[4]float32) {
	k := arm64Kernels[d]
	f := k.neon4
	if haveSDOT {
		f = k.sdot4
	}
	if f == nil || !haveNEON {
		return nil
	}
	return func(w, x []byte, stride, nb int, out *[4]float32) {
		_ = x[4*stride-1]
		f(unsafe.SliceData(w), unsafe.SliceData(x), stride, nb, out)
	}
}
