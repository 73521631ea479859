#include "textflag.h"

// The integer dot products on arm64 (NEON). Q8_0 first, the same operations
// as dotQ8_0Go (qdot.go): per 32-value block, eight int32 lanes of four
// consecutive products, scaled by float32(dw·dx) and accumulated as float32,
// then reduced ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)). The Go assembler has
// no mnemonics for the integer multiplies, the vector float arithmetic or
// the half-precision conversion, so those are encoded as WORDs; each is
// annotated with its instruction.

// Vd, Vn, Vm register fields.
#define RD(d) (d)
#define RN(n) ((n)<<5)
#define RM(m) ((m)<<16)

// ARGS3 loads (w, x, nb) into R0, R1, R2 and clears the lane sums V16, V17.
#define ARGS3 \
	MOVD w+0(FP), R0; \
	MOVD x+8(FP), R1; \
	MOVD nb+16(FP), R2; \
	VEOR V16.B16, V16.B16, V16.B16; \
	VEOR V17.B16, V17.B16, V17.B16

// LOAD_Q8_0 loads a Q8_0 block's quants into V2, V3 and the activations into V4, V5.
#define LOAD_Q8_0 \
	ADD  $2, R0, R5; \
	ADD  $8, R1, R6; \
	VLD1 (R5), [V2.B16, V3.B16]; \
	VLD1 (R6), [V4.B16, V5.B16]

// NEXT_Q8_0 steps to the next block and loops to label while blocks remain.
#define NEXT_Q8_0(label) \
	ADD  $34, R0; \
	ADD  $40, R1; \
	SUBS $1, R2; \
	BNE  label

// f16 at (R0) → F0, times the float32 at (R1): dd in S0.
#define BLOCK_SCALE \
	MOVHU (R0), R4; \
	FMOVS R4, F0; \ // f16 bits in H0 (FMOV H0, W4 needs FEAT_FP16: not on A53/A72)
	WORD  $(0x1EE24000|RN(0)|RD(0)); \ // FCVT S0, H0
	FMOVS (R1), F1; \
	FMULS F1, F0, F0

// ACC_INTO: V6, V7 (int32 lanes 0-3, 4-7) → float, times dd (S0), added to
// V(a), V(b).
#define ACC_INTO(a, b) \
	WORD $(0x4E21D800|RN(6)|RD(6)); \       // SCVTF V6.4S, V6.4S
	WORD $(0x4E21D800|RN(7)|RD(7)); \       // SCVTF V7.4S, V7.4S
	VDUP V0.S[0], V8.S4; \
	WORD $(0x6E20DC00|RM(8)|RN(6)|RD(6)); \ // FMUL V6.4S, V6.4S, V8.4S
	WORD $(0x6E20DC00|RM(8)|RN(7)|RD(7)); \ // FMUL V7.4S, V7.4S, V8.4S
	WORD $(0x4E20D400|RM(6)|RN(a)|RD(a)); \ // FADD Va.4S, Va.4S, V6.4S
	WORD $(0x4E20D400|RM(7)|RN(b)|RD(b))     // FADD Vb.4S, Vb.4S, V7.4S

#define BLOCK_ACC ACC_INTO(16, 17)

// REDUCE_FROM: V(a), V(b) (lanes 0-3, 4-7) → the REDUCE8 sum in F18.
#define REDUCE_FROM(a, b) \
	WORD  $(0x4E20D400|RM(b)|RN(a)|RD(18)); \ // FADD V18.4S, Va.4S, Vb.4S
	WORD  $(0x6E20D400|RM(18)|RN(18)|RD(18)); \ // FADDP V18.4S, V18.4S, V18.4S
	WORD  $(0x7E30D800|RN(18)|RD(18))            // FADDP S18, V18.2S

#define REDUCE_LANES REDUCE_FROM(16, 17)

// FINISH returns the REDUCE8 sum.
#define FINISH \
	REDUCE_LANES; \
	FMOVS F18, ret+24(FP); \
	RET

// DOTS_SDOT: the int32 lanes of the 32 weight bytes in V2, V3 times the
// activations in V4, V5: values 0-15 in V6, 16-31 in V7.
#define DOTS_SDOT \
	VEOR V6.B16, V6.B16, V6.B16; \
	VEOR V7.B16, V7.B16, V7.B16; \
	WORD $(0x4E809400|RM(4)|RN(2)|RD(6)); \ // SDOT V6.4S, V2.16B, V4.16B
	WORD $(0x4E809400|RM(5)|RN(3)|RD(7)) // SDOT V7.4S, V3.16B, V5.16B

// DOTS_NEON: the same lanes with base NEON: SMULL/SMULL2 give int16
// products, SADDLP sums pairs into int32 and ADDP pairs of pairs, so lane l
// again holds values 4l…4l+3.
#define DOTS_NEON \
	WORD $(0x0E20C000|RM(4)|RN(2)|RD(10)); \ // SMULL  V10.8H, V2.8B, V4.8B
	WORD $(0x4E20C000|RM(4)|RN(2)|RD(11)); \ // SMULL2 V11.8H, V2.16B, V4.16B
	WORD $(0x0E20C000|RM(5)|RN(3)|RD(12)); \ // SMULL  V12.8H, V3.8B, V5.8B
	WORD $(0x4E20C000|RM(5)|RN(3)|RD(13)); \ // SMULL2 V13.8H, V3.16B, V5.16B
	WORD $(0x4E602800|RN(10)|RD(10)); \ // SADDLP V10.4S, V10.8H
	WORD $(0x4E602800|RN(11)|RD(11)); \ // SADDLP V11.4S, V11.8H
	WORD $(0x4E602800|RN(12)|RD(12)); \ // SADDLP V12.4S, V12.8H
	WORD $(0x4E602800|RN(13)|RD(13)); \ // SADDLP V13.4S, V13.8H
	WORD $(0x4EA0BC00|RM(11)|RN(10)|RD(6)); \ // ADDP V6.4S, V10.4S, V11.4S
	WORD $(0x4EA0BC00|RM(13)|RN(12)|RD(7)) // ADDP V7.4S, V12.4S, V13.4S

// func dotQ8_0SDOT(w, x *byte, nb int) float32
//
// With the dot-product extension (ARMv8.2 SDOT): each SDOT gives four lanes
// of four consecutive products.
TEXT ·dotQ8_0SDOT(SB), NOSPLIT, $0-28
	ARGS3
	CBZ  R2, sdotdone

sdotloop:
	LOAD_Q8_0
	DOTS_SDOT
	BLOCK_SCALE
	BLOCK_ACC
	NEXT_Q8_0(sdotloop)

sdotdone:
	FINISH

// func dotQ8_0NEON(w, x *byte, nb int) float32
//
// Base ARMv8 NEON (DOTS_NEON).
TEXT ·dotQ8_0NEON(SB), NOSPLIT, $0-28
	ARGS3
	CBZ  R2, neondone

neonloop:
	LOAD_Q8_0
	DOTS_NEON
	BLOCK_SCALE
	BLOCK_ACC
	NEXT_Q8_0(neonloop)

neondone:
	FINISH

// The K-quant kernels follow dotK (qdot.go): per super-block an exact int32
// Σ scale·Σq·x (group sums by SDOT, or by SMULL/SMLAL/SADDLP on CPUs without
// the dot-product extension, then ADDV; scaled in general registers) and the
// float steps acc += float32(d·dx)·isum (and acc −= float32(dmin·dx)·msum),
// as the Go kernel does them. The integer sums are exact in any order, so
// the SDOT and base-NEON variants give the same bits. Each kernel is written
// once, as macros (Q4K_BLOCK, Q6K_BLOCK) that call Q4K_DOTS and Q6K_DOT;
// those two are defined before each variant's TEXT and undefined after it
// (the assembler expands nested macros where they are used).

// F16_TIMES_DX: float32(f16 at hoff(R0)) · dx (the float32 at (R1)) into F0.
#define F16_TIMES_DX(hoff) \
	MOVHU hoff(R0), R9; \
	FMOVS R9, F0; \ // f16 bits in H0, as in BLOCK_SCALE
	WORD  $(0x1EE24000|RN(0)|RD(0)); \ // FCVT S0, H0
	FMOVS (R1), F2; \
	FMULS F2, F0, F0

// SCALED_INTO_ACC: F20 op= float32(f16 at hoff · dx) · float32(ireg).
#define SCALED_INTO_ACC(hoff, ireg, op) \
	F16_TIMES_DX(hoff); \
	SCVTFWS ireg, F1; \
	FMULS   F1, F0, F0; \
	op      F0, F20, F20

// SUBSUM: the int32 sum of the four lanes of v into reg.
#define SUBSUM(v, reg) \
	VADDV v.S4, v; \
	VMOV  v.S[0], reg

// Q4K_SCALE: isum (R13) += (byte sh/8 of sreg) · sub-block sum in reg.
#define Q4K_SCALE(sreg, sh, reg) \
	LSRW $sh, sreg, R15; \
	ANDW $0xff, R15, R15; \
	MULW R15, reg, reg; \
	ADDW reg, R13, R13

// Q4K_MIN: msum (R12) += (byte sh/8 of mreg) · (bsum at boff + bsum at boff2).
#define Q4K_MIN(mreg, sh, boff, boff2) \
	LSRW $sh, mreg, R15; \
	ANDW $0xff, R15, R15; \
	MOVH boff(R1), R14; \
	MOVH boff2(R1), R3; \
	ADD  R3, R14, R14; \
	MULW R15, R14, R14; \
	ADDW R14, R12, R12

// Q4K_PLANE: the 64 values of one 32-byte quant plane at qoff (low nibbles:
// sub-block 2jj, high: 2jj+1) against the activations at xoff, into isum
// with the scales in bytes sh/8 and sh/8+1 of sreg.
#define Q4K_PLANE(hi, qoff, xoff, sreg, sh, sh1) \
	ADD  $qoff, R0, R3; \
	VLD1 (R3), [V0.B16, V1.B16]; \
	ADD  $xoff, R1, R3; \
	VLD1 (R3), [V4.B16, V5.B16, V6.B16, V7.B16]; \
	VAND V31.B16, V0.B16, V2.B16; \
	VAND V31.B16, V1.B16, V3.B16; \
	VUSHR $4, V0.B16, V0.B16; \
	VUSHR $4, V1.B16, V1.B16; \
	hi; \
	Q4K_DOTS; \
	SUBSUM(V8, R9); \
	SUBSUM(V9, R14); \
	Q4K_SCALE(sreg, sh, R9); \
	Q4K_SCALE(sreg, sh1, R14)

// K_ARGS loads (w, x, nb) into R0, R1, R2, clears the float sum F20 and
// sets the nibble masks V31 (0x0F) and V30 (0x30).
#define K_ARGS \
	MOVD w+0(FP), R0; \
	MOVD x+8(FP), R1; \
	MOVD nb+16(FP), R2; \
	VEOR V20.B16, V20.B16, V20.B16; \
	VMOVI $15, V31.B16; \
	VMOVI $48, V30.B16

// K_NEXT steps past one weight super-block of wb bytes and one activation
// super-block, and loops to label while blocks remain.
#define K_NEXT(wb, label) \
	ADD  $wb, R0; \
	ADD  $292, R1; \
	SUBS $1, R2; \
	BNE  label

// K_KERNEL is a K-quant kernel's body: block (a macro taking one super-block
// of wb weight bytes into F20) over the nb blocks, then F20 returned.
#define K_KERNEL(block, wb) \
	K_ARGS; \
	CBZ  R2, kdone; \
kloop: \
	block; \
	K_NEXT(wb, kloop); \
kdone: \
	FMOVS F20, ret+24(FP); \
	RET

// Q4K_BLOCK: one Q4_K super-block into F20: unpack the 6-bit scales and
// mins, msum from the activation group sums, isum over the four planes
// (quants at qb; Q5_K's fifth bits loaded by qh and ORed in by hi).
#define QK45_BLOCK(hi, qh, qb) \
	MOVWU 4(R0), R4; \
	MOVWU 8(R0), R5; \
	MOVWU 12(R0), R6; \
	ANDW $0x3f3f3f3f, R4, R7; \ // scales 0-3
	ANDW $0x0f0f0f0f, R6, R8; \
	LSRW $6, R4, R9; \
	ANDW $0x03030303, R9, R9; \
	ORRW R9<<4, R8, R8; \ // scales 4-7
	ANDW $0x3f3f3f3f, R5, R10; \ // mins 0-3
	LSRW $4, R6, R11; \
	ANDW $0x0f0f0f0f, R11, R11; \
	LSRW $6, R5, R9; \
	ANDW $0x03030303, R9, R9; \
	ORRW R9<<4, R11, R11; \ // mins 4-7
	MOVW ZR, R12; \
	MOVW ZR, R13; \
	Q4K_MIN(R10, 0, 260, 262); \
	Q4K_MIN(R10, 8, 264, 266); \
	Q4K_MIN(R10, 16, 268, 270); \
	Q4K_MIN(R10, 24, 272, 274); \
	Q4K_MIN(R11, 0, 276, 278); \
	Q4K_MIN(R11, 8, 280, 282); \
	Q4K_MIN(R11, 16, 284, 286); \
	Q4K_MIN(R11, 24, 288, 290); \
	qh; \
	Q4K_PLANE(hi, qb, 4, R7, 0, 8); \
	Q4K_PLANE(hi, qb+32, 68, R7, 16, 24); \
	Q4K_PLANE(hi, qb+64, 132, R8, 0, 8); \
	Q4K_PLANE(hi, qb+96, 196, R8, 16, 24); \
	SCALED_INTO_ACC(0, R13, FADDS); \
	SCALED_INTO_ACC(2, R12, FSUBS)

#define NO_HI
#define NO_QH
#define Q4K_BLOCK QK45_BLOCK(NO_HI, NO_QH, 16)

// Q5K_QH loads Q5_K's 32 qh bytes (at 16) into V22, V23 and 0x10 bytes into V29.
#define Q5K_QH \
	ADD   $16, R0, R3; \
	VLD1  (R3), [V22.B16, V23.B16]; \
	VMOVI $16, V29.B16

// Q5K_HI ORs a plane's fifth bits, 16 where set, into its quants (bit 0 of
// V22/V23 into V2/V3, bit 1 into V0/V1), then moves the next plane's to
// bits 0-1. Clobbers V26, V27.
#define Q5K_HI \
	VSHL  $4, V22.B16, V26.B16; \
	VSHL  $4, V23.B16, V27.B16; \
	VAND  V29.B16, V26.B16, V26.B16; \
	VAND  V29.B16, V27.B16, V27.B16; \
	VORR  V26.B16, V2.B16, V2.B16; \
	VORR  V27.B16, V3.B16, V3.B16; \
	VSHL  $3, V22.B16, V26.B16; \
	VSHL  $3, V23.B16, V27.B16; \
	VAND  V29.B16, V26.B16, V26.B16; \
	VAND  V29.B16, V27.B16, V27.B16; \
	VORR  V26.B16, V0.B16, V0.B16; \
	VORR  V27.B16, V1.B16, V1.B16; \
	VUSHR $2, V22.B16, V22.B16; \
	VUSHR $2, V23.B16, V23.B16

// Q5K_BLOCK: one Q5_K super-block (176 bytes: Q4_K's with qh at 16, quants at 48).
#define Q5K_BLOCK QK45_BLOCK(Q5K_HI, Q5K_QH, 48)

// func dotQ4KSDOT(w, x *byte, nb int) float32
TEXT ·dotQ4KSDOT(SB), NOSPLIT, $0-28
// Q4K_DOTS: V8 = lanes of V2·V4 + V3·V5, V9 = lanes of V0·V6 + V1·V7.
#define Q4K_DOTS \
	VEOR V8.B16, V8.B16, V8.B16; \
	VEOR V9.B16, V9.B16, V9.B16; \
	WORD $(0x4E809400|RM(4)|RN(2)|RD(8)); \ // SDOT V8.4S, V2.16B, V4.16B
	WORD $(0x4E809400|RM(5)|RN(3)|RD(8)); \ // SDOT V8.4S, V3.16B, V5.16B
	WORD $(0x4E809400|RM(6)|RN(0)|RD(9)); \ // SDOT V9.4S, V0.16B, V6.16B
	WORD $(0x4E809400|RM(7)|RN(1)|RD(9))     // SDOT V9.4S, V1.16B, V7.16B
	K_KERNEL(Q4K_BLOCK, 144)

// func dotQ5KSDOT(w, x *byte, nb int) float32
TEXT ·dotQ5KSDOT(SB), NOSPLIT, $0-28
	K_KERNEL(Q5K_BLOCK, 176)
#undef Q4K_DOTS

// func dotQ4KNEON(w, x *byte, nb int) float32
//
// Base NEON: SMULL/SMLAL(2) sum four products per int16 lane (|q·x| ≤
// 15·128, so at most 7,680: exact), SADDLP widens pairs to int32.
TEXT ·dotQ4KNEON(SB), NOSPLIT, $0-28
#define Q4K_DOTS \
	WORD $(0x0E20C000|RM(4)|RN(2)|RD(24)); \ // SMULL  V24.8H, V2.8B, V4.8B
	WORD $(0x4E208000|RM(4)|RN(2)|RD(24)); \ // SMLAL2 V24.8H, V2.16B, V4.16B
	WORD $(0x0E208000|RM(5)|RN(3)|RD(24)); \ // SMLAL  V24.8H, V3.8B, V5.8B
	WORD $(0x4E208000|RM(5)|RN(3)|RD(24)); \ // SMLAL2 V24.8H, V3.16B, V5.16B
	WORD $(0x0E20C000|RM(6)|RN(0)|RD(25)); \ // SMULL  V25.8H, V0.8B, V6.8B
	WORD $(0x4E208000|RM(6)|RN(0)|RD(25)); \ // SMLAL2 V25.8H, V0.16B, V6.16B
	WORD $(0x0E208000|RM(7)|RN(1)|RD(25)); \ // SMLAL  V25.8H, V1.8B, V7.8B
	WORD $(0x4E208000|RM(7)|RN(1)|RD(25)); \ // SMLAL2 V25.8H, V1.16B, V7.16B
	WORD $(0x4E602800|RN(24)|RD(8)); \       // SADDLP V8.4S, V24.8H
	WORD $(0x4E602800|RN(25)|RD(9))           // SADDLP V9.4S, V25.8H
	K_KERNEL(Q4K_BLOCK, 144)

// func dotQ5KNEON(w, x *byte, nb int) float32
//
// Q5_K's quants are at most 31: four products per int16 lane stay within
// 4·31·128 = 15,872.
TEXT ·dotQ5KNEON(SB), NOSPLIT, $0-28
	K_KERNEL(Q5K_BLOCK, 176)
#undef Q4K_DOTS

// Q6K_GROUP: isum (R13) += sc_g · (Σ_g q'·x − 32·bsum_g), q' = q+32, for
// the 16 quants in V16 against activations in xv (Q6K_DOT: the lanes of V16·xv into V24).
#define Q6K_GROUP(xv, boff, soff) \
	Q6K_DOT(xv); \
	SUBSUM(V24, R9); \
	MOVH boff(R1), R14; \
	SUBW R14<<5, R9, R9; \
	MOVB soff(R0), R15; \
	MULW R15, R9, R9; \
	ADDW R9, R13, R13

// Q6K_RUNj puts in V16 the 16 quants q' = low 4 bits | high 2 bits << 4 of
// run j (0-3) of a half: low bits from lo (0x0F mask or >> 4), high bits
// from qh (<< 4, << 2, in place, >> 2), masked with V30 (0x30).
#define Q6K_HI(qh) \
	VAND V30.B16, V17.B16, V17.B16; \
	VORR V17.B16, V16.B16, V16.B16

#define Q6K_RUN0(lo, qh) \
	VAND V31.B16, lo.B16, V16.B16; \
	VSHL $4, qh.B16, V17.B16; \
	Q6K_HI(qh)

#define Q6K_RUN1(lo, qh) \
	VAND V31.B16, lo.B16, V16.B16; \
	VSHL $2, qh.B16, V17.B16; \
	Q6K_HI(qh)

#define Q6K_RUN2(lo, qh) \
	VUSHR $4, lo.B16, V16.B16; \
	VORR qh.B16, qh.B16, V17.B16; \
	Q6K_HI(qh)

#define Q6K_RUN3(lo, qh) \
	VUSHR $4, lo.B16, V16.B16; \
	VUSHR $2, qh.B16, V17.B16; \
	Q6K_HI(qh)

// Q6K_LOAD loads a half: ql planes to V0-V3, qh to V4-V5, its 128
// activations to V8-V15.
#define Q6K_LOAD(ql, qh, xo) \
	ADD  $ql, R0, R3; \
	VLD1 (R3), [V0.B16, V1.B16, V2.B16, V3.B16]; \
	ADD  $qh, R0, R3; \
	VLD1 (R3), [V4.B16, V5.B16]; \
	ADD  $xo, R1, R3; \
	VLD1.P 64(R3), [V8.B16, V9.B16, V10.B16, V11.B16]; \
	VLD1 (R3), [V12.B16, V13.B16, V14.B16, V15.B16]

// Q6K_BLOCK: one Q6_K super-block into F20, two halves of 128 values.
#define Q6K_BLOCK \
	MOVW ZR, R13; \
	Q6K_LOAD(0, 128, 4); \
	Q6K_RUN0(V0, V4); \
	Q6K_GROUP(8, 260, 192); \
	Q6K_RUN0(V1, V5); \
	Q6K_GROUP(9, 262, 193); \
	Q6K_RUN1(V2, V4); \
	Q6K_GROUP(10, 264, 194); \
	Q6K_RUN1(V3, V5); \
	Q6K_GROUP(11, 266, 195); \
	Q6K_RUN2(V0, V4); \
	Q6K_GROUP(12, 268, 196); \
	Q6K_RUN2(V1, V5); \
	Q6K_GROUP(13, 270, 197); \
	Q6K_RUN3(V2, V4); \
	Q6K_GROUP(14, 272, 198); \
	Q6K_RUN3(V3, V5); \
	Q6K_GROUP(15, 274, 199); \
	Q6K_LOAD(64, 160, 132); \
	Q6K_RUN0(V0, V4); \
	Q6K_GROUP(8, 276, 200); \
	Q6K_RUN0(V1, V5); \
	Q6K_GROUP(9, 278, 201); \
	Q6K_RUN1(V2, V4); \
	Q6K_GROUP(10, 280, 202); \
	Q6K_RUN1(V3, V5); \
	Q6K_GROUP(11, 282, 203); \
	Q6K_RUN2(V0, V4); \
	Q6K_GROUP(12, 284, 204); \
	Q6K_RUN2(V1, V5); \
	Q6K_GROUP(13, 286, 205); \
	Q6K_RUN3(V2, V4); \
	Q6K_GROUP(14, 288, 206); \
	Q6K_RUN3(V3, V5); \
	Q6K_GROUP(15, 290, 207); \
	SCALED_INTO_ACC(208, R13, FADDS)

// Q2_K (84 bytes) and Q3_K (110 bytes) reuse Q6K_DOT: 2-bit quants from
// two 32-byte planes (run j of a half is bits 2j, 2j+1; its first 16 bytes
// are group 8h+2j, the next 16 group 8h+2j+1), against the half's
// activations in V8-V15 (K2_LOAD). Q2_K: isum (R13) += sc_g·Σq·x and msum
// (R12) += m_g·bsum_g with sc, m the nibbles of byte g. Q3_K: q' = q2 |
// hmask bit << 2 (bit k of hmask byte l for run k = 4h+j) and isum +=
// sc_g·(Σq'·x − 4·bsum_g), sc_g gguf.ScalesQ3K's (unpacked four a word
// into R19-R22). V28 holds 0x03 bytes, V27 0x04.

// K2_LOAD: the plane at qoff to V0, V1 and the half's 128 activations from xo to V8-V15.
#define K2_LOAD(qoff, xo) \
	ADD    $qoff, R0, R3; \
	VLD1   (R3), [V0.B16, V1.B16]; \
	ADD    $xo, R1, R3; \
	VLD1.P 64(R3), [V8.B16, V9.B16, V10.B16, V11.B16]; \
	VLD1   (R3), [V12.B16, V13.B16, V14.B16, V15.B16]

// K2_Q: the 2-bit quants at bits 0-1 of src in V16 (each run shifts the
// plane by 2 for the next).
#define K2_Q(src) VAND V28.B16, src.B16, V16.B16

#define K2_NEXT \
	VUSHR $2, V0.B16, V0.B16; \
	VUSHR $2, V1.B16, V1.B16

#define K2_CONSTS \
	VMOVI $3, V28.B16; \
	VMOVI $4, V27.B16

// Q2K_GROUP: group g's products (quants in V16, activations in xv) into isum and msum.
#define Q2K_GROUP(xv, g, boff) \
	Q6K_DOT(xv); \
	SUBSUM(V24, R9); \
	MOVBU g(R0), R10; \
	ANDW  $15, R10, R11; \
	MULW  R11, R9, R9; \
	ADDW  R9, R13, R13; \
	LSRW  $4, R10, R10; \
	MOVH  boff(R1), R14; \
	MULW  R10, R14, R14; \
	ADDW  R14, R12, R12

// Q2K_RUN: the current run of groups g, g+1.
#define Q2K_RUN(xa, xb, g, boff) \
	K2_Q(V0); \
	Q2K_GROUP(xa, g, boff); \
	K2_Q(V1); \
	Q2K_GROUP(xb, g+1, boff+2); \
	K2_NEXT

#define Q2K_HALF(qoff, xo, g, boff) \
	K2_LOAD(qoff, xo); \
	Q2K_RUN(8, 9, g, boff); \
	Q2K_RUN(10, 11, g+2, boff+4); \
	Q2K_RUN(12, 13, g+4, boff+8); \
	Q2K_RUN(14, 15, g+6, boff+12)

// Q2K_BLOCK: one Q2_K super-block into F20.
#define Q2K_BLOCK \
	K2_CONSTS; \
	MOVW ZR, R12; \
	MOVW ZR, R13; \
	Q2K_HALF(16, 4, 0, 260); \
	Q2K_HALF(48, 132, 8, 276); \
	SCALED_INTO_ACC(80, R13, FADDS); \
	SCALED_INTO_ACC(82, R12, FSUBS)

// Q3K_HB ORs the current hmask bit (bit 0 of hm) into V16 as 4.
#define Q3K_HB(hm) \
	VSHL $2, hm.B16, V17.B16; \
	VAND V27.B16, V17.B16, V17.B16; \
	VORR V17.B16, V16.B16, V16.B16

// Q3K_GROUP: group g's products into isum, scale byte sh/8 of sreg less 32.
#define Q3K_GROUP(xv, sreg, sh, boff) \
	Q6K_DOT(xv); \
	SUBSUM(V24, R9); \
	MOVH boff(R1), R14; \
	SUBW R14<<2, R9, R9; \
	LSRW $sh, sreg, R15; \
	ANDW $0xff, R15, R15; \
	SUBW $32, R15, R15; \
	MULW R15, R9, R9; \
	ADDW R9, R13, R13

// Q3K_RUN: the current run, groups with scales in bytes sh, sh+8 of sreg;
// then the next run's quants and hmask bits to bits 0-1 and 0.
#define Q3K_RUN(xa, xb, sreg, sh, boff) \
	K2_Q(V0); \
	Q3K_HB(V4); \
	Q3K_GROUP(xa, sreg, sh, boff); \
	K2_Q(V1); \
	Q3K_HB(V5); \
	Q3K_GROUP(xb, sreg, sh+8, boff+2); \
	K2_NEXT; \
	VUSHR $1, V4.B16, V4.B16; \
	VUSHR $1, V5.B16, V5.B16

#define Q3K_HALF(qoff, xo, sa, sb, boff) \
	K2_LOAD(qoff, xo); \
	Q3K_RUN(8, 9, sa, 0, boff); \
	Q3K_RUN(10, 11, sa, 16, boff+4); \
	Q3K_RUN(12, 13, sb, 0, boff+8); \
	Q3K_RUN(14, 15, sb, 16, boff+12)

// Q3K_SCALE4: dst = the nibbles of lo (shifted by losh) | bits hsh, hsh+1
// of the bytes of R6 as bits 4-5: four scales (plus 32), one a byte.
#define Q3K_SCALE4(lo, losh, hsh, dst) \
	LSRW $losh, lo, dst; \
	ANDW $0x0f0f0f0f, dst, dst; \
	LSRW $hsh, R6, R7; \
	ANDW $0x03030303, R7, R7; \
	ORRW R7<<4, dst, dst

// Q3K_BLOCK: one Q3_K super-block into F20 (hmask in V4, V5).
#define Q3K_BLOCK \
	K2_CONSTS; \
	MOVWU 96(R0), R4; \
	MOVWU 100(R0), R5; \
	MOVWU 104(R0), R6; \
	Q3K_SCALE4(R4, 0, 0, R19); \
	Q3K_SCALE4(R5, 0, 2, R20); \
	Q3K_SCALE4(R4, 4, 4, R21); \
	Q3K_SCALE4(R5, 4, 6, R22); \
	MOVW ZR, R13; \
	VLD1 (R0), [V4.B16, V5.B16]; \
	Q3K_HALF(32, 4, R19, R20, 260); \
	Q3K_HALF(64, 132, R21, R22, 276); \
	SCALED_INTO_ACC(108, R13, FADDS)

// func dotQ6KSDOT(w, x *byte, nb int) float32
TEXT ·dotQ6KSDOT(SB), NOSPLIT, $0-28
#define Q6K_DOT(xv) \
	VEOR V24.B16, V24.B16, V24.B16; \
	WORD $(0x4E809400|RM(xv)|RN(16)|RD(24)) // SDOT V24.4S, V16.16B, Vxv.16B
	K_KERNEL(Q6K_BLOCK, 210)

// func dotQ2KSDOT(w, x *byte, nb int) float32
TEXT ·dotQ2KSDOT(SB), NOSPLIT, $0-28
	K_KERNEL(Q2K_BLOCK, 84)

// func dotQ3KSDOT(w, x *byte, nb int) float32
TEXT ·dotQ3KSDOT(SB), NOSPLIT, $0-28
	K_KERNEL(Q3K_BLOCK, 110)
#undef Q6K_DOT

// func dotQ6KNEON(w, x *byte, nb int) float32
//
// Base NEON: two products per int16 lane (|q'·x| ≤ 63·128, at most 16,128:
// exact), SADDLP widens pairs to int32.
TEXT ·dotQ6KNEON(SB), NOSPLIT, $0-28
#define Q6K_DOT(xv) \
	WORD $(0x0E20C000|RM(xv)|RN(16)|RD(25)); \ // SMULL  V25.8H, V16.8B, Vxv.8B
	WORD $(0x4E208000|RM(xv)|RN(16)|RD(25)); \ // SMLAL2 V25.8H, V16.16B, Vxv.16B
	WORD $(0x4E602800|RN(25)|RD(24))            // SADDLP V24.4S, V25.8H
	K_KERNEL(Q6K_BLOCK, 210)

// func dotQ2KNEON(w, x *byte, nb int) float32
TEXT ·dotQ2KNEON(SB), NOSPLIT, $0-28
	K_KERNEL(Q2K_BLOCK, 84)

// func dotQ3KNEON(w, x *byte, nb int) float32
TEXT ·dotQ3KNEON(SB), NOSPLIT, $0-28
	K_KERNEL(Q3K_BLOCK, 110)
#undef Q6K_DOT

// The other 32-value types (Q4_0, Q4_1, Q5_0, Q5_1), as dot32 (qdot.go)
// does them: each block unpacked to signed bytes, values 0-15 in V2 and
// 16-31 in V3 (low nibbles, then high nibbles; Q5's fifth bit i from qh),
// with Q4_0's 8 or Q5_0's 16 subtracted, then Q8_0's lanes, scale and float
// sums; Q4_1/Q5_1 add float32(m·dx)·Σq to a separate float sum F21, and the
// result is the REDUCE8 sum plus F21 (+0 for the offset types, as in Go).
// Registers: V31 0x0f bytes, V30 the type's byte constant (8 or 16), V25
// the bit of each byte (1, 2, … 128), V26/V27 the byte i/8 indices for TBL.

// q5tbl: V25's bits, then V26's and V27's indices (bytes 0-15 and 16-31).
DATA q5tbl<>+0(SB)/8, $0x8040201008040201
DATA q5tbl<>+8(SB)/8, $0x8040201008040201
DATA q5tbl<>+16(SB)/8, $0x0000000000000000
DATA q5tbl<>+24(SB)/8, $0x0101010101010101
DATA q5tbl<>+32(SB)/8, $0x0202020202020202
DATA q5tbl<>+40(SB)/8, $0x0303030303030303
GLOBL q5tbl<>(SB), RODATA|NOPTR, $48

#define Q4_0_CONSTS \
	VMOVI $15, V31.B16; \
	VMOVI $8, V30.B16

#define Q4_1_CONSTS VMOVI $15, V31.B16

#define Q5_CONSTS \
	VMOVI $15, V31.B16; \
	VMOVI $16, V30.B16; \
	MOVD  $q5tbl<>(SB), R3; \
	VLD1  (R3), [V25.B16, V26.B16, V27.B16]

// NIBBLES: the 16 quant bytes at qoff(R0) as 4-bit values in V2 (low) and V3 (high).
#define NIBBLES(qoff) \
	ADD   $qoff, R0, R5; \
	VLD1  (R5), [V0.B16]; \
	VAND  V31.B16, V0.B16, V2.B16; \
	VUSHR $4, V0.B16, V3.B16

// MINUS_V30: V2, V3 −= the type's offset.
#define MINUS_V30 \
	WORD $(0x6E208400|RM(30)|RN(2)|RD(2)); \ // SUB V2.16B, V2.16B, V30.16B
	WORD $(0x6E208400|RM(30)|RN(3)|RD(3))     // SUB V3.16B, V3.16B, V30.16B

// Q5_HIGH ORs 16 into V2/V3 byte i where bit i of the qh word at hoff(R0) is set.
#define Q5_HIGH(hoff) \
	MOVWU hoff(R0), R4; \
	VMOV  R4, V1.S[0]; \
	VTBL  V26.B16, [V1.B16], V18.B16; \
	VTBL  V27.B16, [V1.B16], V19.B16; \
	WORD  $(0x4E208C00|RM(25)|RN(18)|RD(18)); \ // CMTST V18.16B, V18.16B, V25.16B
	WORD  $(0x4E208C00|RM(25)|RN(19)|RD(19)); \ // CMTST V19.16B, V19.16B, V25.16B
	VAND  V30.B16, V18.B16, V18.B16; \
	VAND  V30.B16, V19.B16, V19.B16; \
	VORR  V18.B16, V2.B16, V2.B16; \
	VORR  V19.B16, V3.B16, V3.B16

#define UNPACK_Q4_0 \
	NIBBLES(2); \
	MINUS_V30

#define UNPACK_Q4_1 NIBBLES(4)

#define UNPACK_Q5_0 \
	NIBBLES(6); \
	Q5_HIGH(2); \
	MINUS_V30

#define UNPACK_Q5_1 \
	NIBBLES(8); \
	Q5_HIGH(4)

// M_TERM: F21 += float32(float32(m·dx)·float32(Σq)), m the f16 at 2(R0).
#define M_TERM \
	F16_TIMES_DX(2); \
	MOVW    4(R1), R4; \
	SCVTFWS R4, F1; \
	FMULS   F1, F0, F0; \
	FADDS   F0, F21, F21

#define NO_M

// Q32_KERNEL is a kernel body over nb blocks of wb bytes; dots is DOTS_SDOT
// or DOTS_NEON.
#define Q32_KERNEL(consts, unpack, dots, mterm, wb) \
	ARGS3; \
	VEOR V21.B16, V21.B16, V21.B16; \
	consts; \
	CBZ  R2, q32done; \
q32loop: \
	unpack; \
	ADD  $8, R1, R6; \
	VLD1 (R6), [V4.B16, V5.B16]; \
	dots; \
	BLOCK_SCALE; \
	BLOCK_ACC; \
	mterm; \
	ADD  $wb, R0; \
	ADD  $40, R1; \
	SUBS $1, R2; \
	BNE  q32loop; \
q32done: \
	REDUCE_LANES; \
	FADDS F21, F18, F18; \
	FMOVS F18, ret+24(FP); \
	RET

// One row against four tokens (Q4_0, Q5_0, Q8_0: the types without a
// min term), for prefill where the CPU has no i8mm: each block is loaded
// and unpacked once for the four tokens, whose activation rows are xstride
// bytes apart. Per token the operations are the one-token kernel's (dd =
// float32(dw·dx), lanes, REDUCE8), so the bits are the same. Registers:
// R1, R8, R9, R10 the tokens' blocks, F9 the weight scale, lane sums
// V16/V17, V20/V21, V22/V23, V28/V29 (the unpacking uses V0-V3, V18, V19,
// V25-V27, V30, V31; the dots V4-V8, V10-V13).

// WEIGHTS_Q8_0: a Q8_0 block's quants into V2, V3.
#define WEIGHTS_Q8_0 \
	ADD  $2, R0, R5; \
	VLD1 (R5), [V2.B16, V3.B16]

#define NO_CONSTS

// X4_TOKEN: the token block at (xr) times the weights in V2, V3 into V(a), V(b).
#define X4_TOKEN(xr, dots, a, b) \
	ADD   $8, xr, R6; \
	VLD1  (R6), [V4.B16, V5.B16]; \
	dots; \
	FMOVS (xr), F1; \
	FMULS F1, F9, F0; \
	ACC_INTO(a, b)

#define Q32X4_KERNEL(consts, unpack, dots, wb) \
	MOVD w+0(FP), R0; \
	MOVD x+8(FP), R1; \
	MOVD xstride+16(FP), R7; \
	MOVD nb+24(FP), R2; \
	ADD  R7, R1, R8; \
	ADD  R7, R8, R9; \
	ADD  R7, R9, R10; \
	VEOR V16.B16, V16.B16, V16.B16; \
	VEOR V17.B16, V17.B16, V17.B16; \
	VEOR V20.B16, V20.B16, V20.B16; \
	VEOR V21.B16, V21.B16, V21.B16; \
	VEOR V22.B16, V22.B16, V22.B16; \
	VEOR V23.B16, V23.B16, V23.B16; \
	VEOR V28.B16, V28.B16, V28.B16; \
	VEOR V29.B16, V29.B16, V29.B16; \
	consts; \
	CBZ  R2, x4done; \
x4loop: \
	unpack; \
	MOVHU (R0), R4; \
	FMOVS R4, F9; \
	WORD  $(0x1EE24000|RN(9)|RD(9)); \ // FCVT S9, H9
	X4_TOKEN(R1, dots, 16, 17); \
	X4_TOKEN(R8, dots, 20, 21); \
	X4_TOKEN(R9, dots, 22, 23); \
	X4_TOKEN(R10, dots, 28, 29); \
	ADD  $wb, R0; \
	ADD  $40, R1; \
	ADD  $40, R8; \
	ADD  $40, R9; \
	ADD  $40, R10; \
	SUBS $1, R2; \
	BNE  x4loop; \
x4done: \
	MOVD  out+32(FP), R5; \
	REDUCE_FROM(16, 17); \
	FMOVS F18, (R5); \
	REDUCE_FROM(20, 21); \
	FMOVS F18, 4(R5); \
	REDUCE_FROM(22, 23); \
	FMOVS F18, 8(R5); \
	REDUCE_FROM(28, 29); \
	FMOVS F18, 12(R5); \
	RET

// func dotQ4_0SDOT(w, x *byte, nb int) float32
TEXT ·dotQ4_0SDOT(SB), NOSPLIT, $0-28
	Q32_KERNEL(Q4_0_CONSTS, UNPACK_Q4_0, DOTS_SDOT, NO_M, 18)

// func dotQ4_0NEON(w, x *byte, nb int) float32
TEXT ·dotQ4_0NEON(SB), NOSPLIT, $0-28
	Q32_KERNEL(Q4_0_CONSTS, UNPACK_Q4_0, DOTS_NEON, NO_M, 18)

// func dotQ4_1SDOT(w, x *byte, nb int) float32
TEXT ·dotQ4_1SDOT(SB), NOSPLIT, $0-28
	Q32_KERNEL(Q4_1_CONSTS, UNPACK_Q4_1, DOTS_SDOT, M_TERM, 20)

// func dotQ4_1NEON(w, x *byte, nb int) float32
TEXT ·dotQ4_1NEON(SB), NOSPLIT, $0-28
	Q32_KERNEL(Q4_1_CONSTS, UNPACK_Q4_1, DOTS_NEON, M_TERM, 20)

// func dotQ5_0SDOT(w, x *byte, nb int) float32
TEXT ·dotQ5_0SDOT(SB), NOSPLIT, $0-28
	Q32_KERNEL(Q5_CONSTS, UNPACK_Q5_0, DOTS_SDOT, NO_M, 22)

// func dotQ5_0NEON(w, x *byte, nb int) float32
TEXT ·dotQ5_0NEON(SB), NOSPLIT, $0-28
	Q32_KERNEL(Q5_CONSTS, UNPACK_Q5_0, DOTS_NEON, NO_M, 22)

// func dotQ5_1SDOT(w, x *byte, nb int) float32
TEXT ·dotQ5_1SDOT(SB), NOSPLIT, $0-28
	Q32_KERNEL(Q5_CONSTS, UNPACK_Q5_1, DOTS_SDOT, M_TERM, 24)

// func dotQ5_1NEON(w, x *byte, nb int) float32
TEXT ·dotQ5_1NEON(SB), NOSPLIT, $0-28
	Q32_KERNEL(Q5_CONSTS, UNPACK_Q5_1, DOTS_NEON, M_TERM, 24)

// func dotQ8_0x4SDOT(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ8_0x4SDOT(SB), NOSPLIT, $0-40
	Q32X4_KERNEL(NO_CONSTS, WEIGHTS_Q8_0, DOTS_SDOT, 34)

// func dotQ8_0x4NEON(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ8_0x4NEON(SB), NOSPLIT, $0-40
	Q32X4_KERNEL(NO_CONSTS, WEIGHTS_Q8_0, DOTS_NEON, 34)

// func dotQ4_0x4SDOT(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ4_0x4SDOT(SB), NOSPLIT, $0-40
	Q32X4_KERNEL(Q4_0_CONSTS, UNPACK_Q4_0, DOTS_SDOT, 18)

// func dotQ4_0x4NEON(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ4_0x4NEON(SB), NOSPLIT, $0-40
	Q32X4_KERNEL(Q4_0_CONSTS, UNPACK_Q4_0, DOTS_NEON, 18)

// func dotQ5_0x4SDOT(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ5_0x4SDOT(SB), NOSPLIT, $0-40
	Q32X4_KERNEL(Q5_CONSTS, UNPACK_Q5_0, DOTS_SDOT, 22)

// func dotQ5_0x4NEON(w, x *byte, xstride, nb int, out *[4]float32)
TEXT ·dotQ5_0x4NEON(SB), NOSPLIT, $0-40
	Q32X4_KERNEL(Q5_CONSTS, UNPACK_Q5_0, DOTS_NEON, 22)
