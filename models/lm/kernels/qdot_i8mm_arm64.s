#include "textflag.h"

// The Q8_0 product of two weight rows and two tokens with the Int8 matrix
// multiply extension (FEAT_I8MM, ARMv8.6: SMMLA). SMMLA multiplies a 2×8
// int8 matrix by the transpose of another into a 2×2 int32 block, so one
// instruction serves two rows and two columns. The Go kernel (dotQ8_0Go)
// scales int32 lanes of four consecutive products, not eight, so to give
// its bits each token's activations enter SMMLA as two "columns" that keep
// one half of an eight-byte chunk each (the other half zeroed): column 0
// gives lane 2k, column 1 lane 2k+1, for both rows at once. Half of SMMLA's
// multiplies are thus spent on zeros; the gain over one SDOT product per
// (row, token) is that each weight block is loaded, interleaved and its f16
// scale converted once for two tokens and each activation block once for
// two rows. Every float step (float32(dw·dx), ·lane, += per lane, REDUCE8)
// is the Go kernel's, element by element. Encodings as in qdot_arm64.s.
// Q4_0 and Q5_0 (which a Q4_K_M recipe writes for every matrix whose width
// is not a multiple of 256: Qwen2.5-0.5B's 896) share this kernel; only the
// unpacking of a block into signed bytes differs.

#define RD(d) (d)
#define RN(n) ((n)<<5)
#define RM(m) ((m)<<16)

// MMLA_ARGS loads the rows' addresses into R0, R1, the tokens' into R2, R3
// and nb into R4.
#define MMLA_ARGS \
	MOVD w+0(FP), R0; \
	MOVD wstride+8(FP), R1; \
	ADD  R0, R1, R1; \
	MOVD x+16(FP), R2; \
	MOVD xstride+24(FP), R3; \
	ADD  R2, R3, R3; \
	MOVD nb+32(FP), R4

// MMLA_NEXT steps both rows by wb bytes and both tokens by xb, and loops
// to label while blocks remain.
#define MMLA_NEXT(wb, xb, label) \
	ADD  $wb, R0; \
	ADD  $wb, R1; \
	ADD  $xb, R2; \
	ADD  $xb, R3; \
	SUBS $1, R4; \
	BNE  label

// DX_PAIR: the tokens' activation scales per lane [t0, t1, t0, t1] in V29.
#define DX_PAIR \
	MOVWU (R2), R12; \
	MOVWU (R3), R13; \
	ORR   R13<<32, R12, R12; \
	VMOV  R12, V29.D[0]; \
	VMOV  R12, V29.D[1]

// FADD4, FSUB4: the .4S vector FADD and FSUB, SCALED_INTO_ACC4's op.
#define FADD4 0x4E20D400
#define FSUB4 0x4EA0D400

// SCALED_INTO_ACC4: V(acc) op= float32(V(f)·dx)·float32(V(i)) per lane,
// dx in V29 (V(f) and V(i) are overwritten).
#define SCALED_INTO_ACC4(f, i, acc, op) \
	WORD $(0x6E20DC00|RM(29)|RN(f)|RD(f)); \ // FMUL Vf.4S, Vf.4S, V29.4S
	WORD $(0x4E21D800|RN(i)|RD(i)); \        // SCVTF Vi.4S, Vi.4S
	WORD $(0x6E20DC00|RM(i)|RN(f)|RD(i)); \  // FMUL Vi.4S, Vf.4S, Vi.4S
	WORD $(op|RM(i)|RN(acc)|RD(acc))         // FADD/FSUB Vacc.4S, Vacc.4S, Vi.4S

// MMLA_TOKEN: one token's activation block at (xr) into the lane sums
// acc0…acc3 (four lanes each: row 0 lanes 2k, 2k+1, row 1 lanes 2k, 2k+1
// for acc k), with V4-V7 the two rows' quants interleaved by eight bytes
// and V28 the weight scales [dw0, dw0, dw1, dw1].
#define MMLA_TOKEN(xr, acc0, acc1, acc2, acc3) \
	ADD   $8, xr, R9; \
	VLD1  (R9), [V8.B16, V9.B16]; \
	VDUP  V8.D[0], V12.D2; \
	VDUP  V8.D[1], V13.D2; \
	VDUP  V9.D[0], V14.D2; \
	VDUP  V9.D[1], V15.D2; \
	VAND  V31.B16, V12.B16, V12.B16; \
	VAND  V31.B16, V13.B16, V13.B16; \
	VAND  V31.B16, V14.B16, V14.B16; \
	VAND  V31.B16, V15.B16, V15.B16; \
	VEOR  V24.B16, V24.B16, V24.B16; \
	VEOR  V25.B16, V25.B16, V25.B16; \
	VEOR  V26.B16, V26.B16, V26.B16; \
	VEOR  V27.B16, V27.B16, V27.B16; \
	WORD  $(0x4E80A400|RM(12)|RN(4)|RD(24)); \ // SMMLA V24.4S, V4.16B, V12.16B
	WORD  $(0x4E80A400|RM(13)|RN(5)|RD(25)); \ // SMMLA V25.4S, V5.16B, V13.16B
	WORD  $(0x4E80A400|RM(14)|RN(6)|RD(26)); \ // SMMLA V26.4S, V6.16B, V14.16B
	WORD  $(0x4E80A400|RM(15)|RN(7)|RD(27)); \ // SMMLA V27.4S, V7.16B, V15.16B
	WORD  $(0x4E21D800|RN(24)|RD(24)); \       // SCVTF V24.4S, V24.4S
	WORD  $(0x4E21D800|RN(25)|RD(25)); \       // SCVTF V25.4S, V25.4S
	WORD  $(0x4E21D800|RN(26)|RD(26)); \       // SCVTF V26.4S, V26.4S
	WORD  $(0x4E21D800|RN(27)|RD(27)); \       // SCVTF V27.4S, V27.4S
	FMOVS (xr), F29; \
	VDUP  V29.S[0], V29.S4; \
	WORD  $(0x6E20DC00|RM(29)|RN(28)|RD(30)); \ // FMUL V30.4S, V28.4S, V29.4S: dd per row
	WORD  $(0x6E20DC00|RM(30)|RN(24)|RD(24)); \ // FMUL V24.4S, V24.4S, V30.4S
	WORD  $(0x6E20DC00|RM(30)|RN(25)|RD(25)); \ // FMUL V25.4S, V25.4S, V30.4S
	WORD  $(0x6E20DC00|RM(30)|RN(26)|RD(26)); \ // FMUL V26.4S, V26.4S, V30.4S
	WORD  $(0x6E20DC00|RM(30)|RN(27)|RD(27)); \ // FMUL V27.4S, V27.4S, V30.4S
	WORD  $(0x4E20D400|RM(24)|RN(acc0)|RD(acc0)); \ // FADD acc0.4S, acc0.4S, V24.4S
	WORD  $(0x4E20D400|RM(25)|RN(acc1)|RD(acc1)); \ // FADD acc1.4S, acc1.4S, V25.4S
	WORD  $(0x4E20D400|RM(26)|RN(acc2)|RD(acc2)); \ // FADD acc2.4S, acc2.4S, V26.4S
	WORD  $(0x4E20D400|RM(27)|RN(acc3)|RD(acc3))    // FADD acc3.4S, acc3.4S, V27.4S

// MMLA_REDUCE: REDUCE8 of both rows' lanes in acc0…acc3 into F(res) (row 0)
// and lane 1 of vres (row 1): acc0+acc2 holds l0+l4, l1+l5 per row,
// acc1+acc3 l2+l6, l3+l7; FADDP pairs them, a last FADD adds the halves.
#define MMLA_REDUCE(acc0, acc1, acc2, acc3, res, vres) \
	WORD $(0x4E20D400|RM(acc2)|RN(acc0)|RD(acc0)); \ // FADD acc0.4S, acc0.4S, acc2.4S
	WORD $(0x4E20D400|RM(acc3)|RN(acc1)|RD(acc1)); \ // FADD acc1.4S, acc1.4S, acc3.4S
	WORD $(0x6E20D400|RM(acc1)|RN(acc0)|RD(res)); \  // FADDP res.4S, acc0.4S, acc1.4S
	VEXT $8, vres.B16, vres.B16, V12.B16; \
	WORD $(0x0E20D400|RM(12)|RN(res)|RD(res))        // FADD res.2S, res.2S, V12.2S

// MMLA32_KERNEL is the body of the 32-value kernels: per block the weight
// scales [dw0, dw0, dw1, dw1] (f16, converted exactly), the two rows'
// quants as signed bytes (load: row 0 values 0-15 in V0, 16-31 in V1, row 1
// in V2, V3), interleaved by eight bytes (V4 = row 0 bytes 0-7, row 1
// bytes 0-7; V5 bytes 8-15; V6 16-23; V7 24-31), then both tokens.
#define MMLA32_KERNEL(load, wb) \
	MMLA_ARGS; \
	MOVD $0x00000000ffffffff, R5; \ // V31: bytes 0-3 of the low half, 4-7 of the high half
	VMOV R5, V31.D[0]; \
	MOVD $0xffffffff00000000, R5; \
	VMOV R5, V31.D[1]; \
	VEOR V16.B16, V16.B16, V16.B16; \
	VEOR V17.B16, V17.B16, V17.B16; \
	VEOR V18.B16, V18.B16, V18.B16; \
	VEOR V19.B16, V19.B16, V19.B16; \
	VEOR V20.B16, V20.B16, V20.B16; \
	VEOR V21.B16, V21.B16, V21.B16; \
	VEOR V22.B16, V22.B16, V22.B16; \
	VEOR V23.B16, V23.B16, V23.B16; \
	CBZ  R4, done; \
loop: \
	MOVHU (R0), R5; \
	MOVHU (R1), R6; \
	ORR   R5<<16, R5, R5; \
	ORR   R6<<16, R6, R6; \
	ORR   R6<<32, R5, R5; \
	FMOVD R5, F28; \
	WORD  $(0x0E217800|RN(28)|RD(28)); \ // FCVTL V28.4S, V28.4H
	load; \
	WORD  $(0x4EC03800|RM(2)|RN(0)|RD(4)); \ // ZIP1 V4.2D, V0.2D, V2.2D
	WORD  $(0x4EC07800|RM(2)|RN(0)|RD(5)); \ // ZIP2 V5.2D, V0.2D, V2.2D
	WORD  $(0x4EC03800|RM(3)|RN(1)|RD(6)); \ // ZIP1 V6.2D, V1.2D, V3.2D
	WORD  $(0x4EC07800|RM(3)|RN(1)|RD(7)); \ // ZIP2 V7.2D, V1.2D, V3.2D
	MMLA_TOKEN(R2, 16, 17, 18, 19); \
	MMLA_TOKEN(R3, 20, 21, 22, 23); \
	MMLA_NEXT(wb, 40, loop); \
done: \
	MOVD out+40(FP), R5; \
	MMLA_REDUCE(16, 17, 18, 19, 0, V0); \
	MMLA_REDUCE(20, 21, 22, 23, 1, V1); \
	WORD $(0x4E803800|RM(1)|RN(0)|RD(2)); \ // ZIP1 V2.4S, V0.4S, V1.4S: [r0t0, r0t1, r1t0, r1t1]
	VST1 [V2.S4], (R5); \
	RET

// LOAD_Q8_0: the quants are bytes 2-33 of each row's block.
#define LOAD_Q8_0 \
	ADD  $2, R0, R5; \
	VLD1 (R5), [V0.B16, V1.B16]; \
	ADD  $2, R1, R5; \
	VLD1 (R5), [V2.B16, V3.B16]

// The Q4_0 and Q5_0 rows are unpacked as dot32 (qdot.go) does: low
// nibbles are values 0-15, high nibbles 16-31, Q5_0's fifth bit i is bit i
// of the qh word, and Q4_0's 8 or Q5_0's 16 is subtracted. MMLA_TOKEN
// overwrites V24-V27 and V30, so the constants are set again per block:
// V24 0x0f bytes, V30 the offset, V25 each byte's bit, V26/V27 the byte
// i/8 indices for TBL (q5mmla).
DATA q5mmla<>+0(SB)/8, $0x8040201008040201
DATA q5mmla<>+8(SB)/8, $0x8040201008040201
DATA q5mmla<>+16(SB)/8, $0x0000000000000000
DATA q5mmla<>+24(SB)/8, $0x0101010101010101
DATA q5mmla<>+32(SB)/8, $0x0202020202020202
DATA q5mmla<>+40(SB)/8, $0x0303030303030303
GLOBL q5mmla<>(SB), RODATA|NOPTR, $48

// NIBBLES_ROW: the 16 bytes at qoff(rw) as 4-bit values in lo and hi.
#define NIBBLES_ROW(rw, qoff, lo, hi) \
	ADD   $qoff, rw, R5; \
	VLD1  (R5), [V12.B16]; \
	VAND  V24.B16, V12.B16, lo; \
	VUSHR $4, V12.B16, hi

// Q5_HIGH_ROW ORs 16 into byte i of lo/hi where bit i
// of the qh word at hoff(rw) is set.
#define Q5_HIGH_ROW(rw, hoff, lo, hi) \
	MOVWU hoff(rw), R6; \
	VMOV  R6, V13.S[0]; \
	VTBL  V26.B16, [V13.B16], V8.B16; \
	VTBL  V27.B16, [V13.B16], V9.B16; \
	WORD  $(0x4E208C00|RM(25)|RN(8)|RD(8)); \ // CMTST V8.16B, V8.16B, V25.16B
	WORD  $(0x4E208C00|RM(25)|RN(9)|RD(9)); \ // CMTST V9.16B, V9.16B, V25.16B
	VAND  V30.B16, V8.B16, V8.B16; \
	VAND  V30.B16, V9.B16, V9.B16; \
	VORR  V8.B16, lo, lo; \
	VORR  V9.B16, hi, hi

// OFFSET_ROWS: V0-V3 −= V30 (the type's offset).
#define OFFSET_ROWS \
	WORD $(0x6E208400|RM(30)|RN(0)|RD(0)); \ // SUB V0.16B, V0.16B, V30.16B
	WORD $(0x6E208400|RM(30)|RN(1)|RD(1)); \ // SUB V1.16B, V1.16B, V30.16B
	WORD $(0x6E208400|RM(30)|RN(2)|RD(2)); \ // SUB V2.16B, V2.16B, V30.16B
	WORD $(0x6E208400|RM(30)|RN(3)|RD(3))     // SUB V3.16B, V3.16B, V30.16B

#define LOAD_Q4_0 \
	VMOVI $15, V24.B16; \
	VMOVI $8, V30.B16; \
	NIBBLES_ROW(R0, 2, V0.B16, V1.B16); \
	NIBBLES_ROW(R1, 2, V2.B16, V3.B16); \
	OFFSET_ROWS

#define LOAD_Q5_0 \
	VMOVI $15, V24.B16; \
	VMOVI $16, V30.B16; \
	MOVD  $q5mmla<>(SB), R5; \
	VLD1  (R5), [V25.B16, V26.B16, V27.B16]; \
	NIBBLES_ROW(R0, 6, V0.B16, V1.B16); \
	Q5_HIGH_ROW(R0, 2, V0.B16, V1.B16); \
	NIBBLES_ROW(R1, 6, V2.B16, V3.B16); \
	Q5_HIGH_ROW(R1, 2, V2.B16, V3.B16); \
	OFFSET_ROWS

// func dotQ8_0MMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)
//
// out = [row 0·token 0, row 0·token 1, row 1·token 0, row 1·token 1] for the
// rows at w and w+wstride and the tokens at x and x+xstride, nb blocks each.
TEXT ·dotQ8_0MMLA(SB), NOSPLIT, $0-48
	MMLA32_KERNEL(LOAD_Q8_0, 34)

// func dotQ4_0MMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)
TEXT ·dotQ4_0MMLA(SB), NOSPLIT, $0-48
	MMLA32_KERNEL(LOAD_Q4_0, 18)

// func dotQ5_0MMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)
TEXT ·dotQ5_0MMLA(SB), NOSPLIT, $0-48
	MMLA32_KERNEL(LOAD_Q5_0, 22)

// The Q4_K product of two rows and two tokens. dotK's per-super-block
// integer sums are exact in any grouping, so here SMMLA's eight-byte sums
// are used whole: per 32-value sub-block four SMMLAs give its sum for all
// four (row, token) pairs, lanes [r0·t0, r0·t1, r1·t0, r1·t1], the layout
// every vector below keeps. Scales and mins are unpacked as QK45_BLOCK
// does, per row in general registers; the float steps are dotK's, lane by
// lane: acc += float32(d·dx)·isum, acc −= float32(dmin·dx)·msum.

// Q4K_UNPACK2: the 6-bit scales of the row at rw as bytes in R7 (0-7) and
// its mins in R10 (0-7).
#define Q4K_UNPACK2(rw) \
	MOVWU 4(rw), R12; \
	MOVWU 8(rw), R13; \
	MOVWU 12(rw), R14; \
	ANDW  $0x3f3f3f3f, R12, R7; \
	ANDW  $0x0f0f0f0f, R14, R8; \
	LSRW  $6, R12, R9; \
	ANDW  $0x03030303, R9, R9; \
	ORRW  R9<<4, R8, R8; \
	ANDW  $0x3f3f3f3f, R13, R10; \
	LSRW  $4, R14, R11; \
	ANDW  $0x0f0f0f0f, R11, R11; \
	LSRW  $6, R13, R9; \
	ANDW  $0x03030303, R9, R9; \
	ORRW  R9<<4, R11, R11; \
	ORR   R8<<32, R7, R7; \
	ORR   R11<<32, R10, R10

// F16_PAIR: the f16s at off(R0) and off(R1) as float32 [r0, r0, r1, r1] in v (vn its number).
#define F16_PAIR(off, vn, v) \
	MOVHU off(R0), R12; \
	MOVHU off(R1), R13; \
	ORR   R12<<16, R12, R12; \
	ORR   R13<<16, R13, R13; \
	ORR   R13<<32, R12, R12; \
	FMOVD R12, v; \
	WORD  $(0x0E217800|RN(vn)|RD(vn)) // FCVTL vn.4S, vn.4H

// TOKENS2: 32 activation bytes at xoff of both tokens, interleaved by eight
// bytes into V12-V15 (SMMLA's second operands).
#define TOKENS2(xoff) \
	ADD  $xoff, R2, R9; \
	VLD1 (R9), [V0.B16, V1.B16]; \
	ADD  $xoff, R3, R9; \
	VLD1 (R9), [V2.B16, V3.B16]; \
	WORD $(0x4EC03800|RM(2)|RN(0)|RD(12)); \ // ZIP1 V12.2D, V0.2D, V2.2D
	WORD $(0x4EC07800|RM(2)|RN(0)|RD(13)); \ // ZIP2 V13.2D, V0.2D, V2.2D
	WORD $(0x4EC03800|RM(3)|RN(1)|RD(14)); \ // ZIP1 V14.2D, V1.2D, V3.2D
	WORD $(0x4EC07800|RM(3)|RN(1)|RD(15))    // ZIP2 V15.2D, V1.2D, V3.2D

// SUB_SUM: the sub-block sums of the quants in a0…a0+3 against V12-V15 into V(s).
#define SUB_SUM(s, a0) \
	VEOR V0.B16, V0.B16, V0.B16; \
	WORD $(0x4E80A400|RM(12)|RN(a0)|RD(0)); \   // SMMLA V0.4S, Va0.16B, V12.16B
	WORD $(0x4E80A400|RM(13)|RN(a0+1)|RD(0)); \ // SMMLA V0.4S, Va0+1.16B, V13.16B
	WORD $(0x4E80A400|RM(14)|RN(a0+2)|RD(0)); \ // SMMLA V0.4S, Va0+2.16B, V14.16B
	WORD $(0x4E80A400|RM(15)|RN(a0+3)|RD(0)); \ // SMMLA V0.4S, Va0+3.16B, V15.16B
	WORD $(0x4E000000|RM(21)|RN(20)|RD(18)); \  // TBL V18.16B, {V20.16B}, V21.16B: [sc_r0, sc_r0, sc_r1, sc_r1]
	WORD $(0x4EA09400|RM(18)|RN(0)|RD(22)); \   // MLA V22.4S, V0.4S, V18.4S: isum
	VADD V23.S4, V21.S4, V21.S4                 // next sub-block's scale

// Q4K_PLANE2: one 32-byte quant plane of both rows (low nibbles: sub-block
// 2p, high: 2p+1) against the tokens' activations at xoff and xoff+32.
#define Q4K_PLANE2(qoff, xoff) \
	ADD   $qoff, R0, R9; \
	VLD1  (R9), [V0.B16, V1.B16]; \
	ADD   $qoff, R1, R9; \
	VLD1  (R9), [V2.B16, V3.B16]; \
	VAND  V31.B16, V0.B16, V4.B16; \
	VAND  V31.B16, V1.B16, V5.B16; \
	VAND  V31.B16, V2.B16, V6.B16; \
	VAND  V31.B16, V3.B16, V7.B16; \
	VUSHR $4, V0.B16, V0.B16; \
	VUSHR $4, V1.B16, V1.B16; \
	VUSHR $4, V2.B16, V2.B16; \
	VUSHR $4, V3.B16, V3.B16; \
	WORD  $(0x4EC03800|RM(6)|RN(4)|RD(8)); \  // ZIP1 V8.2D, V4.2D, V6.2D
	WORD  $(0x4EC07800|RM(6)|RN(4)|RD(9)); \  // ZIP2 V9.2D, V4.2D, V6.2D
	WORD  $(0x4EC03800|RM(7)|RN(5)|RD(10)); \ // ZIP1 V10.2D, V5.2D, V7.2D
	WORD  $(0x4EC07800|RM(7)|RN(5)|RD(11)); \ // ZIP2 V11.2D, V5.2D, V7.2D
	WORD  $(0x4EC03800|RM(2)|RN(0)|RD(4)); \  // ZIP1 V4.2D, V0.2D, V2.2D
	WORD  $(0x4EC07800|RM(2)|RN(0)|RD(5)); \  // ZIP2 V5.2D, V0.2D, V2.2D
	WORD  $(0x4EC03800|RM(3)|RN(1)|RD(6)); \  // ZIP1 V6.2D, V1.2D, V3.2D
	WORD  $(0x4EC07800|RM(3)|RN(1)|RD(7)); \  // ZIP2 V7.2D, V1.2D, V3.2D
	TOKENS2(xoff); \
	SUB_SUM(16, 8); \
	TOKENS2(xoff+32); \
	SUB_SUM(17, 4)

// func dotQ4KMMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)
//
// As dotQ8_0MMLA, for Q4_K rows and q8_K activations.
TEXT ·dotQ4KMMLA(SB), NOSPLIT, $0-48
	MMLA_ARGS
	VMOVI $15, V31.B16
	// V24: TBL indices of sub-block 0's scale, [0, 0, 8, 8] in the low
	// byte of each lane, 0xff (out of range: zero) above; V23 adds one.
	MOVD  $0xffffff00ffffff00, R5
	VMOV  R5, V24.D[0]
	MOVD  $0xffffff08ffffff08, R5
	VMOV  R5, V24.D[1]
	MOVD  $0x0000000100000001, R5
	VMOV  R5, V23.D[0]
	VMOV  R5, V23.D[1]
	VEOR  V25.B16, V25.B16, V25.B16
	CBZ   R4, kdone

kloop:
	Q4K_UNPACK2(R0)
	VMOV  R7, V20.D[0]
	VMOV  R10, V26.D[0]
	Q4K_UNPACK2(R1)
	VMOV  R7, V20.D[1]
	VMOV  R10, V26.D[1]
	VORR  V24.B16, V24.B16, V21.B16
	VEOR  V22.B16, V22.B16, V22.B16
	Q4K_PLANE2(16, 4)
	Q4K_PLANE2(48, 68)
	Q4K_PLANE2(80, 132)
	Q4K_PLANE2(112, 196)
	// msum: the activation sums per 32 values (pairs of the 16 i16 sums)
	// times each row's mins, as int16 products widened to int32.
	ADD   $260, R2, R9
	VLD1  (R9), [V0.B16, V1.B16]
	ADD   $260, R3, R9
	VLD1  (R9), [V2.B16, V3.B16]
	WORD  $(0x4E60BC00|RM(1)|RN(0)|RD(0)) // ADDP V0.8H, V0.8H, V1.8H: token 0
	WORD  $(0x4E60BC00|RM(3)|RN(2)|RD(2)) // ADDP V2.8H, V2.8H, V3.8H: token 1
	WORD  $(0x2F08A400|RN(26)|RD(3))      // UXTL  V3.8H, V26.8B: row 0's mins
	WORD  $(0x6F08A400|RN(26)|RD(26))     // UXTL2 V26.8H, V26.16B: row 1's
	WORD  $(0x0E60C000|RM(0)|RN(3)|RD(4))  // SMULL  V4.4S, V3.4H, V0.4H
	WORD  $(0x4E608000|RM(0)|RN(3)|RD(4))  // SMLAL2 V4.4S, V3.8H, V0.8H
	WORD  $(0x0E60C000|RM(2)|RN(3)|RD(5))  // SMULL  V5.4S, V3.4H, V2.4H
	WORD  $(0x4E608000|RM(2)|RN(3)|RD(5))  // SMLAL2 V5.4S, V3.8H, V2.8H
	WORD  $(0x0E60C000|RM(0)|RN(26)|RD(6)) // SMULL  V6.4S, V26.4H, V0.4H
	WORD  $(0x4E608000|RM(0)|RN(26)|RD(6)) // SMLAL2 V6.4S, V26.8H, V0.8H
	WORD  $(0x0E60C000|RM(2)|RN(26)|RD(7)) // SMULL  V7.4S, V26.4H, V2.4H
	WORD  $(0x4E608000|RM(2)|RN(26)|RD(7)) // SMLAL2 V7.4S, V26.8H, V2.8H
	WORD  $(0x4EA0BC00|RM(5)|RN(4)|RD(4))  // ADDP V4.4S, V4.4S, V5.4S
	WORD  $(0x4EA0BC00|RM(7)|RN(6)|RD(6))  // ADDP V6.4S, V6.4S, V7.4S
	WORD  $(0x4EA0BC00|RM(6)|RN(4)|RD(4))  // ADDP V4.4S, V4.4S, V6.4S: msum
	// dx per lane [t0, t1, t0, t1]; d and dmin per lane [r0, r0, r1, r1].
	DX_PAIR
	F16_PAIR(0, 27, F27)
	F16_PAIR(2, 28, F28)
	SCALED_INTO_ACC4(27, 22, 25, FADD4) // acc += float32(d·dx)·isum
	SCALED_INTO_ACC4(28, 4, 25, FSUB4)  // acc −= float32(dmin·dx)·msum
	MMLA_NEXT(144, 292, kloop)

kdone:
	MOVD out+40(FP), R5
	VST1 [V25.S4], (R5)
	RET

// The Q6_K product of two rows and two tokens, dotK's operations as for
// Q4_K: per 16-value group two SMMLAs sum q'·x with q' = q+32 (0-63, so a
// signed byte), each row's signed scale is picked per lane by TBL from the
// scale bytes and their sign bytes, and Σ sc·32·bsum is taken off the
// integer sum at the end (exact: q = q'−32).

// Q6K_LO_*: a run's low four bits from the ql bytes of both rows (V4-V7).
#define Q6K_LO_AND \
	VAND V31.B16, V4.B16, V4.B16; \
	VAND V31.B16, V5.B16, V5.B16; \
	VAND V31.B16, V6.B16, V6.B16; \
	VAND V31.B16, V7.B16, V7.B16

#define Q6K_LO_SHR \
	VUSHR $4, V4.B16, V4.B16; \
	VUSHR $4, V5.B16, V5.B16; \
	VUSHR $4, V6.B16, V6.B16; \
	VUSHR $4, V7.B16, V7.B16

// Q6K_HI_*: a run's two high bits moved to bits 4-5 of the qh bytes (V0-V3).
#define Q6K_HI_SHL4 \
	VSHL $4, V0.B16, V0.B16; \
	VSHL $4, V1.B16, V1.B16; \
	VSHL $4, V2.B16, V2.B16; \
	VSHL $4, V3.B16, V3.B16

#define Q6K_HI_SHL2 \
	VSHL $2, V0.B16, V0.B16; \
	VSHL $2, V1.B16, V1.B16; \
	VSHL $2, V2.B16, V2.B16; \
	VSHL $2, V3.B16, V3.B16

#define Q6K_HI_NONE

#define Q6K_HI_SHR2 \
	VUSHR $2, V0.B16, V0.B16; \
	VUSHR $2, V1.B16, V1.B16; \
	VUSHR $2, V2.B16, V2.B16; \
	VUSHR $2, V3.B16, V3.B16

// Q6K_SCALE: isum (V22) += the group sums in V(s) times the next group's
// scale of each row, [sc_r0, sc_r0, sc_r1, sc_r1] sign-extended by TBL from
// the table V24-V27 (row 0's scales, row 1's, their sign bytes).
#define Q6K_SCALE(s) \
	WORD $(0x4E006000|RM(21)|RN(24)|RD(18)); \ // TBL V18.16B, {V24.16B-V27.16B}, V21.16B
	WORD $(0x4EA09400|RM(18)|RN(s)|RD(22)); \  // MLA V22.4S, Vs.4S, V18.4S
	VADD V23.B16, V21.B16, V21.B16

// Q6K_RUN2: run j of a half (32 values, two groups) of both rows: ql at
// qlo, qh at qho, activations at xo; lo and hi pick the run's bits.
#define Q6K_RUN2(qlo, qho, xo, lo, hi) \
	ADD   $qlo, R0, R9; \
	VLD1  (R9), [V4.B16, V5.B16]; \
	ADD   $qlo, R1, R9; \
	VLD1  (R9), [V6.B16, V7.B16]; \
	ADD   $qho, R0, R9; \
	VLD1  (R9), [V0.B16, V1.B16]; \
	ADD   $qho, R1, R9; \
	VLD1  (R9), [V2.B16, V3.B16]; \
	lo; \
	hi; \
	VAND  V30.B16, V0.B16, V0.B16; \
	VAND  V30.B16, V1.B16, V1.B16; \
	VAND  V30.B16, V2.B16, V2.B16; \
	VAND  V30.B16, V3.B16, V3.B16; \
	VORR  V0.B16, V4.B16, V4.B16; \
	VORR  V1.B16, V5.B16, V5.B16; \
	VORR  V2.B16, V6.B16, V6.B16; \
	VORR  V3.B16, V7.B16, V7.B16; \
	WORD  $(0x4EC03800|RM(6)|RN(4)|RD(8)); \  // ZIP1 V8.2D, V4.2D, V6.2D
	WORD  $(0x4EC07800|RM(6)|RN(4)|RD(9)); \  // ZIP2 V9.2D, V4.2D, V6.2D
	WORD  $(0x4EC03800|RM(7)|RN(5)|RD(10)); \ // ZIP1 V10.2D, V5.2D, V7.2D
	WORD  $(0x4EC07800|RM(7)|RN(5)|RD(11)); \ // ZIP2 V11.2D, V5.2D, V7.2D
	TOKENS2(xo); \
	VEOR  V16.B16, V16.B16, V16.B16; \
	VEOR  V17.B16, V17.B16, V17.B16; \
	WORD  $(0x4E80A400|RM(12)|RN(8)|RD(16)); \  // SMMLA V16.4S, V8.16B, V12.16B
	WORD  $(0x4E80A400|RM(13)|RN(9)|RD(16)); \  // SMMLA V16.4S, V9.16B, V13.16B
	WORD  $(0x4E80A400|RM(14)|RN(10)|RD(17)); \ // SMMLA V17.4S, V10.16B, V14.16B
	WORD  $(0x4E80A400|RM(15)|RN(11)|RD(17)); \ // SMMLA V17.4S, V11.16B, V15.16B
	Q6K_SCALE(16); \
	Q6K_SCALE(17)

// func dotQ6KMMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)
//
// As dotQ8_0MMLA, for Q6_K rows and q8_K activations.
TEXT ·dotQ6KMMLA(SB), NOSPLIT, $0-48
	MMLA_ARGS
	VMOVI $15, V31.B16
	VMOVI $48, V30.B16
	VMOVI $1, V23.B16
	// V19: TBL indices of group 0's scale per lane: row 0's byte 0 and
	// its sign byte (32) above, row 1's byte 16 and its sign byte (48).
	MOVD  $0x2020200020202000, R5
	VMOV  R5, V19.D[0]
	MOVD  $0x3030301030303010, R5
	VMOV  R5, V19.D[1]
	VEOR  V20.B16, V20.B16, V20.B16
	CBZ   R4, q6done

q6loop:
	ADD   $192, R0, R9
	VLD1  (R9), [V24.B16]
	ADD   $192, R1, R9
	VLD1  (R9), [V25.B16]
	WORD  $(0x4E20A800|RN(24)|RD(26)) // CMLT V26.16B, V24.16B, #0
	WORD  $(0x4E20A800|RN(25)|RD(27)) // CMLT V27.16B, V25.16B, #0
	VORR  V19.B16, V19.B16, V21.B16
	VEOR  V22.B16, V22.B16, V22.B16
	Q6K_RUN2(0, 128, 4, Q6K_LO_AND, Q6K_HI_SHL4)
	Q6K_RUN2(32, 128, 36, Q6K_LO_AND, Q6K_HI_SHL2)
	Q6K_RUN2(0, 128, 68, Q6K_LO_SHR, Q6K_HI_NONE)
	Q6K_RUN2(32, 128, 100, Q6K_LO_SHR, Q6K_HI_SHR2)
	Q6K_RUN2(64, 160, 132, Q6K_LO_AND, Q6K_HI_SHL4)
	Q6K_RUN2(96, 160, 164, Q6K_LO_AND, Q6K_HI_SHL2)
	Q6K_RUN2(64, 160, 196, Q6K_LO_SHR, Q6K_HI_NONE)
	Q6K_RUN2(96, 160, 228, Q6K_LO_SHR, Q6K_HI_SHR2)
	// isum −= 32·Σ sc·bsum: the scales as int16 times the tokens' sums.
	ADD   $260, R2, R9
	VLD1  (R9), [V0.B16, V1.B16]
	ADD   $260, R3, R9
	VLD1  (R9), [V2.B16, V3.B16]
	WORD  $(0x0F08A400|RN(24)|RD(4))        // SXTL  V4.8H, V24.8B
	WORD  $(0x4F08A400|RN(24)|RD(5))        // SXTL2 V5.8H, V24.16B
	WORD  $(0x0F08A400|RN(25)|RD(6))        // SXTL  V6.8H, V25.8B
	WORD  $(0x4F08A400|RN(25)|RD(7))        // SXTL2 V7.8H, V25.16B
	WORD  $(0x0E60C000|RM(0)|RN(4)|RD(8))   // SMULL  V8.4S, V4.4H, V0.4H
	WORD  $(0x4E608000|RM(0)|RN(4)|RD(8))   // SMLAL2 V8.4S, V4.8H, V0.8H
	WORD  $(0x0E608000|RM(1)|RN(5)|RD(8))   // SMLAL  V8.4S, V5.4H, V1.4H
	WORD  $(0x4E608000|RM(1)|RN(5)|RD(8))   // SMLAL2 V8.4S, V5.8H, V1.8H
	WORD  $(0x0E60C000|RM(2)|RN(4)|RD(9))   // SMULL  V9.4S, V4.4H, V2.4H
	WORD  $(0x4E608000|RM(2)|RN(4)|RD(9))   // SMLAL2 V9.4S, V4.8H, V2.8H
	WORD  $(0x0E608000|RM(3)|RN(5)|RD(9))   // SMLAL  V9.4S, V5.4H, V3.4H
	WORD  $(0x4E608000|RM(3)|RN(5)|RD(9))   // SMLAL2 V9.4S, V5.8H, V3.8H
	WORD  $(0x0E60C000|RM(0)|RN(6)|RD(10))  // SMULL  V10.4S, V6.4H, V0.4H
	WORD  $(0x4E608000|RM(0)|RN(6)|RD(10))  // SMLAL2 V10.4S, V6.8H, V0.8H
	WORD  $(0x0E608000|RM(1)|RN(7)|RD(10))  // SMLAL  V10.4S, V7.4H, V1.4H
	WORD  $(0x4E608000|RM(1)|RN(7)|RD(10))  // SMLAL2 V10.4S, V7.8H, V1.8H
	WORD  $(0x0E60C000|RM(2)|RN(6)|RD(11))  // SMULL  V11.4S, V6.4H, V2.4H
	WORD  $(0x4E608000|RM(2)|RN(6)|RD(11))  // SMLAL2 V11.4S, V6.8H, V2.8H
	WORD  $(0x0E608000|RM(3)|RN(7)|RD(11))  // SMLAL  V11.4S, V7.4H, V3.4H
	WORD  $(0x4E608000|RM(3)|RN(7)|RD(11))  // SMLAL2 V11.4S, V7.8H, V3.8H
	WORD  $(0x4EA0BC00|RM(9)|RN(8)|RD(8))   // ADDP V8.4S, V8.4S, V9.4S
	WORD  $(0x4EA0BC00|RM(11)|RN(10)|RD(10)) // ADDP V10.4S, V10.4S, V11.4S
	WORD  $(0x4EA0BC00|RM(10)|RN(8)|RD(8))  // ADDP V8.4S, V8.4S, V10.4S
	VSHL  $5, V8.S4, V8.S4
	VSUB  V8.S4, V22.S4, V22.S4
	// acc += float32(d·dx)·isum, per lane.
	DX_PAIR
	F16_PAIR(208, 28, F28)
	SCALED_INTO_ACC4(28, 22, 20, FADD4)
	MMLA_NEXT(210, 292, q6loop)

q6done:
	MOVD out+40(FP), R5
	VST1 [V20.S4], (R5)
	RET
