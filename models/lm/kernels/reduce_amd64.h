// REDUCE8 sums the eight lanes of y (x is its low half) and stores the sum
// at dst: fold 256 to 128 bits, then two horizontal adds. Every kernel ends
// its sums this one way, which is what keeps a (token, row) result the same
// bit for bit whichever kernel computed it. Clobbers X14.
#define REDUCE8(y, x, dst) \
	VEXTRACTF128 $1, y, X14; \
	VADDPS X14, x, x; \
	VHADDPS x, x, x; \
	VHADDPS x, x, x; \
	VMOVSS x, dst
