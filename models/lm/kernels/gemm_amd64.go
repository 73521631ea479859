package kernels

import (
	"encoding/binary"
	"math"
)

// quantActAVX2 quantizes n values of x (n a multiple of 32, at most 256)
// as quantizeAct does: d = max|x|/127, q = round(x/d) half away from zero,
// written to q[n], and the sum of each 16 quants to sums[n/16]. It reports
// ok false, having written nothing, when max|x| or 1/d is not finite (NaN
// or infinite inputs, subnormal maxima), where quantizeAct's result hangs
// on how Go converts a NaN or an infinity to an integer: the caller runs
// quantizeAct then. It reads and writes unchecked.
//
//go:noescape
func quantActAVX2(x *float32, n int, q *byte, sums *int16) (d float32, ok bool)

// quantizeBlock is quantizeAct, in AVX2 where the CPU has it (bit-identical:
// the tests compare them).
func quantizeBlock(dst []byte, x []float32, superK bool) {
	if !HasAVX2 || len(x) == 0 || len(x)%32 != 0 || len(x) > 256 {
		quantizeAct(dst, x, superK)
		return
	}
	qs := dst[8:]
	if superK {
		qs = dst[4:]
	}
	_ = qs[len(x)-1]
	var sums [16]int16
	d, ok := quantActAVX2(&x[0], len(x), &qs[0], &sums[0])
	if !ok {
		quantizeAct(dst, x, superK)
		return
	}
	binary.LittleEndian.PutUint32(dst, math.Float32bits(d))
	if !superK {
		binary.LittleEndian.PutUint32(dst[4:], uint32(int32(sums[0])+int32(sums[1])))
		return
	}
	for g := range len(x) / 16 {
		binary.LittleEndian.PutUint16(dst[4+len(x)+2*g:], uint16(sums[g]))
	}
}
