#include "textflag.h"
#include "reduce_amd64.h"

// Integer dot products of one weight row with one token's quantized
// activations (layouts and the exact float operations in qdot.go). The
// integer parts are exact, and the float parts are the same multiplies and
// adds, in the same order, as the Go kernels, so results match them bit for
// bit. Bytes are multiplied with VPMADDUBSW (unsigned × signed into int16
// pairs) and widened with VPMADDWD (int16 pairs into int32).

// HSUMD sums the eight int32 lanes of y (x its low half) into the 32-bit
// register reg. Clobbers X7.
#define HSUMD(y, x, reg) \
	VEXTRACTI128 $1, y, X7; \
	VPADDD       X7, x, x; \
	VPSHUFD      $0x4e, x, X7; \
	VPADDD       X7, x, x; \
	VPSHUFD      $0xb1, x, X7; \
	VPADDD       X7, x, x; \
	VMOVD        x, reg

// SCALE_ADD adds float32(f16(hoff(SI))·dx)·float32(ireg) to (op = VADDSS)
// or subtracts it from (op = VSUBSS) the float sum in X10; dx is the
// activation scale at 0(DI). Clobbers R10, X8, X9.
#define SCALE_ADD(hoff, ireg, op) \
	MOVWLZX    hoff(SI), R10; \
	VMOVD      R10, X8; \
	VCVTPH2PS  X8, X8; \
	VMULSS     (DI), X8, X8; \
	VCVTSI2SSL ireg, X9, X9; \
	VMULSS     X9, X8, X8; \
	op         X8, X10, X10

// func dotQ8_0AVX2(w, x *byte, nb int) float32
//
// Q8_0 weights (34-byte blocks) against q8_0 activations (40-byte blocks):
// |w| × sign(w)·x with VPSIGNB so VPMADDUBSW can take signed weights.
TEXT ·dotQ8_0AVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS Y0, Y0, Y0
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	TESTQ CX, CX
	JEQ  q80done

q80loop:
	VMOVDQU 2(SI), Y1
	VMOVDQU 8(DI), Y2
	VPSIGNB Y1, Y1, Y3
	VPSIGNB Y1, Y2, Y4
	VPMADDUBSW Y4, Y3, Y5
	VPMADDWD Y15, Y5, Y5
	VCVTDQ2PS Y5, Y5
	MOVWLZX (SI), AX
	VMOVD AX, X6
	VCVTPH2PS X6, X6
	VMULSS (DI), X6, X6
	VBROADCASTSS X6, Y6
	VMULPS Y6, Y5, Y5
	VADDPS Y5, Y0, Y0
	ADDQ $34, SI
	ADDQ $40, DI
	DECQ CX
	JNZ  q80loop

q80done:
	REDUCE8(Y0, X0, ret+24(FP))
	VZEROUPPER
	RET

// Q4K_STEP multiplies the 64 values of one 32-byte quant plane (low nibbles
// then high nibbles) by activations at x0 and x1, weights them by the two
// sub-block scales held in bytes sh/8 and sh/8+1 of sreg, and adds to Y0.
#define Q4K_STEP(qoff, x0, x1, sreg, sh) \
	VMOVDQU    qoff(SI), Y3; \
	VPSRLW     $4, Y3, Y4; \
	VPAND      Y14, Y3, Y3; \
	VPAND      Y14, Y4, Y4; \
	VPMADDUBSW x0(DI), Y3, Y3; \
	VPMADDUBSW x1(DI), Y4, Y4; \
	MOVL       sreg, AX; \
	SHRL       $sh, AX; \
	MOVL       AX, BX; \
	ANDL       $0xff, AX; \
	SHRL       $8, BX; \
	ANDL       $0xff, BX; \
	VMOVD      AX, X5; \
	VPBROADCASTW X5, Y5; \
	VMOVD      BX, X6; \
	VPBROADCASTW X6, Y6; \
	VPMADDWD   Y5, Y3, Y3; \
	VPMADDWD   Y6, Y4, Y4; \
	VPADDD     Y3, Y0, Y0; \
	VPADDD     Y4, Y0, Y0

// func dotQ4KAVX2(w, x *byte, nb int) float32
//
// Q4_K super-blocks (144 bytes) against q8_K activations (292 bytes): the
// 6-bit scales and mins are unpacked in general registers (four at a time),
// Σ sc·Σq·x is summed in int32 lanes, Σ m·Σx from the activation block sums.
TEXT ·dotQ4KAVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS X10, X10, X10
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x00010001, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	TESTQ CX, CX
	JEQ  q4kdone

q4kloop:
	MOVL 4(SI), AX
	MOVL 8(SI), BX
	MOVL 12(SI), DX
	MOVL AX, R8
	ANDL $0x3f3f3f3f, R8   // scales 0-3
	MOVL DX, R9
	ANDL $0x0f0f0f0f, R9
	MOVL AX, R10
	SHRL $6, R10
	ANDL $0x03030303, R10
	SHLL $4, R10
	ORL  R10, R9           // scales 4-7
	MOVL BX, R11
	ANDL $0x3f3f3f3f, R11  // mins 0-3
	MOVL DX, R12
	SHRL $4, R12
	ANDL $0x0f0f0f0f, R12
	MOVL BX, R10
	SHRL $6, R10
	ANDL $0x03030303, R10
	SHLL $4, R10
	ORL  R10, R12          // mins 4-7

	// Σ_j m_j·(bsum[2j]+bsum[2j+1]) in Y1.
	VMOVD R11, X1
	VPINSRD $1, R12, X1, X1
	VPMOVZXBD X1, Y1
	VPMADDWD 260(DI), Y13, Y2
	VPMULLD Y2, Y1, Y1

	VPXOR Y0, Y0, Y0
	Q4K_STEP(16, 4, 36, R8, 0)
	Q4K_STEP(48, 68, 100, R8, 16)
	Q4K_STEP(80, 132, 164, R9, 0)
	Q4K_STEP(112, 196, 228, R9, 16)

	HSUMD(Y0, X0, AX)
	HSUMD(Y1, X1, BX)
	SCALE_ADD(0, AX, VADDSS)
	SCALE_ADD(2, BX, VSUBSS)
	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q4kloop

q4kdone:
	VMOVSS X10, ret+24(FP)
	VZEROUPPER
	RET

// Q6K_DOT multiplies 32 unsigned 6-bit quants in v by the activations at
// xoff, weights the first 16 by the int8 scale at soff(SI) and the next 16
// by the one after it, and adds to Y0.
#define Q6K_DOT(v, xoff, s0, s1) \
	VPMADDUBSW xoff(DI), v, v; \
	MOVBLSX    s0(SI), AX; \
	MOVBLSX    s1(SI), BX; \
	VMOVD      AX, X8; \
	VPBROADCASTW X8, X8; \
	VMOVD      BX, X9; \
	VPBROADCASTW X9, X9; \
	VINSERTI128 $1, X9, Y8, Y8; \
	VPMADDWD   Y8, v, v; \
	VPADDD     v, Y0, Y0

// Q6K_HALF does one 128-value half: low nibbles from the two 32-byte ql
// planes, high bit pairs from the qh plane (bits 0-1, 2-3, 4-5, 6-7 for the
// four 32-value runs), each shifted to bits 4-5 and masked with Y12 (0x30).
#define Q6K_HALF(ql0, ql1, qh, x, s) \
	VMOVDQU qh(SI), Y2; \
	VMOVDQU ql0(SI), Y3; \
	VMOVDQU ql1(SI), Y4; \
	VPAND   Y14, Y3, Y5; \
	VPSLLW  $4, Y2, Y6; \
	VPAND   Y12, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_DOT(Y5, x, s, s+1); \
	VPAND   Y14, Y4, Y5; \
	VPSLLW  $2, Y2, Y6; \
	VPAND   Y12, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_DOT(Y5, x+32, s+2, s+3); \
	VPSRLW  $4, Y3, Y5; \
	VPAND   Y14, Y5, Y5; \
	VPAND   Y12, Y2, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_DOT(Y5, x+64, s+4, s+5); \
	VPSRLW  $4, Y4, Y5; \
	VPAND   Y14, Y5, Y5; \
	VPSRLW  $2, Y2, Y6; \
	VPAND   Y12, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_DOT(Y5, x+96, s+6, s+7)

// func dotQ6KAVX2(w, x *byte, nb int) float32
//
// Q6_K super-blocks (210 bytes) against q8_K activations: the quants are
// taken unsigned (q+32) and 32·Σ sc·Σx, from the block sums, subtracted.
TEXT ·dotQ6KAVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS X10, X10, X10
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x30303030, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	TESTQ CX, CX
	JEQ  q6kdone

q6kloop:
	VPMOVSXBW 192(SI), Y1
	VPMADDWD 260(DI), Y1, Y1
	VPXOR Y0, Y0, Y0
	Q6K_HALF(0, 32, 128, 4, 192)
	Q6K_HALF(64, 96, 160, 132, 200)
	HSUMD(Y0, X0, AX)
	HSUMD(Y1, X1, BX)
	SHLL $5, BX
	SUBL BX, AX
	SCALE_ADD(208, AX, VADDSS)
	ADDQ $210, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q6kloop

q6kdone:
	VMOVSS X10, ret+24(FP)
	VZEROUPPER
	RET
