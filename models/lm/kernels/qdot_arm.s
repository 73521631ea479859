//go:build arm && arm.6

#include "textflag.h"

// The integer dot products on armv7 NEON (32-bit ARM; qdot_arm.go chooses
// them where the CPU has NEON). Go's arm assembler has no NEON or VFP
// mnemonics beyond the basic float moves, so every NEON/VFP instruction is
// a WORD with its ARM-syntax instruction beside it (TestArmEncodings checks
// each against an assembler where one is installed).
//
// Bit-identity with the Go kernels (qdot.go): the integer part (unpacking,
// byte products, lane sums) is NEON, whose integer results are exact; the
// float part is done with scalar VFP instructions, the ones the Go compiler
// emits for the Go kernel, in the same order and with the same operand
// order. NEON float arithmetic on armv7 flushes subnormals to zero and
// returns the default NaN, so it is not used for any float step (the
// int32 → float32 lane conversion is NEON: exact for the lane sums, whose
// magnitude is at most 4·128·128 = 2^16). VMLA.F32 (VFP) rounds the product
// before adding, as Go's MULAF does: it is the instruction the compiler
// emits for lanes32's acc[l] += dd·s.
//
// Registers (32-value kernels): R0 the weight block, R1 the activation
// block, R2 blocks left, R3-R9 and R12 scratch (R10 is g, R11 the linker's).
// Q0, Q1 (S0-S7) the block's eight lanes, Q2, Q3 (S8-S15) the eight float
// lane sums, S16 dd, S17 dx, S18 the Q4_1/Q5_1 min sum, S19 scratch; Q5 the
// bit of each byte (1, 2, … 128, twice), Q6 0x0f bytes, Q7 the type's
// offset (8 or 16); Q8, Q9 the 32 weight quants as signed bytes, Q10, Q11
// the 32 activations, Q12-Q15 products and unpacking scratch. NEON
// registers are caller-saved in Go's ABI0, so none is preserved.
//
// Unaligned data: vector loads are VLD1.8 without an alignment hint (any
// address), weight scalars are loaded a byte at a time (a block's f16 sits
// at any even or odd offset), and dx with LDR, which armv7 Linux allows
// unaligned (activation blocks are 40-byte aligned in practice anyway).

// F16_BITS: the f16 at off(R0) as float32 bits in R7, exactly as
// gguf.F16ToF32 (normals rebias the exponent, subnormals are normalised
// with CLZ, ±0 stays ±0, Inf and NaN keep their payload). Branch-free;
// clobbers R4-R6, R8, R9.
#define F16_BITS(off) \
	MOVBU off(R0), R4; \
	MOVBU off+1(R0), R5; \
	ORR   R5<<8, R4, R4; \
	AND   $0x8000, R4, R6; \ // sign
	BIC   $0x8000, R4, R5; \ // |h|
	CLZ   R5, R8; \ // subnormal: n = CLZ(mant), leading bit to bit 23
	SUB   $8, R8, R9; \
	MOVW  R5<<R9, R9; \
	RSB   $133, R8, R8; \ // exponent 134−n (the leading bit adds one)
	ADD   R8<<23, R9, R9; \
	MOVW  R5<<13, R7; \ // normal: exponent + 112, mantissa << 13
	ADD   $0x38000000, R7, R7; \
	CMP   $0x0400, R5; \
	MOVW.LO R9, R7; \
	CMP   $0x7c00, R5; \ // Inf/NaN: exponent 31+112+112 = 255
	ADD.HS $0x38000000, R7, R7; \
	CMP   $0, R5; \
	MOVW.EQ $0, R7; \
	ORR   R6<<16, R7, R7

// Q32_CONSTS: Q5 the bit of each byte (1 … 128, twice), Q6 0x0f bytes, Q7
// the type's offset (OFF8 or OFF16).
#define Q32_CONSTS(off) \
	MOVW $0x08040201, R4; \
	MOVW $0x80402010, R5; \
	WORD $0xec454b1a; \ // vmov d10, r4, r5
	WORD $0xec454b1b; \ // vmov d11, r4, r5
	WORD $0xf280ce5f; \ // vmov.i8 q6, #15
	off

#define OFF8 WORD $0xf280ee58 // vmov.i8 q7, #8
#define OFF16 WORD $0xf281ee50 // vmov.i8 q7, #16

// Q8_0 unpacking: the block's 32 quants at 2(R0) into Q8, Q9.
#define UNPACK_Q8_0 \
	ADD  $2, R0, R3; \
	WORD $0xf463020f     // vld1.8 {d16, d17, d18, d19}, [r3]

// NIBBLES(qoff): the 16 bytes at qoff(R0), low nibbles to Q8 (values
// 0-15), high nibbles to Q9 (values 16-31).
#define NIBBLES(qoff) \
	ADD  $qoff, R0, R3; \
	WORD $0xf4630a0f; \ // vld1.8 {d16, d17}, [r3]
	WORD $0xf3cc2070; \ // vshr.u8 q9, q8, #4
	WORD $0xf24001dc     // vand q8, q8, q6

// Q4_0: q = nibble − 8.
#define UNPACK_Q4_0 \
	NIBBLES(2); \
	WORD $0xf34008ce; \ // vsub.i8 q8, q8, q7
	WORD $0xf34228ce     // vsub.i8 q9, q9, q7

#define UNPACK_Q4_1 NIBBLES(4)

// QH_MASKS(hoff): Q12, Q13 = 0xff in byte i (0-15, 16-31) where bit i of
// the qh word at hoff(R0) is set: qh byte i/8 duplicated into eight lanes,
// tested against Q5's bits.
#define QH_MASKS(hoff) \
	ADD  $hoff, R0, R3; \
	WORD $0xf463c70f; \ // vld1.8 {d28}, [r3]
	WORD $0xf3f18c2c; \ // vdup.8 d24, d28[0]
	WORD $0xf3f39c2c; \ // vdup.8 d25, d28[1]
	WORD $0xf3f5ac2c; \ // vdup.8 d26, d28[2]
	WORD $0xf3f7bc2c; \ // vdup.8 d27, d28[3]
	WORD $0xf24888da; \ // vtst.8 q12, q12, q5
	WORD $0xf24aa8da     // vtst.8 q13, q13, q5

// Q5_0: q = (nibble | fifth bit·16) − 16 = nibble − (16 where the bit is clear).
#define UNPACK_Q5_0 \
	QH_MASKS(2); \
	NIBBLES(6); \
	WORD $0xf25e8178; \ // vbic q12, q7, q12
	WORD $0xf25ea17a; \ // vbic q13, q7, q13
	WORD $0xf34008e8; \ // vsub.i8 q8, q8, q12
	WORD $0xf34228ea     // vsub.i8 q9, q9, q13

// Q5_1: q = nibble | fifth bit·16 (Q7 holds 16).
#define UNPACK_Q5_1 \
	QH_MASKS(4); \
	NIBBLES(8); \
	WORD $0xf24881de; \ // vand q12, q12, q7
	WORD $0xf24aa1de; \ // vand q13, q13, q7
	WORD $0xf26001f8; \ // vorr q8, q8, q12
	WORD $0xf26221fa     // vorr q9, q9, q13

// LANES: the eight int32 lane sums of the weights in Q8, Q9 times the
// activations at 8(R1), lane l = values 4l…4l+3 (lanes32's), as float32 in
// S0-S7. VMULL.S8 gives int16 products (at most 128·128 = 2^14), VPADDL
// sums pairs into int32, VPADD pairs of pairs.
#define LANES \
	ADD  $8, R1, R3; \
	WORD $0xf463420f; \ // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf2c08ca4; \ // vmull.s8 q12, d16, d20
	WORD $0xf2c1aca5; \ // vmull.s8 q13, d17, d21
	WORD $0xf2c2cca6; \ // vmull.s8 q14, d18, d22
	WORD $0xf2c3eca7; \ // vmull.s8 q15, d19, d23
	WORD $0xf3f48268; \ // vpaddl.s16 q12, q12
	WORD $0xf3f4a26a; \ // vpaddl.s16 q13, q13
	WORD $0xf3f4c26c; \ // vpaddl.s16 q14, q14
	WORD $0xf3f4e26e; \ // vpaddl.s16 q15, q15
	WORD $0xf2280bb9; \ // vpadd.i32 d0, d24, d25
	WORD $0xf22a1bbb; \ // vpadd.i32 d1, d26, d27
	WORD $0xf22c2bbd; \ // vpadd.i32 d2, d28, d29
	WORD $0xf22e3bbf; \ // vpadd.i32 d3, d30, d31
	WORD $0xf3bb0640; \ // vcvt.f32.s32 q0, q0
	WORD $0xf3bb2642     // vcvt.f32.s32 q1, q1

// DW_DX: S16 = float32(dw·dx), dw the f16 at 0(R0), dx the float32 at
// 0(R1), S17 = dx. DD_WX and DD_XW are the two operand orders (the compiler
// puts dw first in dotQ8_0Go and dx first in dot32; it matters only for
// which of two NaNs comes out).
#define DW_DX(mul) \
	F16_BITS(0); \
	MOVW (R1), R4; \
	WORD $0xee087a10; \ // vmov s16, r7
	WORD $0xee084a90; \ // vmov s17, r4
	mul

#define DD_WX WORD $0xee288a28 // vmul.f32 s16, s16, s17
#define DD_XW WORD $0xee288a88 // vmul.f32 s16, s17, s16

// ACC_LANES: lane sum l += dd·lane l (VFP, Go's MULAF).
#define ACC_LANES \
	WORD $0xee004a08; \ // vmla.f32 s8, s0, s16
	WORD $0xee404a88; \ // vmla.f32 s9, s1, s16
	WORD $0xee015a08; \ // vmla.f32 s10, s2, s16
	WORD $0xee415a88; \ // vmla.f32 s11, s3, s16
	WORD $0xee026a08; \ // vmla.f32 s12, s4, s16
	WORD $0xee426a88; \ // vmla.f32 s13, s5, s16
	WORD $0xee037a08; \ // vmla.f32 s14, s6, s16
	WORD $0xee437a88     // vmla.f32 s15, s7, s16

// M_TERM (Q4_1, Q5_1): S18 += float32(float32(m·dx)·float32(Σq)), m the
// f16 at 2(R0), Σq the int32 at 4(R1), in dot32's order.
#define M_TERM \
	F16_BITS(2); \
	MOVW 4(R1), R4; \
	WORD $0xee097a90; \ // vmov s19, r7
	WORD $0xee699aa8; \ // vmul.f32 s19, s19, s17
	WORD $0xee004a10; \ // vmov s0, r4
	WORD $0xeeb80ac0; \ // vcvt.f32.s32 s0, s0
	WORD $0xee609a29; \ // vmul.f32 s19, s0, s19
	WORD $0xee399a29     // vadd.f32 s18, s18, s19

#define NO_M

// REDUCE: the REDUCE8 sum of S8-S15 into S0: ((l0+l4)+(l1+l5)) +
// ((l2+l6)+(l3+l7)), each add with the Go kernel's operand order.
#define REDUCE \
	WORD $0xee360a04; \ // vadd.f32 s0, s12, s8
	WORD $0xee760aa4; \ // vadd.f32 s1, s13, s9
	WORD $0xee371a05; \ // vadd.f32 s2, s14, s10
	WORD $0xee771aa5; \ // vadd.f32 s3, s15, s11
	WORD $0xee300a80; \ // vadd.f32 s0, s1, s0
	WORD $0xee311a81; \ // vadd.f32 s2, s3, s2
	WORD $0xee300a01     // vadd.f32 s0, s0, s2

// Q32_KERNEL: a 32-value kernel over nb blocks of wb bytes; result the
// REDUCE8 sum, for dot32's types plus its min sum S18 (PLUS_M: macc + sum,
// in dot32's order; dot32 adds its +0 min sum for Q4_0 and Q5_0 too, so
// these do, to keep exactly its float steps).
#define Q32_KERNEL(off, unpack, mul, mterm, final, wb) \
	MOVW w+0(FP), R0; \
	MOVW x+4(FP), R1; \
	MOVW nb+8(FP), R2; \
	WORD $0xf2804050; \ // vmov.i32 q2, #0
	WORD $0xf2806050; \ // vmov.i32 q3, #0
	WORD $0xf2809010; \ // vmov.i32 d9, #0
	Q32_CONSTS(off); \
	CMP  $0, R2; \
	BEQ  q32done; \
q32loop: \
	unpack; \
	LANES; \
	DW_DX(mul); \
	ACC_LANES; \
	mterm; \
	ADD  $wb, R0; \
	ADD  $40, R1; \
	SUB.S $1, R2; \
	BNE  q32loop; \
q32done: \
	REDUCE; \
	final; \
	WORD $0xee104a10; \ // vmov r4, s0
	MOVW R4, ret+12(FP); \
	RET

#define NO_FINAL
#define PLUS_M WORD $0xee390a00 // vadd.f32 s0, s18, s0

// func dotQ8_0ARMNEON(w, x *byte, nb int) float32
TEXT ·dotQ8_0ARMNEON(SB), NOSPLIT, $0-16
	Q32_KERNEL(OFF8, UNPACK_Q8_0, DD_WX, NO_M, NO_FINAL, 34)

// func dotQ4_0ARMNEON(w, x *byte, nb int) float32
TEXT ·dotQ4_0ARMNEON(SB), NOSPLIT, $0-16
	Q32_KERNEL(OFF8, UNPACK_Q4_0, DD_XW, NO_M, PLUS_M, 18)

// func dotQ5_0ARMNEON(w, x *byte, nb int) float32
TEXT ·dotQ5_0ARMNEON(SB), NOSPLIT, $0-16
	Q32_KERNEL(OFF16, UNPACK_Q5_0, DD_XW, NO_M, PLUS_M, 22)

// func dotQ4_1ARMNEON(w, x *byte, nb int) float32
TEXT ·dotQ4_1ARMNEON(SB), NOSPLIT, $0-16
	Q32_KERNEL(OFF16, UNPACK_Q4_1, DD_XW, M_TERM, PLUS_M, 20)

// func dotQ5_1ARMNEON(w, x *byte, nb int) float32
TEXT ·dotQ5_1ARMNEON(SB), NOSPLIT, $0-16
	Q32_KERNEL(OFF16, UNPACK_Q5_1, DD_XW, M_TERM, PLUS_M, 24)

// func dotQ4KARMNEON(w, x *byte, nb int) float32
//
// Q4_K as dotK does it: per super-block the exact int32 isum = Σ_j sc_j ·
// Σ q·x over the eight 32-value sub-blocks and msum = Σ_j m_j · (bsum_2j +
// bsum_2j+1), then acc += float32(d·dx)·float32(isum) and acc −=
// float32(dmin·dx)·float32(msum) in VFP, in dotK's operand order. The 6-bit
// scales and mins are unpacked in general registers (as ScaleMinK4 does)
// and widened to int16 lanes: scales in D4, D5, mins in D6, D7. A plane of
// 32 quant bytes holds sub-block 2p in its low nibbles and 2p+1 in its
// high ones; VMULL.S8/VMLAL.S8 sum four products per int16 lane (at most
// 4·15·128 = 7,680: exact), VMLAL.S16 by the scale (at most 63) adds them
// to the int32 lanes of Q1. Registers: S0 acc, S1 dx, S2, S3 scratch, Q1
// isum lanes (then S4), Q5 0x0f bytes, Q6, Q7 the sub-block sums, Q8, Q9 a
// plane (high nibbles), Q10-Q13 its 64 activations, Q14, Q15 its low
// nibbles, S16 msum. Scales are loaded with LDR, unaligned: armv7 Linux
// allows it for LDR (not LDRD or LDM), and C compilers rely on it there.
TEXT ·dotQ4KARMNEON(SB), NOSPLIT, $0-16
	MOVW w+0(FP), R0
	MOVW x+4(FP), R1
	MOVW nb+8(FP), R2
	WORD $0xf2800010 // vmov.i32 d0, #0
	WORD $0xf280ae5f // vmov.i8 q5, #15
	CMP  $0, R2
	BEQ  q4kdone
q4kloop:
	// Scales 0-3 in R7, 4-7 in R8; mins 0-3 in R5, 4-7 in R6 (a byte each).
	MOVW 4(R0), R4
	MOVW 8(R0), R5
	MOVW 12(R0), R6
	AND  $0x3f3f3f3f, R4, R7
	AND  $0x0f0f0f0f, R6, R8
	MOVW R4>>6, R9
	AND  $0x03030303, R9, R9
	ORR  R9<<4, R8, R8
	MOVW R6>>4, R6
	AND  $0x0f0f0f0f, R6, R6
	MOVW R5>>6, R9
	AND  $0x03030303, R9, R9
	ORR  R9<<4, R6, R6
	AND  $0x3f3f3f3f, R5, R5
	WORD $0xec487b18 // vmov d8, r7, r8
	WORD $0xec465b19 // vmov d9, r5, r6
	WORD $0xf3884a18 // vmovl.u8 q2, d8
	WORD $0xf3886a19 // vmovl.u8 q3, d9
	// msum: the activations' 16-value sums paired per sub-block, times the mins.
	ADD  $260, R1, R3
	WORD $0xf463420f // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf2148bb5 // vpadd.i16 d8, d20, d21
	WORD $0xf2169bb7 // vpadd.i16 d9, d22, d23
	WORD $0xf298cc06 // vmull.s16 q6, d8, d6
	WORD $0xf299c807 // vmlal.s16 q6, d9, d7
	WORD $0xf22c8b1d // vpadd.i32 d8, d12, d13
	WORD $0xf2288b18 // vpadd.i32 d8, d8, d8
	WORD $0xf2802050 // vmov.i32 q1, #0
	// Plane 0: sub-blocks 0 (low nibbles) and 1 (high).
	ADD  $16, R0, R3
	WORD $0xf463020f // vld1.8 {d16, d17, d18, d19}, [r3]
	ADD  $4, R1, R3
	WORD $0xf463420d // vld1.8 {d20, d21, d22, d23}, [r3]!
	WORD $0xf463820f // vld1.8 {d24, d25, d26, d27}, [r3]
	WORD $0xf240c1da // vand q14, q8, q5
	WORD $0xf242e1da // vand q15, q9, q5
	WORD $0xf3cc0070 // vshr.u8 q8, q8, #4
	WORD $0xf3cc2072 // vshr.u8 q9, q9, #4
	WORD $0xf28ccca4 // vmull.s8 q6, d28, d20
	WORD $0xf28dc8a5 // vmlal.s8 q6, d29, d21
	WORD $0xf28ec8a6 // vmlal.s8 q6, d30, d22
	WORD $0xf28fc8a7 // vmlal.s8 q6, d31, d23
	WORD $0xf280eca8 // vmull.s8 q7, d16, d24
	WORD $0xf281e8a9 // vmlal.s8 q7, d17, d25
	WORD $0xf282e8aa // vmlal.s8 q7, d18, d26
	WORD $0xf283e8ab // vmlal.s8 q7, d19, d27
	WORD $0xf29c2244 // vmlal.s16 q1, d12, d4[0]
	WORD $0xf29d2244 // vmlal.s16 q1, d13, d4[0]
	WORD $0xf29e224c // vmlal.s16 q1, d14, d4[1]
	WORD $0xf29f224c // vmlal.s16 q1, d15, d4[1]
	// Plane 1: sub-blocks 2 (low nibbles) and 3 (high).
	ADD  $48, R0, R3
	WORD $0xf463020f // vld1.8 {d16, d17, d18, d19}, [r3]
	ADD  $68, R1, R3
	WORD $0xf463420d // vld1.8 {d20, d21, d22, d23}, [r3]!
	WORD $0xf463820f // vld1.8 {d24, d25, d26, d27}, [r3]
	WORD $0xf240c1da // vand q14, q8, q5
	WORD $0xf242e1da // vand q15, q9, q5
	WORD $0xf3cc0070 // vshr.u8 q8, q8, #4
	WORD $0xf3cc2072 // vshr.u8 q9, q9, #4
	WORD $0xf28ccca4 // vmull.s8 q6, d28, d20
	WORD $0xf28dc8a5 // vmlal.s8 q6, d29, d21
	WORD $0xf28ec8a6 // vmlal.s8 q6, d30, d22
	WORD $0xf28fc8a7 // vmlal.s8 q6, d31, d23
	WORD $0xf280eca8 // vmull.s8 q7, d16, d24
	WORD $0xf281e8a9 // vmlal.s8 q7, d17, d25
	WORD $0xf282e8aa // vmlal.s8 q7, d18, d26
	WORD $0xf283e8ab // vmlal.s8 q7, d19, d27
	WORD $0xf29c2264 // vmlal.s16 q1, d12, d4[2]
	WORD $0xf29d2264 // vmlal.s16 q1, d13, d4[2]
	WORD $0xf29e226c // vmlal.s16 q1, d14, d4[3]
	WORD $0xf29f226c // vmlal.s16 q1, d15, d4[3]
	// Plane 2: sub-blocks 4 (low nibbles) and 5 (high).
	ADD  $80, R0, R3
	WORD $0xf463020f // vld1.8 {d16, d17, d18, d19}, [r3]
	ADD  $132, R1, R3
	WORD $0xf463420d // vld1.8 {d20, d21, d22, d23}, [r3]!
	WORD $0xf463820f // vld1.8 {d24, d25, d26, d27}, [r3]
	WORD $0xf240c1da // vand q14, q8, q5
	WORD $0xf242e1da // vand q15, q9, q5
	WORD $0xf3cc0070 // vshr.u8 q8, q8, #4
	WORD $0xf3cc2072 // vshr.u8 q9, q9, #4
	WORD $0xf28ccca4 // vmull.s8 q6, d28, d20
	WORD $0xf28dc8a5 // vmlal.s8 q6, d29, d21
	WORD $0xf28ec8a6 // vmlal.s8 q6, d30, d22
	WORD $0xf28fc8a7 // vmlal.s8 q6, d31, d23
	WORD $0xf280eca8 // vmull.s8 q7, d16, d24
	WORD $0xf281e8a9 // vmlal.s8 q7, d17, d25
	WORD $0xf282e8aa // vmlal.s8 q7, d18, d26
	WORD $0xf283e8ab // vmlal.s8 q7, d19, d27
	WORD $0xf29c2245 // vmlal.s16 q1, d12, d5[0]
	WORD $0xf29d2245 // vmlal.s16 q1, d13, d5[0]
	WORD $0xf29e224d // vmlal.s16 q1, d14, d5[1]
	WORD $0xf29f224d // vmlal.s16 q1, d15, d5[1]
	// Plane 3: sub-blocks 6 (low nibbles) and 7 (high).
	ADD  $112, R0, R3
	WORD $0xf463020f // vld1.8 {d16, d17, d18, d19}, [r3]
	ADD  $196, R1, R3
	WORD $0xf463420d // vld1.8 {d20, d21, d22, d23}, [r3]!
	WORD $0xf463820f // vld1.8 {d24, d25, d26, d27}, [r3]
	WORD $0xf240c1da // vand q14, q8, q5
	WORD $0xf242e1da // vand q15, q9, q5
	WORD $0xf3cc0070 // vshr.u8 q8, q8, #4
	WORD $0xf3cc2072 // vshr.u8 q9, q9, #4
	WORD $0xf28ccca4 // vmull.s8 q6, d28, d20
	WORD $0xf28dc8a5 // vmlal.s8 q6, d29, d21
	WORD $0xf28ec8a6 // vmlal.s8 q6, d30, d22
	WORD $0xf28fc8a7 // vmlal.s8 q6, d31, d23
	WORD $0xf280eca8 // vmull.s8 q7, d16, d24
	WORD $0xf281e8a9 // vmlal.s8 q7, d17, d25
	WORD $0xf282e8aa // vmlal.s8 q7, d18, d26
	WORD $0xf283e8ab // vmlal.s8 q7, d19, d27
	WORD $0xf29c2265 // vmlal.s16 q1, d12, d5[2]
	WORD $0xf29d2265 // vmlal.s16 q1, d13, d5[2]
	WORD $0xf29e226d // vmlal.s16 q1, d14, d5[3]
	WORD $0xf29f226d // vmlal.s16 q1, d15, d5[3]
	// acc += float32(d·dx)·float32(isum); acc −= float32(dmin·dx)·float32(msum).
	WORD $0xf2222b13 // vpadd.i32 d2, d2, d3
	WORD $0xf2222b12 // vpadd.i32 d2, d2, d2
	MOVW (R1), R4
	WORD $0xee004a90 // vmov s1, r4
	F16_BITS(0)
	WORD $0xee017a10 // vmov s2, r7
	WORD $0xee211a20 // vmul.f32 s2, s2, s1
	WORD $0xeeb82ac2 // vcvt.f32.s32 s4, s4
	WORD $0xee211a02 // vmul.f32 s2, s2, s4
	WORD $0xee300a01 // vadd.f32 s0, s0, s2
	F16_BITS(2)
	WORD $0xee017a90 // vmov s3, r7
	WORD $0xee611aa0 // vmul.f32 s3, s3, s1
	WORD $0xeeb88ac8 // vcvt.f32.s32 s16, s16
	WORD $0xee611a88 // vmul.f32 s3, s3, s16
	WORD $0xee300a61 // vsub.f32 s0, s0, s3
	ADD  $144, R0
	ADD  $292, R1
	SUB.S $1, R2
	BNE  q4kloop
q4kdone:
	WORD $0xee104a10 // vmov r4, s0
	MOVW R4, ret+12(FP)
	RET

// func dotQ6KARMNEON(w, x *byte, nb int) float32
//
// Q6_K as dotK does it: isum = Σ_g sc_g · Σ q·x over sixteen 16-value
// groups, q = (low 4 bits | high 2 bits << 4) − 32, then acc +=
// float32(d·dx)·float32(isum) in VFP. Each half (128 values) has two
// 32-byte ql planes A (runs 0, 2: low, high nibbles) and B (runs 1, 3) and
// one 32-byte qh plane H (run j: bits 2j, 2j+1); run j of half h is groups
// 8h+2j and 8h+2j+1. VBIT inserts the high bits (moved to bits 4-5) under
// the 0x30 mask. VMULL.S8/VMLAL.S8 sum two products per int16 lane (at
// most 2·32·128 = 8,192: exact), VMLAL.S16 by the int8 scale adds them to
// Q1's int32 lanes. Registers: S0 acc, S1 dx, S2 scratch, Q1 isum lanes
// (then S4), Q2, Q3 the 16 scales as int16, Q4 0x0f, Q5 0x30, Q6 32 bytes,
// Q7 scratch and group sums, Q8, Q9 plane A or B, Q10, Q11 a run's
// activations, Q12, Q13 plane H, Q14, Q15 a run's quants.
TEXT ·dotQ6KARMNEON(SB), NOSPLIT, $0-16
	MOVW w+0(FP), R0
	MOVW x+4(FP), R1
	MOVW nb+8(FP), R2
	WORD $0xf2800010 // vmov.i32 d0, #0
	WORD $0xf2808e5f // vmov.i8 q4, #15
	WORD $0xf283ae50 // vmov.i8 q5, #48
	WORD $0xf282ce50 // vmov.i8 q6, #32
	CMP  $0, R2
	BEQ  q6kdone
q6kloop:
	ADD  $192, R0, R3
	WORD $0xf4234a0f // vld1.8 {d4, d5}, [r3]
	WORD $0xf2886a15 // vmovl.s8 q3, d5
	WORD $0xf2884a14 // vmovl.s8 q2, d4
	WORD $0xf2802050 // vmov.i32 q1, #0
	// Half 0: plane H, then A (runs 0, 2), then B (runs 1, 3).
	ADD  $128, R0, R3
	WORD $0xf463820f // vld1.8 {d24, d25, d26, d27}, [r3]
	ADD  $0, R0, R3
	WORD $0xf463020f // vld1.8 {d16, d17, d18, d19}, [r3]
	// Run 0: groups 0, 1.
	ADD  $4, R1, R3
	WORD $0xf463420f // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf240c1d8 // vand q14, q8, q4
	WORD $0xf242e1d8 // vand q15, q9, q4
	WORD $0xf28ce578 // vshl.i8 q7, q12, #4
	WORD $0xf36ec15a // vbit q14, q7, q5
	WORD $0xf28ce57a // vshl.i8 q7, q13, #4
	WORD $0xf36ee15a // vbit q15, q7, q5
	WORD $0xf34cc8cc // vsub.i8 q14, q14, q6
	WORD $0xf34ee8cc // vsub.i8 q15, q15, q6
	WORD $0xf28ceca4 // vmull.s8 q7, d28, d20
	WORD $0xf28de8a5 // vmlal.s8 q7, d29, d21
	WORD $0xf29e2244 // vmlal.s16 q1, d14, d4[0]
	WORD $0xf29f2244 // vmlal.s16 q1, d15, d4[0]
	WORD $0xf28eeca6 // vmull.s8 q7, d30, d22
	WORD $0xf28fe8a7 // vmlal.s8 q7, d31, d23
	WORD $0xf29e224c // vmlal.s16 q1, d14, d4[1]
	WORD $0xf29f224c // vmlal.s16 q1, d15, d4[1]
	// Run 2: groups 4, 5.
	ADD  $68, R1, R3
	WORD $0xf463420f // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf3ccc070 // vshr.u8 q14, q8, #4
	WORD $0xf3cce072 // vshr.u8 q15, q9, #4
	WORD $0xf368c1da // vbit q14, q12, q5
	WORD $0xf36ae1da // vbit q15, q13, q5
	WORD $0xf34cc8cc // vsub.i8 q14, q14, q6
	WORD $0xf34ee8cc // vsub.i8 q15, q15, q6
	WORD $0xf28ceca4 // vmull.s8 q7, d28, d20
	WORD $0xf28de8a5 // vmlal.s8 q7, d29, d21
	WORD $0xf29e2245 // vmlal.s16 q1, d14, d5[0]
	WORD $0xf29f2245 // vmlal.s16 q1, d15, d5[0]
	WORD $0xf28eeca6 // vmull.s8 q7, d30, d22
	WORD $0xf28fe8a7 // vmlal.s8 q7, d31, d23
	WORD $0xf29e224d // vmlal.s16 q1, d14, d5[1]
	WORD $0xf29f224d // vmlal.s16 q1, d15, d5[1]
	ADD  $32, R0, R3
	WORD $0xf463020f // vld1.8 {d16, d17, d18, d19}, [r3]
	// Run 1: groups 2, 3.
	ADD  $36, R1, R3
	WORD $0xf463420f // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf240c1d8 // vand q14, q8, q4
	WORD $0xf242e1d8 // vand q15, q9, q4
	WORD $0xf28ae578 // vshl.i8 q7, q12, #2
	WORD $0xf36ec15a // vbit q14, q7, q5
	WORD $0xf28ae57a // vshl.i8 q7, q13, #2
	WORD $0xf36ee15a // vbit q15, q7, q5
	WORD $0xf34cc8cc // vsub.i8 q14, q14, q6
	WORD $0xf34ee8cc // vsub.i8 q15, q15, q6
	WORD $0xf28ceca4 // vmull.s8 q7, d28, d20
	WORD $0xf28de8a5 // vmlal.s8 q7, d29, d21
	WORD $0xf29e2264 // vmlal.s16 q1, d14, d4[2]
	WORD $0xf29f2264 // vmlal.s16 q1, d15, d4[2]
	WORD $0xf28eeca6 // vmull.s8 q7, d30, d22
	WORD $0xf28fe8a7 // vmlal.s8 q7, d31, d23
	WORD $0xf29e226c // vmlal.s16 q1, d14, d4[3]
	WORD $0xf29f226c // vmlal.s16 q1, d15, d4[3]
	// Run 3: groups 6, 7.
	ADD  $100, R1, R3
	WORD $0xf463420f // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf3ccc070 // vshr.u8 q14, q8, #4
	WORD $0xf3cce072 // vshr.u8 q15, q9, #4
	WORD $0xf38ee078 // vshr.u8 q7, q12, #2
	WORD $0xf36ec15a // vbit q14, q7, q5
	WORD $0xf38ee07a // vshr.u8 q7, q13, #2
	WORD $0xf36ee15a // vbit q15, q7, q5
	WORD $0xf34cc8cc // vsub.i8 q14, q14, q6
	WORD $0xf34ee8cc // vsub.i8 q15, q15, q6
	WORD $0xf28ceca4 // vmull.s8 q7, d28, d20
	WORD $0xf28de8a5 // vmlal.s8 q7, d29, d21
	WORD $0xf29e2265 // vmlal.s16 q1, d14, d5[2]
	WORD $0xf29f2265 // vmlal.s16 q1, d15, d5[2]
	WORD $0xf28eeca6 // vmull.s8 q7, d30, d22
	WORD $0xf28fe8a7 // vmlal.s8 q7, d31, d23
	WORD $0xf29e226d // vmlal.s16 q1, d14, d5[3]
	WORD $0xf29f226d // vmlal.s16 q1, d15, d5[3]
	// Half 1: plane H, then A (runs 0, 2), then B (runs 1, 3).
	ADD  $160, R0, R3
	WORD $0xf463820f // vld1.8 {d24, d25, d26, d27}, [r3]
	ADD  $64, R0, R3
	WORD $0xf463020f // vld1.8 {d16, d17, d18, d19}, [r3]
	// Run 0: groups 8, 9.
	ADD  $132, R1, R3
	WORD $0xf463420f // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf240c1d8 // vand q14, q8, q4
	WORD $0xf242e1d8 // vand q15, q9, q4
	WORD $0xf28ce578 // vshl.i8 q7, q12, #4
	WORD $0xf36ec15a // vbit q14, q7, q5
	WORD $0xf28ce57a // vshl.i8 q7, q13, #4
	WORD $0xf36ee15a // vbit q15, q7, q5
	WORD $0xf34cc8cc // vsub.i8 q14, q14, q6
	WORD $0xf34ee8cc // vsub.i8 q15, q15, q6
	WORD $0xf28ceca4 // vmull.s8 q7, d28, d20
	WORD $0xf28de8a5 // vmlal.s8 q7, d29, d21
	WORD $0xf29e2246 // vmlal.s16 q1, d14, d6[0]
	WORD $0xf29f2246 // vmlal.s16 q1, d15, d6[0]
	WORD $0xf28eeca6 // vmull.s8 q7, d30, d22
	WORD $0xf28fe8a7 // vmlal.s8 q7, d31, d23
	WORD $0xf29e224e // vmlal.s16 q1, d14, d6[1]
	WORD $0xf29f224e // vmlal.s16 q1, d15, d6[1]
	// Run 2: groups 12, 13.
	ADD  $196, R1, R3
	WORD $0xf463420f // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf3ccc070 // vshr.u8 q14, q8, #4
	WORD $0xf3cce072 // vshr.u8 q15, q9, #4
	WORD $0xf368c1da // vbit q14, q12, q5
	WORD $0xf36ae1da // vbit q15, q13, q5
	WORD $0xf34cc8cc // vsub.i8 q14, q14, q6
	WORD $0xf34ee8cc // vsub.i8 q15, q15, q6
	WORD $0xf28ceca4 // vmull.s8 q7, d28, d20
	WORD $0xf28de8a5 // vmlal.s8 q7, d29, d21
	WORD $0xf29e2247 // vmlal.s16 q1, d14, d7[0]
	WORD $0xf29f2247 // vmlal.s16 q1, d15, d7[0]
	WORD $0xf28eeca6 // vmull.s8 q7, d30, d22
	WORD $0xf28fe8a7 // vmlal.s8 q7, d31, d23
	WORD $0xf29e224f // vmlal.s16 q1, d14, d7[1]
	WORD $0xf29f224f // vmlal.s16 q1, d15, d7[1]
	ADD  $96, R0, R3
	WORD $0xf463020f // vld1.8 {d16, d17, d18, d19}, [r3]
	// Run 1: groups 10, 11.
	ADD  $164, R1, R3
	WORD $0xf463420f // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf240c1d8 // vand q14, q8, q4
	WORD $0xf242e1d8 // vand q15, q9, q4
	WORD $0xf28ae578 // vshl.i8 q7, q12, #2
	WORD $0xf36ec15a // vbit q14, q7, q5
	WORD $0xf28ae57a // vshl.i8 q7, q13, #2
	WORD $0xf36ee15a // vbit q15, q7, q5
	WORD $0xf34cc8cc // vsub.i8 q14, q14, q6
	WORD $0xf34ee8cc // vsub.i8 q15, q15, q6
	WORD $0xf28ceca4 // vmull.s8 q7, d28, d20
	WORD $0xf28de8a5 // vmlal.s8 q7, d29, d21
	WORD $0xf29e2266 // vmlal.s16 q1, d14, d6[2]
	WORD $0xf29f2266 // vmlal.s16 q1, d15, d6[2]
	WORD $0xf28eeca6 // vmull.s8 q7, d30, d22
	WORD $0xf28fe8a7 // vmlal.s8 q7, d31, d23
	WORD $0xf29e226e // vmlal.s16 q1, d14, d6[3]
	WORD $0xf29f226e // vmlal.s16 q1, d15, d6[3]
	// Run 3: groups 14, 15.
	ADD  $228, R1, R3
	WORD $0xf463420f // vld1.8 {d20, d21, d22, d23}, [r3]
	WORD $0xf3ccc070 // vshr.u8 q14, q8, #4
	WORD $0xf3cce072 // vshr.u8 q15, q9, #4
	WORD $0xf38ee078 // vshr.u8 q7, q12, #2
	WORD $0xf36ec15a // vbit q14, q7, q5
	WORD $0xf38ee07a // vshr.u8 q7, q13, #2
	WORD $0xf36ee15a // vbit q15, q7, q5
	WORD $0xf34cc8cc // vsub.i8 q14, q14, q6
	WORD $0xf34ee8cc // vsub.i8 q15, q15, q6
	WORD $0xf28ceca4 // vmull.s8 q7, d28, d20
	WORD $0xf28de8a5 // vmlal.s8 q7, d29, d21
	WORD $0xf29e2267 // vmlal.s16 q1, d14, d7[2]
	WORD $0xf29f2267 // vmlal.s16 q1, d15, d7[2]
	WORD $0xf28eeca6 // vmull.s8 q7, d30, d22
	WORD $0xf28fe8a7 // vmlal.s8 q7, d31, d23
	WORD $0xf29e226f // vmlal.s16 q1, d14, d7[3]
	WORD $0xf29f226f // vmlal.s16 q1, d15, d7[3]
	// acc += float32(d·dx)·float32(isum).
	WORD $0xf2222b13 // vpadd.i32 d2, d2, d3
	WORD $0xf2222b12 // vpadd.i32 d2, d2, d2
	MOVW (R1), R4
	WORD $0xee004a90 // vmov s1, r4
	F16_BITS(208)
	WORD $0xee017a10 // vmov s2, r7
	WORD $0xee211a20 // vmul.f32 s2, s2, s1
	WORD $0xeeb82ac2 // vcvt.f32.s32 s4, s4
	WORD $0xee211a02 // vmul.f32 s2, s2, s4
	WORD $0xee300a01 // vadd.f32 s0, s0, s2
	ADD  $210, R0
	ADD  $292, R1
	SUB.S $1, R2
	BNE  q6kloop
q6kdone:
	WORD $0xee104a10 // vmov r4, s0
	MOVW R4, ret+12(FP)
	RET


// func f16BitsARM(p *byte) uint32
TEXT ·f16BitsARM(SB), NOSPLIT, $0-8
	MOVW p+0(FP), R0
	F16_BITS(0)
	MOVW R7, ret+4(FP)
	RET
