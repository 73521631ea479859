#include "textflag.h"

// ROUNDAWAY rounds the floats of y to integers, halves away from zero (what
// math.Round does): t = trunc(y), then t ± 1 where |y − t| ≥ 0.5. y − t is
// exact for every float32, so this is math.Round's result for each lane.
// Y15 |x| mask, Y14 0.5, Y13 1.0; clobbers Y10, Y11, Y12.
#define ROUNDAWAY(y) \
	VROUNDPS $3, y, Y10; \
	VSUBPS   Y10, y, Y11; \
	VANDPS   Y15, Y11, Y11; \
	VCMPPS   $0x1d, Y14, Y11, Y11; \
	VANDNPS  y, Y15, Y12; \
	VORPS    Y13, Y12, Y12; \
	VANDPS   Y11, Y12, Y12; \
	VADDPS   Y12, Y10, y

// func quantActAVX2(x *float32, n int, q *byte, sums *int16) (d float32, ok bool)
TEXT ·quantActAVX2(SB), NOSPLIT, $0-37
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ q+16(FP), DI
	MOVQ sums+24(FP), DX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15

	// max|x| as the largest of the values' bit patterns with the sign
	// cleared: for non-negative floats the integer order is the float
	// order, and it needs no rule for NaN (which orders above +Inf and is
	// caught below).
	VPXOR Y0, Y0, Y0
	MOVQ SI, R8
	MOVQ CX, R9

amax:
	VPAND   (R8), Y15, Y1
	VPMAXUD Y1, Y0, Y0
	ADDQ    $32, R8
	SUBQ    $8, R9
	JNZ     amax
	VEXTRACTI128 $1, Y0, X1
	VPMAXUD X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPMAXUD X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPMAXUD X1, X0, X0
	VMOVD   X0, AX
	CMPL    AX, $0x7f800000
	JAE     fail

	// d = amax/127; id = 1/d, or 0 when d is 0 (as quantizeAct).
	MOVL  $0x42fe0000, AX // 127.0
	VMOVD AX, X1
	VDIVSS X1, X0, X2
	VXORPS X3, X3, X3
	VMOVD  X2, AX
	TESTL  AX, AX
	JEQ    scaled
	MOVL   $0x3f800000, AX // 1.0
	VMOVD  AX, X1
	VDIVSS X2, X1, X3
	VMOVD  X3, AX
	CMPL   AX, $0x7f800000
	JAE    fail

scaled:
	VBROADCASTSS X3, Y3
	MOVL $0x3f000000, AX // 0.5
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x3f800000, AX // 1.0
	VMOVD AX, X13
	VPBROADCASTD X13, Y13

quant:
	// Sixteen values: q = round(x·id), their sum, then packed to bytes.
	VMULPS (SI), Y3, Y4
	VMULPS 32(SI), Y3, Y5
	ROUNDAWAY(Y4)
	ROUNDAWAY(Y5)
	VCVTTPS2DQ Y4, Y4
	VCVTTPS2DQ Y5, Y5
	VPADDD Y5, Y4, Y6
	VEXTRACTI128 $1, Y6, X7
	VPADDD  X7, X6, X6
	VPSHUFD $0x4e, X6, X7
	VPADDD  X7, X6, X6
	VPSHUFD $0xb1, X6, X7
	VPADDD  X7, X6, X6
	VMOVD   X6, AX
	MOVW    AX, (DX)
	// Words [Y4 0-3, Y5 0-3 | Y4 4-7, Y5 4-7], put in order, then bytes.
	VPACKSSDW Y5, Y4, Y6
	VPERMQ    $0xd8, Y6, Y6
	VEXTRACTI128 $1, Y6, X7
	VPACKSSWB X7, X6, X6
	VMOVDQU   X6, (DI)
	ADDQ $64, SI
	ADDQ $16, DI
	ADDQ $2, DX
	SUBQ $16, CX
	JNZ  quant

	VMOVSS X2, d+32(FP)
	MOVB   $1, ok+36(FP)
	VZEROUPPER
	RET

fail:
	MOVL $0, d+32(FP)
	MOVB $0, ok+36(FP)
	VZEROUPPER
	RET
