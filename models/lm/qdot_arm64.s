#include "textflag.h"

// The Q8_0 integer dot product on arm64 (NEON), the same operations as
// dotQ8_0Go (qdot.go): per 32-value block, eight int32 lanes of four
// consecutive products, scaled by float32(dw·dx) and accumulated as float32,
// then reduced ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)). The Go assembler has
// no mnemonics for the integer multiplies, the vector float arithmetic or
// the half-precision conversion, so those are encoded as WORDs; each is
// annotated with its instruction.

// Vd, Vn, Vm register fields.
#define RD(d) (d)
#define RN(n) ((n)<<5)
#define RM(m) ((m)<<16)

// f16 at (R0) → F0, times the float32 at (R1): dd in S0.
#define BLOCK_SCALE \
	MOVHU (R0), R4; \
	WORD  $(0x1EE70000|RN(4)|RD(0)); \ // FMOV H0, W4
	WORD  $(0x1EE24000|RN(0)|RD(0)); \ // FCVT S0, H0
	FMOVS (R1), F1; \
	FMULS F1, F0, F0

// V6, V7 (int32 lanes 0-3, 4-7) → float, times dd, added to V16, V17.
#define BLOCK_ACC \
	WORD $(0x4E21D800|RN(6)|RD(6)); \         // SCVTF V6.4S, V6.4S
	WORD $(0x4E21D800|RN(7)|RD(7)); \         // SCVTF V7.4S, V7.4S
	VDUP V0.S[0], V8.S4; \
	WORD $(0x6E20DC00|RM(8)|RN(6)|RD(6)); \   // FMUL V6.4S, V6.4S, V8.4S
	WORD $(0x6E20DC00|RM(8)|RN(7)|RD(7)); \   // FMUL V7.4S, V7.4S, V8.4S
	WORD $(0x4E20D400|RM(6)|RN(16)|RD(16)); \ // FADD V16.4S, V16.4S, V6.4S
	WORD $(0x4E20D400|RM(7)|RN(17)|RD(17))    // FADD V17.4S, V17.4S, V7.4S

// V16, V17 → the REDUCE8 sum in F18, stored at ret.
#define FINISH \
	WORD  $(0x4E20D400|RM(17)|RN(16)|RD(18)); \ // FADD V18.4S, V16.4S, V17.4S
	WORD  $(0x6E20D400|RM(18)|RN(18)|RD(18)); \ // FADDP V18.4S, V18.4S, V18.4S
	WORD  $(0x7E30D800|RN(18)|RD(18)); \        // FADDP S18, V18.2S
	FMOVS F18, ret+24(FP); \
	RET

// func dotQ8_0SDOT(w, x *byte, nb int) float32
//
// With the dot-product extension (ARMv8.2 SDOT): each SDOT gives four lanes
// of four consecutive products.
TEXT ·dotQ8_0SDOT(SB), NOSPLIT, $0-28
	MOVD w+0(FP), R0
	MOVD x+8(FP), R1
	MOVD nb+16(FP), R2
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	CBZ  R2, sdotdone

sdotloop:
	ADD  $2, R0, R5
	ADD  $8, R1, R6
	VLD1 (R5), [V2.B16, V3.B16]
	VLD1 (R6), [V4.B16, V5.B16]
	VEOR V6.B16, V6.B16, V6.B16
	VEOR V7.B16, V7.B16, V7.B16
	WORD $(0x4E809400|RM(4)|RN(2)|RD(6)) // SDOT V6.4S, V2.16B, V4.16B
	WORD $(0x4E809400|RM(5)|RN(3)|RD(7)) // SDOT V7.4S, V3.16B, V5.16B
	BLOCK_SCALE
	BLOCK_ACC
	ADD  $34, R0
	ADD  $40, R1
	SUBS $1, R2
	BNE  sdotloop

sdotdone:
	FINISH

// func dotQ8_0NEON(w, x *byte, nb int) float32
//
// Base ARMv8 NEON: SMULL/SMULL2 give int16 products, SADDLP sums pairs into
// int32 and ADDP pairs of pairs, so lane l again holds values 4l…4l+3.
TEXT ·dotQ8_0NEON(SB), NOSPLIT, $0-28
	MOVD w+0(FP), R0
	MOVD x+8(FP), R1
	MOVD nb+16(FP), R2
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	CBZ  R2, neondone

neonloop:
	ADD  $2, R0, R5
	ADD  $8, R1, R6
	VLD1 (R5), [V2.B16, V3.B16]
	VLD1 (R6), [V4.B16, V5.B16]
	WORD $(0x0E20C000|RM(4)|RN(2)|RD(10))  // SMULL  V10.8H, V2.8B, V4.8B
	WORD $(0x4E20C000|RM(4)|RN(2)|RD(11))  // SMULL2 V11.8H, V2.16B, V4.16B
	WORD $(0x0E20C000|RM(5)|RN(3)|RD(12))  // SMULL  V12.8H, V3.8B, V5.8B
	WORD $(0x4E20C000|RM(5)|RN(3)|RD(13))  // SMULL2 V13.8H, V3.16B, V5.16B
	WORD $(0x4E602800|RN(10)|RD(10))       // SADDLP V10.4S, V10.8H
	WORD $(0x4E602800|RN(11)|RD(11))       // SADDLP V11.4S, V11.8H
	WORD $(0x4E602800|RN(12)|RD(12))       // SADDLP V12.4S, V12.8H
	WORD $(0x4E602800|RN(13)|RD(13))       // SADDLP V13.4S, V13.8H
	WORD $(0x4EA0BC00|RM(11)|RN(10)|RD(6)) // ADDP V6.4S, V10.4S, V11.4S
	WORD $(0x4EA0BC00|RM(13)|RN(12)|RD(7)) // ADDP V7.4S, V12.4S, V13.4S
	BLOCK_SCALE
	BLOCK_ACC
	ADD  $34, R0
	ADD  $40, R1
	SUBS $1, R2
	BNE  neonloop

neondone:
	FINISH
