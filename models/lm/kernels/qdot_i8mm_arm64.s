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

#define RD(d) (d)
#define RN(n) ((n)<<5)
#define RM(m) ((m)<<16)

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

// func dotQ8_0MMLA(w *byte, wstride int, x *byte, xstride int, nb int, out *[4]float32)
//
// out = [row 0·token 0, row 0·token 1, row 1·token 0, row 1·token 1] for the
// rows at w and w+wstride and the tokens at x and x+xstride, nb blocks each.
TEXT ·dotQ8_0MMLA(SB), NOSPLIT, $0-48
	MOVD w+0(FP), R0
	MOVD wstride+8(FP), R1
	ADD  R0, R1, R1
	MOVD x+16(FP), R2
	MOVD xstride+24(FP), R3
	ADD  R2, R3, R3
	MOVD nb+32(FP), R4
	// V31: keep bytes 0-3 of the low half and 4-7 of the high half.
	MOVD $0x00000000ffffffff, R5
	VMOV R5, V31.D[0]
	MOVD $0xffffffff00000000, R5
	VMOV R5, V31.D[1]
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16
	CBZ  R4, done

loop:
	// Weight scales [dw0, dw0, dw1, dw1], converted from f16 exactly.
	MOVHU (R0), R5
	MOVHU (R1), R6
	ORR   R5<<16, R5, R5
	ORR   R6<<16, R6, R6
	ORR   R6<<32, R5, R5
	FMOVD R5, F28
	WORD  $(0x0E217800|RN(28)|RD(28)) // FCVTL V28.4S, V28.4H
	// Quants of both rows, interleaved by eight bytes: V4 = row 0 bytes
	// 0-7, row 1 bytes 0-7; V5 bytes 8-15; V6 16-23; V7 24-31.
	ADD   $2, R0, R5
	VLD1  (R5), [V0.B16, V1.B16]
	ADD   $2, R1, R5
	VLD1  (R5), [V2.B16, V3.B16]
	WORD  $(0x4EC03800|RM(2)|RN(0)|RD(4)) // ZIP1 V4.2D, V0.2D, V2.2D
	WORD  $(0x4EC07800|RM(2)|RN(0)|RD(5)) // ZIP2 V5.2D, V0.2D, V2.2D
	WORD  $(0x4EC03800|RM(3)|RN(1)|RD(6)) // ZIP1 V6.2D, V1.2D, V3.2D
	WORD  $(0x4EC07800|RM(3)|RN(1)|RD(7)) // ZIP2 V7.2D, V1.2D, V3.2D
	MMLA_TOKEN(R2, 16, 17, 18, 19)
	MMLA_TOKEN(R3, 20, 21, 22, 23)
	ADD  $34, R0
	ADD  $34, R1
	ADD  $40, R2
	ADD  $40, R3
	SUBS $1, R4
	BNE  loop

done:
	MOVD out+40(FP), R5
	MMLA_REDUCE(16, 17, 18, 19, 0, V0)
	MMLA_REDUCE(20, 21, 22, 23, 1, V1)
	// V0 = [r0t0, r1t0], V1 = [r0t1, r1t1]: ZIP1 .4S gives out's order.
	WORD $(0x4E803800|RM(1)|RN(0)|RD(2)) // ZIP1 V2.4S, V0.4S, V1.4S
	VST1 [V2.S4], (R5)
	RET
