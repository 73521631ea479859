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

// SCALE_OP is the float step of a super-block: acc op= float32(f16 at
// hoff(SI) · dx at (p)) · float32(ireg), op VADDSS or VSUBSS, with t and u
// float temporaries and gp a general one. The same multiplies, in the same
// order, as dotK's acc += float32(float32(d·dx)·float32(isum)).
#define SCALE_OP(hoff, p, ireg, op, t, u, acc, gp) \
	MOVWLZX    hoff(SI), gp; \
	VMOVD      gp, t; \
	VCVTPH2PS  t, t; \
	VMULSS     (p), t, t; \
	VCVTSI2SSL ireg, u, u; \
	VMULSS     u, t, t; \
	op         t, acc, acc

// SCALE_ADD is SCALE_OP for the one-token kernels: activations at DI, the
// float sum in X10. Clobbers R10, X8, X9.
#define SCALE_ADD(hoff, ireg, op) SCALE_OP(hoff, DI, ireg, op, X8, X9, X10, R10)

// Q4K_SCALES unpacks a Q4_K super-block's twelve scale bytes (at 4(SI)):
// the eight 6-bit scales as int16 to 0(SP) (VPBROADCASTW reads them there)
// and the eight mins as int32 lanes of Y1. Clobbers AX, BX, DX, R12, R13, X5.
#define Q4K_SCALES \
	MOVL 4(SI), AX; \
	MOVL 8(SI), BX; \
	MOVL 12(SI), DX; \
	MOVL AX, R12; \
	ANDL $0x3f3f3f3f, R12; \
	VMOVD R12, X5; \
	MOVL DX, R12; \
	ANDL $0x0f0f0f0f, R12; \
	MOVL AX, R13; \
	SHRL $6, R13; \
	ANDL $0x03030303, R13; \
	SHLL $4, R13; \
	ORL  R13, R12; \
	VPINSRD $1, R12, X5, X5; \
	VPMOVZXBW X5, X5; \
	VMOVDQU X5, 0(SP); \
	MOVL BX, R12; \
	ANDL $0x3f3f3f3f, R12; \
	VMOVD R12, X1; \
	MOVL DX, R12; \
	SHRL $4, R12; \
	ANDL $0x0f0f0f0f, R12; \
	MOVL BX, R13; \
	SHRL $6, R13; \
	ANDL $0x03030303, R13; \
	SHLL $4, R13; \
	ORL  R13, R12; \
	VPINSRD $1, R12, X1, X1; \
	VPMOVZXBD X1, Y1

// X4_ARGS loads a ×4 kernel's arguments: w SI, the four tokens' activation
// rows DI, R9, R10, R11, nb CX, out R8.
#define X4_ARGS \
	MOVQ w+0(FP), SI; \
	MOVQ x+8(FP), DI; \
	MOVQ xstride+16(FP), DX; \
	MOVQ nb+24(FP), CX; \
	MOVQ out+32(FP), R8; \
	LEAQ (DI)(DX*1), R9; \
	LEAQ (R9)(DX*1), R10; \
	LEAQ (R10)(DX*1), R11

// ARGS1 loads a one-token kernel's arguments: w SI, x DI, nb CX.
#define ARGS1 \
	MOVQ w+0(FP), SI; \
	MOVQ x+8(FP), DI; \
	MOVQ nb+16(FP), CX

// BCASTD fills every 32-bit lane of y (x its low half) with the constant c.
#define BCASTD(c, x, y) \
	MOVL c, AX; \
	VMOVD AX, x; \
	VPBROADCASTD x, y

// K1_START begins a one-token K-quant kernel: arguments, the float sum X10
// cleared, the nibble mask in Y14.
#define K1_START \
	ARGS1; \
	VXORPS X10, X10, X10; \
	BCASTD($0x0f0f0f0f, X14, Y14)

// X4_ZERO clears the four tokens' int32 sums.
#define X4_ZERO \
	VPXOR Y8, Y8, Y8; \
	VPXOR Y9, Y9, Y9; \
	VPXOR Y10, Y10, Y10; \
	VPXOR Y11, Y11, Y11

// X4_END folds the four tokens' super-block sums into out with fin (whose
// per-token frame slots start at o) and moves to the next blocks.
#define X4_END(fin, o, wb, xb) \
	fin(Y8, X8, DI, o, 0); \
	fin(Y9, X9, R9, o+4, 4); \
	fin(Y10, X10, R10, o+8, 8); \
	fin(Y11, X11, R11, o+12, 12); \
	X4_NEXT(wb, xb)

// X4_KSTART begins a K-quant ×4 kernel: arguments, out cleared (the float
// sums live there), the nibble mask in Y14.
#define X4_KSTART \
	X4_ARGS; \
	MOVQ $0, 0(R8); \
	MOVQ $0, 8(R8); \
	BCASTD($0x0f0f0f0f, X14, Y14)

// X4_NEXT advances a ×4 kernel to the next weight and activation blocks.
#define X4_NEXT(wb, xb) \
	ADDQ $wb, SI; \
	ADDQ $xb, DI; \
	ADDQ $xb, R9; \
	ADDQ $xb, R10; \
	ADDQ $xb, R11

// func dotQ8_0AVX2(w, x *byte, nb int) float32
//
// Q8_0 weights (34-byte blocks) against q8_0 activations (40-byte blocks):
// |w| × sign(w)·x with VPSIGNB so VPMADDUBSW can take signed weights.
TEXT ·dotQ8_0AVX2(SB), NOSPLIT, $0-28
	ARGS1
	VXORPS Y0, Y0, Y0
	BCASTD($0x00010001, X15, Y15)
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
// then high nibbles; hi adds Q5_K's fifth bits) by activations at x0 and x1,
// weights them by the two sub-block scales held as int16 at soff(SP) and
// soff+2(SP), and adds to Y0.
#define Q4K_STEP(hi, qoff, x0, x1, soff) \
	VMOVDQU    qoff(SI), Y3; \
	VPSRLW     $4, Y3, Y4; \
	VPAND      Y14, Y3, Y3; \
	VPAND      Y14, Y4, Y4; \
	hi; \
	VPMADDUBSW x0(DI), Y3, Y3; \
	VPMADDUBSW x1(DI), Y4, Y4; \
	VPBROADCASTW soff(SP), Y5; \
	VPBROADCASTW soff+2(SP), Y6; \
	VPMADDWD   Y5, Y3, Y3; \
	VPMADDWD   Y6, Y4, Y4; \
	VPADDD     Y3, Y0, Y0; \
	VPADDD     Y4, Y0, Y0

// Q5K_HI ORs the fifth bits of the plane's two sub-blocks into Y3 (bit 0 of
// the qh bytes in cur, as 16) and Y4 (bit 1), then moves the next plane's
// bits to bits 0-1 of cur (word shifts: bits 0-4 of a byte stay its own).
// m1 and m2 hold 0x01 and 0x02 bytes. Clobbers Y5.
#define Q5K_HI(cur, m1, m2) \
	VPAND  m1, cur, Y5; \
	VPSLLW $4, Y5, Y5; \
	VPOR   Y5, Y3, Y3; \
	VPAND  m2, cur, Y5; \
	VPSLLW $3, Y5, Y5; \
	VPOR   Y5, Y4, Y4; \
	VPSRLW $2, cur, cur

#define NO_HI
#define Q5K_HI1 Q5K_HI(Y15, Y12, Y11)
#define Q5K_HI4 Q5K_HI(Y0, Y12, Y15)

// Q4K_ONE is the one-token body of Q4_K (hi NO_HI) and Q5_K (hi Q5K_HI1,
// the 32 qh bytes loaded by qh): quants from qb(SI), wb bytes a block.
#define Q4K_ONE(hi, consts, qh, qb, wb) \
	K1_START; \
	BCASTD($0x00010001, X13, Y13); \
	consts; \
	TESTQ CX, CX; \
	JEQ   qkdone; \
qkloop: \
	Q4K_SCALES; \
	VPMADDWD 260(DI), Y13, Y2; \
	VPMULLD  Y2, Y1, Y1; \
	VPXOR    Y0, Y0, Y0; \
	qh; \
	Q4K_STEP(hi, qb, 4, 36, 0); \
	Q4K_STEP(hi, qb+32, 68, 100, 4); \
	Q4K_STEP(hi, qb+64, 132, 164, 8); \
	Q4K_STEP(hi, qb+96, 196, 228, 12); \
	HSUMD(Y0, X0, AX); \
	HSUMD(Y1, X1, BX); \
	SCALE_ADD(0, AX, VADDSS); \
	SCALE_ADD(2, BX, VSUBSS); \
	ADDQ $wb, SI; \
	ADDQ $292, DI; \
	DECQ CX; \
	JNZ  qkloop; \
qkdone: \
	VMOVSS X10, ret+24(FP); \
	VZEROUPPER; \
	RET

#define NO_CONSTS
#define NO_QH
#define Q5K_CONSTS1 \
	BCASTD($0x01010101, X12, Y12); \
	BCASTD($0x02020202, X11, Y11)
#define Q5K_QH1 VMOVDQU 16(SI), Y15

// func dotQ4KAVX2(w, x *byte, nb int) float32
//
// Q4_K super-blocks (144 bytes) against q8_K activations (292 bytes): the
// 6-bit scales and mins are unpacked in general registers, four at a time
// (Q4K_SCALES), Σ sc·Σq·x is summed in int32 lanes, Σ m·Σx from the
// activation block sums.
TEXT ·dotQ4KAVX2(SB), NOSPLIT, $16-28
	Q4K_ONE(NO_HI, NO_CONSTS, NO_QH, 16, 144)

// func dotQ5KAVX2(w, x *byte, nb int) float32
//
// Q5_K (176 bytes): Q4_K's scales and planes, quants from 48, each plane's
// fifth bits from the 32 qh bytes at 16.
TEXT ·dotQ5KAVX2(SB), NOSPLIT, $16-28
	Q4K_ONE(Q5K_HI1, Q5K_CONSTS1, Q5K_QH1, 48, 176)

// Q6K_DOT multiplies 32 unsigned 6-bit quants in v by the activations at
// xoff, weights the first 16 by the scale at s0(SP) and the next 16 by the
// one at s1(SP) (the block's scales widened to int16 there), and adds to Y0.
#define Q6K_DOT(v, xoff, s0, s1) \
	VPMADDUBSW xoff(DI), v, v; \
	VPBROADCASTW s0(SP), X8; \
	VPBROADCASTW s1(SP), X9; \
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
	Q6K_DOT(Y5, x, s, s+2); \
	VPAND   Y14, Y4, Y5; \
	VPSLLW  $2, Y2, Y6; \
	VPAND   Y12, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_DOT(Y5, x+32, s+4, s+6); \
	VPSRLW  $4, Y3, Y5; \
	VPAND   Y14, Y5, Y5; \
	VPAND   Y12, Y2, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_DOT(Y5, x+64, s+8, s+10); \
	VPSRLW  $4, Y4, Y5; \
	VPAND   Y14, Y5, Y5; \
	VPSRLW  $2, Y2, Y6; \
	VPAND   Y12, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_DOT(Y5, x+96, s+12, s+14)

// func dotQ6KAVX2(w, x *byte, nb int) float32
//
// Q6_K super-blocks (210 bytes) against q8_K activations: the quants are
// taken unsigned (q+32) and 32·Σ sc·Σx, from the block sums, subtracted.
TEXT ·dotQ6KAVX2(SB), NOSPLIT, $32-28
	K1_START
	BCASTD($0x30303030, X12, Y12)
	TESTQ CX, CX
	JEQ  q6kdone

q6kloop:
	VPMOVSXBW 192(SI), Y1
	VMOVDQU Y1, 0(SP)
	VPMADDWD 260(DI), Y1, Y1
	VPXOR Y0, Y0, Y0
	Q6K_HALF(0, 32, 128, 4, 0)
	Q6K_HALF(64, 96, 160, 132, 16)
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

// The ×4 kernels: one weight row against four tokens whose activation rows
// are xstride bytes apart, out[t] for token t. Each weight block is loaded
// and unpacked once for the four; every token's sums are the same
// operations, in the same order, as the one-token kernel's, so a result does
// not depend on which kernel, or which group of four, produced it.

// Q80_TOKEN: one token's share of a Q8_0 block (|w| in Y5, w in Y4, dw in X6).
#define Q80_TOKEN(p, acc) \
	VMOVDQU      8(p), Y7; \
	VPSIGNB      Y4, Y7, Y7; \
	VPMADDUBSW   Y7, Y5, Y7; \
	VPMADDWD     Y15, Y7, Y7; \
	VCVTDQ2PS    Y7, Y7; \
	VMULSS       (p), X6, X8; \
	VBROADCASTSS X8, Y8; \
	VMULPS       Y8, Y7, Y7; \
	VADDPS       Y7, acc, acc

// func dotQ8_0x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ8_0x4AVX2(SB), NOSPLIT, $0-40
	X4_ARGS
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	BCASTD($0x00010001, X15, Y15)
	TESTQ CX, CX
	JEQ  q80x4done

q80x4loop:
	VMOVDQU 2(SI), Y4
	VPSIGNB Y4, Y4, Y5
	MOVWLZX (SI), AX
	VMOVD AX, X6
	VCVTPH2PS X6, X6
	Q80_TOKEN(DI, Y0)
	Q80_TOKEN(R9, Y1)
	Q80_TOKEN(R10, Y2)
	Q80_TOKEN(R11, Y3)
	X4_NEXT(34, 40)
	DECQ CX
	JNZ  q80x4loop

q80x4done:
	REDUCE8(Y0, X0, 0(R8))
	REDUCE8(Y1, X1, 4(R8))
	REDUCE8(Y2, X2, 8(R8))
	REDUCE8(Y3, X3, 12(R8))
	VZEROUPPER
	RET

// FSCALE is SCALE_OP for the ×4 kernels: token activations at p, the float
// sum in X4 (loaded from and stored to out by the caller). Clobbers R12, X2, X3.
#define FSCALE(hoff, p, ireg, op) SCALE_OP(hoff, p, ireg, op, X2, X3, X4, R12)

// Q4K_MSUM: Σ_j m_j·(bsum[2j]+bsum[2j+1]) of the token at p (mins in Y1) to moff(SP).
#define Q4K_MSUM(p, moff) \
	VPMADDWD 260(p), Y13, Y2; \
	VPMULLD  Y2, Y1, Y2; \
	HSUMD(Y2, X2, AX); \
	MOVL     AX, moff(SP)

// Q4K_TOK: one token's products with the unpacked plane (Y3 low, Y4 high).
#define Q4K_TOK(p, x0, x1, acc) \
	VPMADDUBSW x0(p), Y3, Y7; \
	VPMADDWD   Y5, Y7, Y7; \
	VPADDD     Y7, acc, acc; \
	VPMADDUBSW x1(p), Y4, Y7; \
	VPMADDWD   Y6, Y7, Y7; \
	VPADDD     Y7, acc, acc

// Q4K_STEP4: one 32-byte quant plane (hi as in Q4K_STEP), scales the
// int16s at s(SP) and s+2(SP).
#define Q4K_STEP4(hi, qoff, x0, x1, s) \
	VMOVDQU qoff(SI), Y3; \
	VPSRLW  $4, Y3, Y4; \
	VPAND   Y14, Y3, Y3; \
	VPAND   Y14, Y4, Y4; \
	hi; \
	VPBROADCASTW s(SP), Y5; \
	VPBROADCASTW s+2(SP), Y6; \
	Q4K_TOK(DI, x0, x1, Y8); \
	Q4K_TOK(R9, x0, x1, Y9); \
	Q4K_TOK(R10, x0, x1, Y10); \
	Q4K_TOK(R11, x0, x1, Y11)

// KM_FINISH folds one token's super-block of a type with mins (d and dmin
// at doff, doff+2) into out[ooff/4].
#define KM_FINISH(doff, acc, accx, p, moff, ooff) \
	HSUMD(acc, accx, AX); \
	MOVL   moff(SP), BX; \
	VMOVSS ooff(R8), X4; \
	FSCALE(doff, p, AX, VADDSS); \
	FSCALE(doff+2, p, BX, VSUBSS); \
	VMOVSS X4, ooff(R8)

#define Q4K_FINISH(acc, accx, p, moff, ooff) KM_FINISH(0, acc, accx, p, moff, ooff)

// Q4K_X4 is the ×4 body of Q4_K and Q5_K (as Q4K_ONE; Q5_K's qh in Y0).
// Frame: 0(SP) the eight 6-bit scales as int16, 16(SP) the four tokens' min sums.
#define Q4K_X4(hi, consts, qh, qb, wb) \
	X4_KSTART; \
	BCASTD($0x00010001, X13, Y13); \
	consts; \
	TESTQ CX, CX; \
	JEQ   qkx4done; \
qkx4loop: \
	Q4K_SCALES; \
	Q4K_MSUM(DI, 16); \
	Q4K_MSUM(R9, 20); \
	Q4K_MSUM(R10, 24); \
	Q4K_MSUM(R11, 28); \
	X4_ZERO; \
	qh; \
	Q4K_STEP4(hi, qb, 4, 36, 0); \
	Q4K_STEP4(hi, qb+32, 68, 100, 4); \
	Q4K_STEP4(hi, qb+64, 132, 164, 8); \
	Q4K_STEP4(hi, qb+96, 196, 228, 12); \
	X4_END(Q4K_FINISH, 16, wb, 292); \
	DECQ CX; \
	JNZ  qkx4loop; \
qkx4done: \
	VZEROUPPER; \
	RET

#define Q5K_CONSTS4 \
	BCASTD($0x01010101, X12, Y12); \
	BCASTD($0x02020202, X15, Y15)
#define Q5K_QH4 VMOVDQU 16(SI), Y0

// func dotQ4Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ4Kx4AVX2(SB), NOSPLIT, $32-40
	Q4K_X4(NO_HI, NO_CONSTS, NO_QH, 16, 144)

// func dotQ5Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ5Kx4AVX2(SB), NOSPLIT, $32-40
	Q4K_X4(Q5K_HI4, Q5K_CONSTS4, Q5K_QH4, 48, 176)

// Q6K_TOK: one token's products with the 32 quants in Y5, scales in Y0.
#define Q6K_TOK(p, xoff, acc) \
	VPMADDUBSW xoff(p), Y5, Y7; \
	VPMADDWD   Y0, Y7, Y7; \
	VPADDD     Y7, acc, acc

// Q6K_RUN4: the 32-value run in Y5 for all four tokens; scales at s0(SP), s1(SP).
#define Q6K_RUN4(xoff, s0, s1) \
	VPBROADCASTW s0(SP), X0; \
	VPBROADCASTW s1(SP), X1; \
	VINSERTI128 $1, X1, Y0, Y0; \
	Q6K_TOK(DI, xoff, Y8); \
	Q6K_TOK(R9, xoff, Y9); \
	Q6K_TOK(R10, xoff, Y10); \
	Q6K_TOK(R11, xoff, Y11)

#define Q6K_HALF4(ql0, ql1, qh, x, s) \
	VMOVDQU qh(SI), Y2; \
	VMOVDQU ql0(SI), Y3; \
	VMOVDQU ql1(SI), Y4; \
	VPAND   Y14, Y3, Y5; \
	VPSLLW  $4, Y2, Y6; \
	VPAND   Y12, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_RUN4(x, s, s+2); \
	VPAND   Y14, Y4, Y5; \
	VPSLLW  $2, Y2, Y6; \
	VPAND   Y12, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_RUN4(x+32, s+4, s+6); \
	VPSRLW  $4, Y3, Y5; \
	VPAND   Y14, Y5, Y5; \
	VPAND   Y12, Y2, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_RUN4(x+64, s+8, s+10); \
	VPSRLW  $4, Y4, Y5; \
	VPAND   Y14, Y5, Y5; \
	VPSRLW  $2, Y2, Y6; \
	VPAND   Y12, Y6, Y6; \
	VPOR    Y6, Y5, Y5; \
	Q6K_RUN4(x+96, s+12, s+14)

// K_OFF: 2^sh·Σ_g c_g·bsum_g of the token at p (the int16 c_g in Y1) to
// off(SP): Q6_K's 32·Σ sc·Σx offset (sh 5), Q3_K's 4·Σ sc·Σx (sh 2),
// Q2_K's Σ m·Σx (sh 0).
#define K_OFF(p, off, sh) \
	VPMADDWD 260(p), Y1, Y6; \
	HSUMD(Y6, X6, AX); \
	SHLL     $sh, AX; \
	MOVL     AX, off(SP)

#define Q6K_OFF(p, off) K_OFF(p, off, 5)

// KO_FINISH folds one token's super-block of a type without mins (d at
// doff, the offset sum at off(SP)) into out[ooff/4].
#define KO_FINISH(doff, acc, accx, p, off, ooff) \
	HSUMD(acc, accx, AX); \
	SUBL   off(SP), AX; \
	VMOVSS ooff(R8), X4; \
	FSCALE(doff, p, AX, VADDSS); \
	VMOVSS X4, ooff(R8)

#define Q6K_FINISH(acc, accx, p, off, ooff) KO_FINISH(208, acc, accx, p, off, ooff)

// func dotQ6Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
//
// Frame: 0(SP) the sixteen scales as int16, 32(SP) the four tokens' offset sums.
TEXT ·dotQ6Kx4AVX2(SB), NOSPLIT, $48-40
	X4_KSTART
	BCASTD($0x30303030, X12, Y12)
	TESTQ CX, CX
	JEQ  q6kx4done

q6kx4loop:
	VPMOVSXBW 192(SI), Y1
	VMOVDQU Y1, 0(SP)
	Q6K_OFF(DI, 32)
	Q6K_OFF(R9, 36)
	Q6K_OFF(R10, 40)
	Q6K_OFF(R11, 44)
	X4_ZERO
	Q6K_HALF4(0, 32, 128, 4, 0)
	Q6K_HALF4(64, 96, 160, 132, 16)
	X4_END(Q6K_FINISH, 32, 210, 292)
	DECQ CX
	JNZ  q6kx4loop

q6kx4done:
	VZEROUPPER
	RET

// The other 32-value types (Q4_0, Q4_1, Q5_0, Q5_1) against q8_0
// activations, one token and four, as dot32 (qdot.go) does them. Each block
// is unpacked to 32 bytes in Y4, value i in byte i (low nibbles are values
// 0-15, high nibbles 16-31, Q5's fifth bits from qh at bit i): signed (Q4_0
// q−8, Q5_0 q−16) with |w| in Y5 for the VPSIGNB form of Q8_0's product, or
// unsigned (Q4_1, Q5_1) for VPMADDUBSW as it is. Then, per token, the Q8_0
// lanes, and for Q4_1/Q5_1 the separate float sum of m·dx·Σq; the result is
// the REDUCE8 sum plus that sum, as in the Go kernel (plus +0 for the
// offset types, as there).
//
// Registers: Y15 0x0001 words, Y14 0x0f bytes, Y13/Y12/Y11 the qh-to-bytes
// shuffle, bit masks and all ones (Q5), Y10 the type's constant (0x08 for
// Q4_0, 0xf0 for Q5_0, 0x10 for Q5_1), X9 the block's dw, Y4-Y8 temporaries.

// q5shuf moves byte i/8 of a broadcast qh to byte i; q5bits then has every
// bit but bit i%8 set in byte i, so OR and compare with all ones tests it
// (ggml's bytes_from_bits_32).
DATA q5shuf<>+0(SB)/8, $0x0000000000000000
DATA q5shuf<>+8(SB)/8, $0x0101010101010101
DATA q5shuf<>+16(SB)/8, $0x0202020202020202
DATA q5shuf<>+24(SB)/8, $0x0303030303030303
GLOBL q5shuf<>(SB), RODATA|NOPTR, $32
DATA q5bits<>+0(SB)/8, $0x7fbfdfeff7fbfdfe
DATA q5bits<>+8(SB)/8, $0x7fbfdfeff7fbfdfe
DATA q5bits<>+16(SB)/8, $0x7fbfdfeff7fbfdfe
DATA q5bits<>+24(SB)/8, $0x7fbfdfeff7fbfdfe
GLOBL q5bits<>(SB), RODATA|NOPTR, $32

#define Q32_CONSTS \
	BCASTD($0x00010001, X15, Y15); \
	BCASTD($0x0f0f0f0f, X14, Y14)

#define Q4_0_CONSTS \
	Q32_CONSTS; \
	BCASTD($0x08080808, X10, Y10)

#define Q4_1_CONSTS Q32_CONSTS

#define Q5_CONSTS(c) \
	Q32_CONSTS; \
	VMOVDQU q5shuf<>(SB), Y13; \
	VMOVDQU q5bits<>(SB), Y12; \
	VPCMPEQB Y11, Y11, Y11; \
	BCASTD(c, X10, Y10)

#define Q5_0_CONSTS Q5_CONSTS($0xf0f0f0f0)
#define Q5_1_CONSTS Q5_CONSTS($0x10101010)

// NIBBLES: the 16 quant bytes at qoff(SI) to 32 bytes of 4-bit values in Y4.
#define NIBBLES(qoff) \
	VMOVDQU     qoff(SI), X4; \
	VPSRLW      $4, X4, X5; \
	VINSERTI128 $1, X5, Y4, Y4; \
	VPAND       Y14, Y4, Y4

// Q5_HIGH: 0xff in byte i of Y5 where bit i of the qh word at hoff(SI) is set.
#define Q5_HIGH(hoff) \
	VPBROADCASTD hoff(SI), Y5; \
	VPSHUFB      Y13, Y5, Y5; \
	VPOR         Y12, Y5, Y5; \
	VPCMPEQB     Y11, Y5, Y5

#define UNPACK_Q4_0 \
	NIBBLES(2); \
	VPSUBB  Y10, Y4, Y4; \
	VPSIGNB Y4, Y4, Y5

#define UNPACK_Q4_1 NIBBLES(4)

// Q5_0: q−16 is the nibble with 0xf0 set where the fifth bit is clear.
#define UNPACK_Q5_0 \
	NIBBLES(6); \
	Q5_HIGH(2); \
	VPANDN  Y10, Y5, Y5; \
	VPOR    Y5, Y4, Y4; \
	VPSIGNB Y4, Y4, Y5

#define UNPACK_Q5_1 \
	NIBBLES(8); \
	Q5_HIGH(4); \
	VPAND Y10, Y5, Y5; \
	VPOR  Y5, Y4, Y4

// SIGNED_TOK / UNSIGNED_TOK: the int16 pair sums of the unpacked block with
// the activations of the token at p, in Y7.
#define SIGNED_TOK(p) \
	VMOVDQU    8(p), Y7; \
	VPSIGNB    Y4, Y7, Y7; \
	VPMADDUBSW Y7, Y5, Y7

#define UNSIGNED_TOK(p) VPMADDUBSW 8(p), Y4, Y7

// Q32_DW: the block's f16 scale as float32 in X9.
#define Q32_DW \
	MOVWLZX   (SI), AX; \
	VMOVD     AX, X9; \
	VCVTPH2PS X9, X9

// Q32_LANES: acc lane l += float32(dw·dx)·(int32 sum of values 4l…4l+3).
#define Q32_LANES(p, acc) \
	VPMADDWD     Y15, Y7, Y7; \
	VCVTDQ2PS    Y7, Y7; \
	VMULSS       (p), X9, X8; \
	VBROADCASTSS X8, Y8; \
	VMULPS       Y8, Y7, Y7; \
	VADDPS       Y7, acc, acc

// Q32_MTERM: X6 = float32(float32(m·dx)·float32(Σq)) of the token at p
// (m the f16 at 2(SI)). Clobbers AX, X7.
#define Q32_MTERM(p) \
	MOVWLZX    2(SI), AX; \
	VMOVD      AX, X6; \
	VCVTPH2PS  X6, X6; \
	VMULSS     (p), X6, X6; \
	VCVTSI2SSL 4(p), X7, X7; \
	VMULSS     X7, X6, X6

// M1 adds the m term to the one-token kernels' X1, M4 to out[o/4].
#define M1(p) \
	Q32_MTERM(p); \
	VADDSS X6, X1, X1

#define M4(p, o) \
	Q32_MTERM(p); \
	VADDSS o(R8), X6, X6; \
	VMOVSS X6, o(R8)

#define NO_M1(p)
#define NO_M4(p, o)

// Q32_ONE is a one-token kernel body over nb blocks of wb bytes.
#define Q32_ONE(consts, unpack, tok, mterm, wb) \
	ARGS1; \
	consts; \
	VXORPS Y0, Y0, Y0; \
	VXORPS X1, X1, X1; \
	TESTQ  CX, CX; \
	JEQ    q32done; \
q32loop: \
	unpack; \
	Q32_DW; \
	tok(DI); \
	Q32_LANES(DI, Y0); \
	mterm(DI); \
	ADDQ $wb, SI; \
	ADDQ $40, DI; \
	DECQ CX; \
	JNZ  q32loop; \
q32done: \
	REDUCE8(Y0, X0, ret+24(FP)); \
	VADDSS X1, X0, X0; \
	VMOVSS X0, ret+24(FP); \
	VZEROUPPER; \
	RET

// Q32_TOK4: token t (activations at p, lanes in acc, out slot o) of a ×4 kernel.
#define Q32_TOK4(tok, mterm, p, acc, o) \
	tok(p); \
	Q32_LANES(p, acc); \
	mterm(p, o)

// Q32_FIN4: out[o/4] = REDUCE8 of acc + the m sum kept there.
#define Q32_FIN4(acc, accx, o) \
	VMOVSS o(R8), X9; \
	REDUCE8(acc, accx, o(R8)); \
	VADDSS X9, accx, accx; \
	VMOVSS accx, o(R8)

// Q32_X4 is a ×4 kernel body: each block unpacked once for the four tokens.
#define Q32_X4(consts, unpack, tok, mterm, wb) \
	X4_ARGS; \
	consts; \
	MOVQ   $0, 0(R8); \
	MOVQ   $0, 8(R8); \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	TESTQ  CX, CX; \
	JEQ    q32x4done; \
q32x4loop: \
	unpack; \
	Q32_DW; \
	Q32_TOK4(tok, mterm, DI, Y0, 0); \
	Q32_TOK4(tok, mterm, R9, Y1, 4); \
	Q32_TOK4(tok, mterm, R10, Y2, 8); \
	Q32_TOK4(tok, mterm, R11, Y3, 12); \
	X4_NEXT(wb, 40); \
	DECQ CX; \
	JNZ  q32x4loop; \
q32x4done: \
	Q32_FIN4(Y0, X0, 0); \
	Q32_FIN4(Y1, X1, 4); \
	Q32_FIN4(Y2, X2, 8); \
	Q32_FIN4(Y3, X3, 12); \
	VZEROUPPER; \
	RET

// func dotQ4_0AVX2(w, x *byte, nb int) float32
TEXT ·dotQ4_0AVX2(SB), NOSPLIT, $0-28
	Q32_ONE(Q4_0_CONSTS, UNPACK_Q4_0, SIGNED_TOK, NO_M1, 18)

// func dotQ4_1AVX2(w, x *byte, nb int) float32
TEXT ·dotQ4_1AVX2(SB), NOSPLIT, $0-28
	Q32_ONE(Q4_1_CONSTS, UNPACK_Q4_1, UNSIGNED_TOK, M1, 20)

// func dotQ5_0AVX2(w, x *byte, nb int) float32
TEXT ·dotQ5_0AVX2(SB), NOSPLIT, $0-28
	Q32_ONE(Q5_0_CONSTS, UNPACK_Q5_0, SIGNED_TOK, NO_M1, 22)

// func dotQ5_1AVX2(w, x *byte, nb int) float32
TEXT ·dotQ5_1AVX2(SB), NOSPLIT, $0-28
	Q32_ONE(Q5_1_CONSTS, UNPACK_Q5_1, UNSIGNED_TOK, M1, 24)

// func dotQ4_0x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ4_0x4AVX2(SB), NOSPLIT, $0-40
	Q32_X4(Q4_0_CONSTS, UNPACK_Q4_0, SIGNED_TOK, NO_M4, 18)

// func dotQ4_1x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ4_1x4AVX2(SB), NOSPLIT, $0-40
	Q32_X4(Q4_1_CONSTS, UNPACK_Q4_1, UNSIGNED_TOK, M4, 20)

// func dotQ5_0x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ5_0x4AVX2(SB), NOSPLIT, $0-40
	Q32_X4(Q5_0_CONSTS, UNPACK_Q5_0, SIGNED_TOK, NO_M4, 22)

// func dotQ5_1x4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ5_1x4AVX2(SB), NOSPLIT, $0-40
	Q32_X4(Q5_1_CONSTS, UNPACK_Q5_1, UNSIGNED_TOK, M4, 24)

// Q2_K (84-byte super-blocks) and Q3_K (110 bytes) against q8_K
// activations. Both hold 2-bit quants in two 32-byte planes, four runs of 32
// values each (bits 0-1, 2-3, 4-5, 6-7), every 16 values with their own
// scale; Q3_K adds a third bit from the 32 hmask bytes (bit k of byte l for
// run k, k = 0-7 over both halves) and takes q = q'−4 with q' = q2|bit<<2,
// so Σ q·x = Σ q'·x − 4·Σx, as Q6_K does with its 32. The runs are Q6_K's
// Q6K_DOT/Q6K_RUN4. Registers: Y13 0x03 bytes, Y14 0x0f, Y12 0x01 and Y15
// 0x20 (Q3_K), Y2 the hmask bits still to use, Y3 the plane.

// Q2K_SCALES: the 16 scales (low nibbles of bytes 0-15) as int16 to 0(SP),
// the 16 mins (high nibbles) as int16 in Y1.
#define Q2K_SCALES \
	VMOVDQU   (SI), X1; \
	VPSRLW    $4, X1, X2; \
	VPAND     X14, X2, X2; \
	VPAND     X14, X1, X1; \
	VPMOVZXBW X1, Y1; \
	VMOVDQU   Y1, 0(SP); \
	VPMOVZXBW X2, Y1

// Q3K_SCALE4 puts in R12 scales 4i…4i+3 (byte i of the result): the
// nibbles of lo shifted by losh, with bits hsh, hsh+1 of the bytes of DX as
// bits 4-5.
#define Q3K_SCALE4(lo, losh, hsh) \
	MOVL lo, R12; \
	SHRL $losh, R12; \
	ANDL $0x0f0f0f0f, R12; \
	MOVL DX, R13; \
	SHRL $hsh, R13; \
	ANDL $0x03030303, R13; \
	SHLL $4, R13; \
	ORL  R13, R12

// Q3K_SCALES: the 16 6-bit scales (gguf.ScalesQ3K), less 32, as int16 to
// 0(SP) and in Y1. Clobbers AX, BX, DX, R12, R13.
#define Q3K_SCALES \
	MOVL 96(SI), AX; \
	MOVL 100(SI), BX; \
	MOVL 104(SI), DX; \
	Q3K_SCALE4(AX, 0, 0); \
	VMOVD R12, X1; \
	Q3K_SCALE4(BX, 0, 2); \
	VPINSRD $1, R12, X1, X1; \
	Q3K_SCALE4(AX, 4, 4); \
	VPINSRD $2, R12, X1, X1; \
	Q3K_SCALE4(BX, 4, 6); \
	VPINSRD $3, R12, X1, X1; \
	VPSUBB    X15, X1, X1; \
	VPMOVSXBW X1, Y1; \
	VMOVDQU   Y1, 0(SP)

// Q3K_HBIT ORs the next run's hmask bit into the quants in Y5 (as 4).
#define Q3K_HBIT \
	VPAND  Y12, Y2, Y6; \
	VPSLLW $2, Y6, Y6; \
	VPOR   Y6, Y5, Y5; \
	VPSRLW $1, Y2, Y2

// K2_QUANTS: run sh/2's 2-bit quants of the plane in Y3 (hbit adds Q3_K's) in Y5.
#define K2_QUANTS(hbit, sh) \
	VPSRLW $sh, Y3, Y5; \
	VPAND  Y13, Y5, Y5; \
	hbit

// K2_HALF: the 128 values of the plane at qoff, activations from x, scales from s(SP).
#define K2_HALF(hbit, qoff, x, s) \
	VMOVDQU qoff(SI), Y3; \
	K2_QUANTS(hbit, 0); \
	Q6K_DOT(Y5, x, s, s+2); \
	K2_QUANTS(hbit, 2); \
	Q6K_DOT(Y5, x+32, s+4, s+6); \
	K2_QUANTS(hbit, 4); \
	Q6K_DOT(Y5, x+64, s+8, s+10); \
	K2_QUANTS(hbit, 6); \
	Q6K_DOT(Y5, x+96, s+12, s+14)

#define K2_HALF4(hbit, qoff, x, s) \
	VMOVDQU qoff(SI), Y3; \
	K2_QUANTS(hbit, 0); \
	Q6K_RUN4(x, s, s+2); \
	K2_QUANTS(hbit, 2); \
	Q6K_RUN4(x+32, s+4, s+6); \
	K2_QUANTS(hbit, 4); \
	Q6K_RUN4(x+64, s+8, s+10); \
	K2_QUANTS(hbit, 6); \
	Q6K_RUN4(x+96, s+12, s+14)

#define K2_CONSTS \
	BCASTD($0x03030303, X13, Y13); \
	BCASTD($0x0f0f0f0f, X14, Y14); \
	BCASTD($0x01010101, X12, Y12); \
	BCASTD($0x20202020, X15, Y15)

// Q2K_FOLD / Q3K_FOLD: a one-token super-block's int32 sums (AX the
// products, BX the mins or offset sum) into the float sum X10.
#define Q2K_FOLD \
	SCALE_ADD(80, AX, VADDSS); \
	SCALE_ADD(82, BX, VSUBSS)

#define Q3K_FOLD \
	SHLL $2, BX; \
	SUBL BX, AX; \
	SCALE_ADD(108, AX, VADDSS)

#define Q2K_PREP
#define Q3K_PREP VMOVDQU (SI), Y2

// K2_ONE is the one-token loop of Q2_K and Q3_K: scales (to 0(SP), the
// mins or scales in Y1), prep (Q3_K's hmask), the quant planes at qb and
// qb+32, fold; wb bytes a super-block. The sum is left in X10.
#define K2_ONE(scales, prep, hbit, qb, fold, wb) \
	ARGS1; \
	VXORPS X10, X10, X10; \
	K2_CONSTS; \
	TESTQ CX, CX; \
	JEQ   k2done; \
k2loop: \
	scales; \
	VPMADDWD 260(DI), Y1, Y1; \
	prep; \
	VPXOR    Y0, Y0, Y0; \
	K2_HALF(hbit, qb, 4, 0); \
	K2_HALF(hbit, qb+32, 132, 16); \
	HSUMD(Y0, X0, AX); \
	HSUMD(Y1, X1, BX); \
	fold; \
	ADDQ $wb, SI; \
	ADDQ $292, DI; \
	DECQ CX; \
	JNZ  k2loop; \
k2done:

// K2_X4 is the ×4 body: sh scales each token's Σ c·bsum (0 for Q2_K's
// mins, 2 for Q3_K's 4·offset), fin folds a token into out.
// Frame: 0(SP) the sixteen scales as int16, 32(SP) the four tokens' sums.
#define K2_X4(scales, sh, prep, hbit, qb, fin, wb) \
	X4_KSTART; \
	K2_CONSTS; \
	TESTQ CX, CX; \
	JEQ   k2x4done; \
k2x4loop: \
	scales; \
	K_OFF(DI, 32, sh); \
	K_OFF(R9, 36, sh); \
	K_OFF(R10, 40, sh); \
	K_OFF(R11, 44, sh); \
	prep; \
	X4_ZERO; \
	K2_HALF4(hbit, qb, 4, 0); \
	K2_HALF4(hbit, qb+32, 132, 16); \
	X4_END(fin, 32, wb, 292); \
	DECQ CX; \
	JNZ  k2x4loop; \
k2x4done: \
	VZEROUPPER; \
	RET

#define Q2K_FINISH(acc, accx, p, moff, ooff) KM_FINISH(80, acc, accx, p, moff, ooff)
#define Q3K_FINISH(acc, accx, p, off, ooff) KO_FINISH(108, acc, accx, p, off, ooff)

// func dotQ2KAVX2(w, x *byte, nb int) float32
TEXT ·dotQ2KAVX2(SB), NOSPLIT, $32-28
	K2_ONE(Q2K_SCALES, Q2K_PREP, NO_HI, 16, Q2K_FOLD, 84)
	VMOVSS X10, ret+24(FP)
	VZEROUPPER
	RET

// func dotQ3KAVX2(w, x *byte, nb int) float32
TEXT ·dotQ3KAVX2(SB), NOSPLIT, $32-28
	K2_ONE(Q3K_SCALES, Q3K_PREP, Q3K_HBIT, 32, Q3K_FOLD, 110)
	VMOVSS X10, ret+24(FP)
	VZEROUPPER
	RET

// func dotQ2Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ2Kx4AVX2(SB), NOSPLIT, $48-40
	K2_X4(Q2K_SCALES, 0, Q2K_PREP, NO_HI, 16, Q2K_FINISH, 84)

// func dotQ3Kx4AVX2(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ3Kx4AVX2(SB), NOSPLIT, $48-40
	K2_X4(Q3K_SCALES, 2, Q3K_PREP, Q3K_HBIT, 32, Q3K_FINISH, 110)
