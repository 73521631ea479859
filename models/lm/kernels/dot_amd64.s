#include "textflag.h"

// The matmul kernels (and attention's scores) keep one 8-lane accumulator per
// (token, row) pair, add the products of each 8-element chunk in order, and
// reduce the lanes the same way (high half onto low half, then two horizontal
// adds); the AVX-512 one merely holds two such accumulators in a 512-bit
// register. All of them therefore give bit-identical results for a pair,
// whatever else they computed with it, so the engine's output does not depend
// on how requests were batched. The other kernels replay the Go loops they
// replace operation for operation.

#include "reduce_amd64.h"

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

	REDUCE8(Y0, X0, 0(DI))
	REDUCE8(Y1, X1, 4(DI))
	REDUCE8(Y2, X2, 8(DI))
	REDUCE8(Y3, X3, 12(DI))
	REDUCE8(Y4, X4, 16(DI))
	REDUCE8(Y5, X5, 20(DI))
	REDUCE8(Y6, X6, 24(DI))
	REDUCE8(Y7, X7, 28(DI))
	VZEROUPPER
	RET

// func Dot1x4AVX2(k int, a, w0, w1, w2, w3 *float32, out *[4]float32)
//
// out[r] = Σ_i a[i]·wr[i]: one token row against four weight rows, for a
// single stream (or the tokens left over from groups of four).
TEXT ·Dot1x4AVX2(SB), NOSPLIT, $0-56
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

	REDUCE8(Y0, X0, 0(DI))
	REDUCE8(Y1, X1, 4(DI))
	REDUCE8(Y2, X2, 8(DI))
	REDUCE8(Y3, X3, 12(DI))
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

// STORE_PAIR reduces the two 8-lane sums in zreg (token 2i in its low
// half, token 2i+1 in its high half) the way Dot1x4AVX2 reduces one (fold
// 256 to 128 bits, two horizontal adds) and stores them at off(DI) and
// off(R13).
#define STORE_PAIR(zreg, off) \
	VEXTRACTF64X4 $0, zreg, Y0; \
	VEXTRACTF64X4 $1, zreg, Y1; \
	REDUCE8(Y0, X0, off(DI)); \
	REDUCE8(Y1, X1, off(R13))

// func dot8x4AVX512(k int, w0, w1, w2, w3, xp, pf *float32, out *float32, stride int)
//
// out[t·stride/4 + r] = Σ_i wr[i]·xt[i] for i < k, k a positive multiple of
// 8: four weight rows against eight tokens, each token's four sums stored
// side by side, stride bytes after the previous token's (so they land in the
// matmul's output directly). xp holds the tokens packed in pairs, chunk by
// chunk: for each 8-element chunk c, four 16-float groups [x2g chunk c,
// x2g+1 chunk c], g = 0..3. One ZMM accumulator holds the two 8-lane
// accumulators of a pair's tokens for one row, so each FMA does the work of
// two AVX2 ones while every (token, row) lane sees the same products in the
// same order as in Dot1x4AVX2 and dot4x2AVX2, and is reduced the same way.
// Accumulator for token pair g and row r: Z(16+4g+r). Each chunk also
// prefetches two cache lines from pf on, 16·k bytes in all: the next four
// weight rows stream in from memory while these are multiplied, at the pace
// they are used.
TEXT ·dot8x4AVX512(SB), NOSPLIT, $0-72
	MOVQ k+0(FP), CX
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ xp+40(FP), SI
	MOVQ pf+48(FP), DX
	MOVQ out+56(FP), DI
	MOVQ stride+64(FP), R12
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	XORQ AX, AX
	SHLQ $2, CX

loop8x4:
	PREFETCHT0 (DX)(AX*4)
	PREFETCHT0 64(DX)(AX*4)
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VBROADCASTF64X4 (R8)(AX*1), Z4
	VBROADCASTF64X4 (R9)(AX*1), Z5
	VBROADCASTF64X4 (R10)(AX*1), Z6
	VBROADCASTF64X4 (R11)(AX*1), Z7
	VFMADD231PS Z0, Z4, Z16
	VFMADD231PS Z1, Z4, Z20
	VFMADD231PS Z2, Z4, Z24
	VFMADD231PS Z3, Z4, Z28
	VFMADD231PS Z0, Z5, Z17
	VFMADD231PS Z1, Z5, Z21
	VFMADD231PS Z2, Z5, Z25
	VFMADD231PS Z3, Z5, Z29
	VFMADD231PS Z0, Z6, Z18
	VFMADD231PS Z1, Z6, Z22
	VFMADD231PS Z2, Z6, Z26
	VFMADD231PS Z3, Z6, Z30
	VFMADD231PS Z0, Z7, Z19
	VFMADD231PS Z1, Z7, Z23
	VFMADD231PS Z2, Z7, Z27
	VFMADD231PS Z3, Z7, Z31
	ADDQ $256, SI
	ADDQ $32, AX
	CMPQ AX, CX
	JLT  loop8x4

	// DI: the even token's sums, R13: the odd token's.
	LEAQ (DI)(R12*1), R13
	STORE_PAIR(Z16, 0)
	STORE_PAIR(Z17, 4)
	STORE_PAIR(Z18, 8)
	STORE_PAIR(Z19, 12)
	LEAQ (R13)(R12*1), DI
	LEAQ (DI)(R12*1), R13
	STORE_PAIR(Z20, 0)
	STORE_PAIR(Z21, 4)
	STORE_PAIR(Z22, 8)
	STORE_PAIR(Z23, 12)
	LEAQ (R13)(R12*1), DI
	LEAQ (DI)(R12*1), R13
	STORE_PAIR(Z24, 0)
	STORE_PAIR(Z25, 4)
	STORE_PAIR(Z26, 8)
	STORE_PAIR(Z27, 12)
	LEAQ (R13)(R12*1), DI
	LEAQ (DI)(R12*1), R13
	STORE_PAIR(Z28, 0)
	STORE_PAIR(Z29, 4)
	STORE_PAIR(Z30, 8)
	STORE_PAIR(Z31, 12)
	VZEROUPPER
	RET

// func AttnScoresAVX2(k int, q, kc *float32, slots *int32, n, stride int, out *float32)
//
// out[p] = Σ_i q[i]·key_p[i] for i < k (a positive multiple of 8), p < n,
// where key_p starts stride bytes × slots[p] after kc. Four keys at a time
// share each load of q and keep four FMA chains in flight; each score is
// still summed exactly as Dot1x4AVX2 sums one of its rows, so scores do not
// change with the kernel that computed them.
TEXT ·AttnScoresAVX2(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ q+8(FP), SI
	MOVQ kc+16(FP), R8
	MOVQ slots+24(FP), R9
	MOVQ n+32(FP), R10
	MOVQ stride+40(FP), R11
	MOVQ out+48(FP), DI
	SHLQ $2, CX
	XORQ DX, DX

score4:
	LEAQ 4(DX), R12
	CMPQ R12, R10
	JGT  score1
	MOVLQSX 0(R9)(DX*4), BX
	IMULQ R11, BX
	ADDQ  R8, BX
	MOVLQSX 4(R9)(DX*4), R13
	IMULQ R11, R13
	ADDQ  R8, R13
	MOVLQSX 8(R9)(DX*4), R14
	IMULQ R11, R14
	ADDQ  R8, R14
	MOVLQSX 12(R9)(DX*4), R12
	IMULQ R11, R12
	ADDQ  R8, R12
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX

score4Chunk:
	VMOVUPS (SI)(AX*1), Y8
	VFMADD231PS (BX)(AX*1), Y8, Y0
	VFMADD231PS (R13)(AX*1), Y8, Y1
	VFMADD231PS (R14)(AX*1), Y8, Y2
	VFMADD231PS (R12)(AX*1), Y8, Y3
	ADDQ $32, AX
	CMPQ AX, CX
	JLT  score4Chunk

	REDUCE8(Y0, X0, 0(DI)(DX*4))
	REDUCE8(Y1, X1, 4(DI)(DX*4))
	REDUCE8(Y2, X2, 8(DI)(DX*4))
	REDUCE8(Y3, X3, 12(DI)(DX*4))
	ADDQ $4, DX
	JMP  score4

score1:
	CMPQ DX, R10
	JGE  scoreDone
	MOVLQSX (R9)(DX*4), BX
	IMULQ R11, BX
	ADDQ  R8, BX
	VXORPS Y0, Y0, Y0
	XORQ AX, AX

score1Chunk:
	VMOVUPS (SI)(AX*1), Y8
	VFMADD231PS (BX)(AX*1), Y8, Y0
	ADDQ $32, AX
	CMPQ AX, CX
	JLT  score1Chunk

	REDUCE8(Y0, X0, (DI)(DX*4))
	INCQ DX
	JMP  score1

scoreDone:
	VZEROUPPER
	RET

// func AttnMixAVX2(k int, alpha, vc *float32, slots *int32, n, stride int, out *float32)
//
// out[i] += alpha[p]·value_p[i] for p = 0..n-1 in order and i < k (a positive
// multiple of 8), where value_p starts stride bytes × slots[p] after vc. Each
// step multiplies, rounds, then adds, and a zero alpha is skipped, exactly as
// one gonum Saxpy per position does, so the output is bit-identical to that
// loop; out stays in registers across positions, 64 floats at a time.
TEXT ·AttnMixAVX2(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ alpha+8(FP), SI
	MOVQ vc+16(FP), R8
	MOVQ slots+24(FP), R9
	MOVQ n+32(FP), R10
	MOVQ stride+40(FP), R11
	MOVQ out+48(FP), DI
	TESTQ R10, R10
	JLE   mixDone
	SHLQ $2, CX
	XORQ AX, AX // byte offset of the block of out being accumulated

mixBlock64:
	LEAQ 256(AX), R12
	CMPQ R12, CX
	JGT  mixBlock8
	VMOVUPS 0(DI)(AX*1), Y0
	VMOVUPS 32(DI)(AX*1), Y1
	VMOVUPS 64(DI)(AX*1), Y2
	VMOVUPS 96(DI)(AX*1), Y3
	VMOVUPS 128(DI)(AX*1), Y4
	VMOVUPS 160(DI)(AX*1), Y5
	VMOVUPS 192(DI)(AX*1), Y6
	VMOVUPS 224(DI)(AX*1), Y7
	XORQ DX, DX

mixPos64:
	MOVL (SI)(DX*4), BX
	TESTL $0x7fffffff, BX
	JZ    mixSkip64
	VBROADCASTSS (SI)(DX*4), Y8
	MOVLQSX (R9)(DX*4), BX
	IMULQ R11, BX
	ADDQ  R8, BX
	ADDQ  AX, BX
	VMULPS 0(BX), Y8, Y9
	VADDPS Y9, Y0, Y0
	VMULPS 32(BX), Y8, Y10
	VADDPS Y10, Y1, Y1
	VMULPS 64(BX), Y8, Y11
	VADDPS Y11, Y2, Y2
	VMULPS 96(BX), Y8, Y12
	VADDPS Y12, Y3, Y3
	VMULPS 128(BX), Y8, Y9
	VADDPS Y9, Y4, Y4
	VMULPS 160(BX), Y8, Y10
	VADDPS Y10, Y5, Y5
	VMULPS 192(BX), Y8, Y11
	VADDPS Y11, Y6, Y6
	VMULPS 224(BX), Y8, Y12
	VADDPS Y12, Y7, Y7

mixSkip64:
	INCQ DX
	CMPQ DX, R10
	JLT  mixPos64
	VMOVUPS Y0, 0(DI)(AX*1)
	VMOVUPS Y1, 32(DI)(AX*1)
	VMOVUPS Y2, 64(DI)(AX*1)
	VMOVUPS Y3, 96(DI)(AX*1)
	VMOVUPS Y4, 128(DI)(AX*1)
	VMOVUPS Y5, 160(DI)(AX*1)
	VMOVUPS Y6, 192(DI)(AX*1)
	VMOVUPS Y7, 224(DI)(AX*1)
	MOVQ R12, AX
	JMP  mixBlock64

mixBlock8:
	CMPQ AX, CX
	JGE  mixDone
	VMOVUPS (DI)(AX*1), Y0
	XORQ DX, DX

mixPos8:
	MOVL (SI)(DX*4), BX
	TESTL $0x7fffffff, BX
	JZ    mixSkip8
	VBROADCASTSS (SI)(DX*4), Y8
	MOVLQSX (R9)(DX*4), BX
	IMULQ R11, BX
	ADDQ  R8, BX
	VMULPS (BX)(AX*1), Y8, Y9
	VADDPS Y9, Y0, Y0

mixSkip8:
	INCQ DX
	CMPQ DX, R10
	JLT  mixPos8
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ $32, AX
	JMP  mixBlock8

mixDone:
	VZEROUPPER
	RET

// The exponential of siluAVX2 is math.Exp's amd64 assembly (the FMA branch,
// which math takes on every CPU these kernels run on) done on four doubles at
// once: the same constants, operations and order, so every lane rounds
// exactly as math.Exp does. Arguments of magnitude 708 or more (and NaN) take
// a path with special cases there (overflow, subnormal results), so the
// kernel leaves them to the caller.
DATA expc<>+0(SB)/8, $0.5
DATA expc<>+8(SB)/8, $0.5
DATA expc<>+16(SB)/8, $0.5
DATA expc<>+24(SB)/8, $0.5
DATA expc<>+32(SB)/8, $1.0
DATA expc<>+40(SB)/8, $1.0
DATA expc<>+48(SB)/8, $1.0
DATA expc<>+56(SB)/8, $1.0
DATA expc<>+64(SB)/8, $2.0
DATA expc<>+72(SB)/8, $2.0
DATA expc<>+80(SB)/8, $2.0
DATA expc<>+88(SB)/8, $2.0
DATA expc<>+96(SB)/8, $1.6666666666666666667e-1
DATA expc<>+104(SB)/8, $1.6666666666666666667e-1
DATA expc<>+112(SB)/8, $1.6666666666666666667e-1
DATA expc<>+120(SB)/8, $1.6666666666666666667e-1
DATA expc<>+128(SB)/8, $4.1666666666666666667e-2
DATA expc<>+136(SB)/8, $4.1666666666666666667e-2
DATA expc<>+144(SB)/8, $4.1666666666666666667e-2
DATA expc<>+152(SB)/8, $4.1666666666666666667e-2
DATA expc<>+160(SB)/8, $8.3333333333333333333e-3
DATA expc<>+168(SB)/8, $8.3333333333333333333e-3
DATA expc<>+176(SB)/8, $8.3333333333333333333e-3
DATA expc<>+184(SB)/8, $8.3333333333333333333e-3
DATA expc<>+192(SB)/8, $1.3888888888888888889e-3
DATA expc<>+200(SB)/8, $1.3888888888888888889e-3
DATA expc<>+208(SB)/8, $1.3888888888888888889e-3
DATA expc<>+216(SB)/8, $1.3888888888888888889e-3
DATA expc<>+224(SB)/8, $1.9841269841269841270e-4
DATA expc<>+232(SB)/8, $1.9841269841269841270e-4
DATA expc<>+240(SB)/8, $1.9841269841269841270e-4
DATA expc<>+248(SB)/8, $1.9841269841269841270e-4
DATA expc<>+256(SB)/8, $2.4801587301587301587e-5
DATA expc<>+264(SB)/8, $2.4801587301587301587e-5
DATA expc<>+272(SB)/8, $2.4801587301587301587e-5
DATA expc<>+280(SB)/8, $2.4801587301587301587e-5
DATA expc<>+288(SB)/8, $1.4426950408889634073599246810018920
DATA expc<>+296(SB)/8, $1.4426950408889634073599246810018920
DATA expc<>+304(SB)/8, $1.4426950408889634073599246810018920
DATA expc<>+312(SB)/8, $1.4426950408889634073599246810018920
DATA expc<>+320(SB)/8, $0.69314718055966295651160180568695068359375
DATA expc<>+328(SB)/8, $0.69314718055966295651160180568695068359375
DATA expc<>+336(SB)/8, $0.69314718055966295651160180568695068359375
DATA expc<>+344(SB)/8, $0.69314718055966295651160180568695068359375
DATA expc<>+352(SB)/8, $0.28235290563031577122588448175013436025525412068e-12
DATA expc<>+360(SB)/8, $0.28235290563031577122588448175013436025525412068e-12
DATA expc<>+368(SB)/8, $0.28235290563031577122588448175013436025525412068e-12
DATA expc<>+376(SB)/8, $0.28235290563031577122588448175013436025525412068e-12
DATA expc<>+384(SB)/8, $0.0625
DATA expc<>+392(SB)/8, $0.0625
DATA expc<>+400(SB)/8, $0.0625
DATA expc<>+408(SB)/8, $0.0625
DATA expc<>+416(SB)/8, $708.0
DATA expc<>+424(SB)/8, $708.0
DATA expc<>+432(SB)/8, $708.0
DATA expc<>+440(SB)/8, $708.0
DATA expc<>+448(SB)/8, $0x8000000000000000
DATA expc<>+456(SB)/8, $0x8000000000000000
DATA expc<>+464(SB)/8, $0x8000000000000000
DATA expc<>+472(SB)/8, $0x8000000000000000
DATA expc<>+480(SB)/8, $0x7fffffffffffffff
DATA expc<>+488(SB)/8, $0x7fffffffffffffff
DATA expc<>+496(SB)/8, $0x7fffffffffffffff
DATA expc<>+504(SB)/8, $0x7fffffffffffffff
DATA expc<>+512(SB)/8, $0x3ff
DATA expc<>+520(SB)/8, $0x3ff
DATA expc<>+528(SB)/8, $0x3ff
DATA expc<>+536(SB)/8, $0x3ff
DATA expc<>+544(SB)/4, $1.0
DATA expc<>+548(SB)/4, $1.0
DATA expc<>+552(SB)/4, $1.0
DATA expc<>+556(SB)/4, $1.0
GLOBL expc<>(SB), RODATA|NOPTR, $560

// EXP4_IN_RANGE sets BX to 15 when all four float64 lanes of Y0 are
// arguments math.Exp computes by its main path (|x| < 708, not NaN).
#define EXP4_IN_RANGE \
	VANDPD expc<>+480(SB), Y0, Y1; \
	VCMPPD $0x11, expc<>+416(SB), Y1, Y2; \
	VMOVMSKPD Y2, BX; \
	CMPL BX, $15

// EXP4 replaces the four float64 lanes of Y0 by exp(lane), replaying Go's
// amd64 math.Exp step for step (range reduction by ln 2, the polynomial,
// the squarings, the exponent bits); clobbers Y1–Y4, X3.
#define EXP4 \
	VMULPD expc<>+288(SB), Y0, Y1; \
	VCVTPD2DQY Y1, X3; \
	VCVTDQ2PD X3, Y1; \
	VMOVUPD expc<>+320(SB), Y2; \
	VFNMADD231PD Y2, Y1, Y0; \
	VMOVUPD expc<>+352(SB), Y2; \
	VFNMADD231PD Y2, Y1, Y0; \
	VMULPD expc<>+384(SB), Y0, Y0; \
	VMOVUPD expc<>+256(SB), Y1; \
	VFMADD213PD expc<>+224(SB), Y0, Y1; \
	VFMADD213PD expc<>+192(SB), Y0, Y1; \
	VFMADD213PD expc<>+160(SB), Y0, Y1; \
	VFMADD213PD expc<>+128(SB), Y0, Y1; \
	VFMADD213PD expc<>+96(SB), Y0, Y1; \
	VFMADD213PD expc<>+0(SB), Y0, Y1; \
	VFMADD213PD expc<>+32(SB), Y0, Y1; \
	VMULPD Y1, Y0, Y0; \
	VADDPD expc<>+64(SB), Y0, Y1; \
	VMULPD Y1, Y0, Y0; \
	VADDPD expc<>+64(SB), Y0, Y1; \
	VMULPD Y1, Y0, Y0; \
	VADDPD expc<>+64(SB), Y0, Y1; \
	VMULPD Y1, Y0, Y0; \
	VADDPD expc<>+64(SB), Y0, Y1; \
	VFMADD213PD expc<>+32(SB), Y1, Y0; \
	VPMOVSXDQ X3, Y4; \
	VPADDQ expc<>+512(SB), Y4, Y4; \
	VPSLLQ $52, Y4, Y4; \
	VMULPD Y4, Y0, Y0

// func siluAVX2(n int, gate, up *float32) (done int)
//
// gate[i] = gate[i] / (1 + float32(math.Exp(float64(-gate[i])))) · up[i] for
// i < done, in groups of four from 0: done stops at n&^3 or at the first
// group holding an argument math.Exp treats specially, which the caller
// finishes in Go. Each step is the float32 or float64 operation Go compiles
// that expression to, so the results are bit-identical.
TEXT ·siluAVX2(SB), NOSPLIT, $0-32
	MOVQ n+0(FP), CX
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DI
	ANDQ $~3, CX
	XORQ AX, AX

siluLoop:
	CMPQ AX, CX
	JGE  siluDone
	VMOVUPS (SI)(AX*4), X6
	VCVTPS2PD X6, Y0
	VXORPD expc<>+448(SB), Y0, Y0
	EXP4_IN_RANGE
	JNE  siluDone
	EXP4
	VCVTPD2PSY Y0, X1
	VADDPS expc<>+544(SB), X1, X1
	VDIVPS X1, X6, X2
	VMULPS (DI)(AX*4), X2, X2
	VMOVUPS X2, (SI)(AX*4)
	ADDQ $4, AX
	JMP  siluLoop

siluDone:
	MOVQ AX, done+24(FP)
	VZEROUPPER
	RET

// func SoftmaxExpAVX2(n int, sc *float32, maxS float32, sum float64) (done int, total float64)
//
// For p < done: e = math.Exp(float64(sc[p] - maxS)), sc[p] = float32(e) and
// sum += e in order of p, with total the final sum: attention's softmax
// numerators, bit-identical to that Go loop (see siluAVX2 for the exp). done
// stops at n&^3 or at the first group holding an argument math.Exp treats
// specially, which the caller finishes in Go.
TEXT ·SoftmaxExpAVX2(SB), NOSPLIT, $0-48
	MOVQ n+0(FP), CX
	MOVQ sc+8(FP), SI
	VBROADCASTSS maxS+16(FP), X5
	VMOVSD sum+24(FP), X7
	ANDQ $~3, CX
	XORQ AX, AX

smLoop:
	CMPQ AX, CX
	JGE  smDone
	VMOVUPS (SI)(AX*4), X6
	VSUBPS X5, X6, X6
	VCVTPS2PD X6, Y0
	EXP4_IN_RANGE
	JNE  smDone
	EXP4
	VCVTPD2PSY Y0, X1
	VMOVUPS X1, (SI)(AX*4)
	VADDSD X0, X7, X7
	VPERMILPD $1, X0, X1
	VADDSD X1, X7, X7
	VEXTRACTF128 $1, Y0, X2
	VADDSD X2, X7, X7
	VPERMILPD $1, X2, X3
	VADDSD X3, X7, X7
	ADDQ $4, AX
	JMP  smLoop

smDone:
	MOVQ AX, done+32(FP)
	VMOVSD X7, total+40(FP)
	VZEROUPPER
	RET
