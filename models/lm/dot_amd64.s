#include "textflag.h"

// The kernels keep one 8-lane accumulator per (token, row) pair, add the
// products of each 8-element chunk in order, and reduce the lanes the same way
// (high half onto low half, then two horizontal adds). Both kernels therefore
// give bit-identical results for a pair, whatever else they computed with it,
// so the engine's output does not depend on how requests were batched.

// func dot4x2AVX2(k int, w0, w1, a0, a1, a2, a3 *float32, out *[8]float32)
//
// out[2j+r] = Σ_i wr[i]·aj[i] for i < k, k a positive multiple of 8: two weight
// rows against four token rows, each load feeding two or four FMAs.
TEXT ·dot4x2AVX2(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), CX
	MOVQ w0+8(FP), SI
	MOVQ w1+16(FP), DX
	MOVQ a0+24(FP), R8
	MOVQ a1+32(FP), R9
	MOVQ a2+40(FP), R10
	MOVQ a3+48(FP), R11
	MOVQ out+56(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	SHLQ $2, CX

loop4x2:
	VMOVUPS (SI)(AX*1), Y8
	VMOVUPS (DX)(AX*1), Y9
	VMOVUPS (R8)(AX*1), Y10
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y1
	VMOVUPS (R9)(AX*1), Y11
	VFMADD231PS Y11, Y8, Y2
	VFMADD231PS Y11, Y9, Y3
	VMOVUPS (R10)(AX*1), Y12
	VFMADD231PS Y12, Y8, Y4
	VFMADD231PS Y12, Y9, Y5
	VMOVUPS (R11)(AX*1), Y13
	VFMADD231PS Y13, Y8, Y6
	VFMADD231PS Y13, Y9, Y7
	ADDQ $32, AX
	CMPQ AX, CX
	JLT  loop4x2

	VEXTRACTF128 $1, Y0, X14
	VADDPS X14, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, 0(DI)
	VEXTRACTF128 $1, Y1, X14
	VADDPS X14, X1, X1
	VHADDPS X1, X1, X1
	VHADDPS X1, X1, X1
	VMOVSS X1, 4(DI)
	VEXTRACTF128 $1, Y2, X14
	VADDPS X14, X2, X2
	VHADDPS X2, X2, X2
	VHADDPS X2, X2, X2
	VMOVSS X2, 8(DI)
	VEXTRACTF128 $1, Y3, X14
	VADDPS X14, X3, X3
	VHADDPS X3, X3, X3
	VHADDPS X3, X3, X3
	VMOVSS X3, 12(DI)
	VEXTRACTF128 $1, Y4, X14
	VADDPS X14, X4, X4
	VHADDPS X4, X4, X4
	VHADDPS X4, X4, X4
	VMOVSS X4, 16(DI)
	VEXTRACTF128 $1, Y5, X14
	VADDPS X14, X5, X5
	VHADDPS X5, X5, X5
	VHADDPS X5, X5, X5
	VMOVSS X5, 20(DI)
	VEXTRACTF128 $1, Y6, X14
	VADDPS X14, X6, X6
	VHADDPS X6, X6, X6
	VHADDPS X6, X6, X6
	VMOVSS X6, 24(DI)
	VEXTRACTF128 $1, Y7, X14
	VADDPS X14, X7, X7
	VHADDPS X7, X7, X7
	VHADDPS X7, X7, X7
	VMOVSS X7, 28(DI)
	VZEROUPPER
	RET

// func dot1x4AVX2(k int, a, w0, w1, w2, w3 *float32, out *[4]float32)
//
// out[r] = Σ_i a[i]·wr[i]: one token row against four weight rows, for a
// single stream (or the tokens left over from groups of four).
TEXT ·dot1x4AVX2(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ w0+16(FP), R8
	MOVQ w1+24(FP), R9
	MOVQ w2+32(FP), R10
	MOVQ w3+40(FP), R11
	MOVQ out+48(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
	SHLQ $2, CX

loop1x4:
	VMOVUPS (SI)(AX*1), Y8
	VFMADD231PS (R8)(AX*1), Y8, Y0
	VFMADD231PS (R9)(AX*1), Y8, Y1
	VFMADD231PS (R10)(AX*1), Y8, Y2
	VFMADD231PS (R11)(AX*1), Y8, Y3
	ADDQ $32, AX
	CMPQ AX, CX
	JLT  loop1x4

	VEXTRACTF128 $1, Y0, X14
	VADDPS X14, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, 0(DI)
	VEXTRACTF128 $1, Y1, X14
	VADDPS X14, X1, X1
	VHADDPS X1, X1, X1
	VHADDPS X1, X1, X1
	VMOVSS X1, 4(DI)
	VEXTRACTF128 $1, Y2, X14
	VADDPS X14, X2, X2
	VHADDPS X2, X2, X2
	VHADDPS X2, X2, X2
	VMOVSS X2, 8(DI)
	VEXTRACTF128 $1, Y3, X14
	VADDPS X14, X3, X3
	VHADDPS X3, X3, X3
	VHADDPS X3, X3, X3
	VMOVSS X3, 12(DI)
	VZEROUPPER
	RET

// func prefetchAVX2(p *float32, n int)
//
// Asks for the n bytes at p to be brought into the cache ahead of use, so
// the next weight rows stream in while the current ones are multiplied.
TEXT ·prefetchAVX2(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	XORQ AX, AX

loopPF:
	PREFETCHT0 (SI)(AX*1)
	ADDQ $64, AX
	CMPQ AX, CX
	JLT  loopPF
	RET
