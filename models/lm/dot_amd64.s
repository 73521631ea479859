#include "textflag.h"

// func dot4AVX2(k int, w, a0, a1, a2, a3 *float32, out *[4]float32)
//
// out[j] = Σ_i w[i]·aj[i] for i < k, k a positive multiple of 16. Each row of
// w is loaded once for four token rows, which is what lets batched decode
// beat one dot product at a time. Every output lane is summed the same way
// whichever slot (a0…a3) its row is in, so results do not depend on how
// tokens are grouped.
TEXT ·dot4AVX2(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ w+8(FP), SI
	MOVQ a0+16(FP), R8
	MOVQ a1+24(FP), R9
	MOVQ a2+32(FP), R10
	MOVQ a3+40(FP), R11
	MOVQ out+48(FP), DI
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

loop:
	VMOVUPS (SI)(AX*1), Y8
	VMOVUPS 32(SI)(AX*1), Y9
	VFMADD231PS (R8)(AX*1), Y8, Y0
	VFMADD231PS 32(R8)(AX*1), Y9, Y1
	VFMADD231PS (R9)(AX*1), Y8, Y2
	VFMADD231PS 32(R9)(AX*1), Y9, Y3
	VFMADD231PS (R10)(AX*1), Y8, Y4
	VFMADD231PS 32(R10)(AX*1), Y9, Y5
	VFMADD231PS (R11)(AX*1), Y8, Y6
	VFMADD231PS 32(R11)(AX*1), Y9, Y7
	ADDQ $64, AX
	CMPQ AX, CX
	JLT  loop

	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y5, Y4, Y4
	VADDPS Y7, Y6, Y6

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, 0(DI)

	VEXTRACTF128 $1, Y2, X3
	VADDPS X3, X2, X2
	VHADDPS X2, X2, X2
	VHADDPS X2, X2, X2
	VMOVSS X2, 4(DI)

	VEXTRACTF128 $1, Y4, X5
	VADDPS X5, X4, X4
	VHADDPS X4, X4, X4
	VHADDPS X4, X4, X4
	VMOVSS X4, 8(DI)

	VEXTRACTF128 $1, Y6, X7
	VADDPS X7, X6, X6
	VHADDPS X6, X6, X6
	VHADDPS X6, X6, X6
	VMOVSS X6, 12(DI)

	VZEROUPPER
	RET
