package lmtrain

import "golang.org/x/sys/cpu"

// haveFMA selects the AVX2/FMA micro-kernel; CPUs without it use kernelGo.
var haveFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// kernelAVX2 is kernelGo in AVX2/FMA: twelve 8-lane accumulators hold the
// 6×16 tile, and each k step broadcasts six values of A against two vectors
// of B. Every lane sums its products in k order with one rounding per FMA.
//
//go:noescape
func kernelAVX2(k int, a *float32, rs, ps int, b, c *float32, ldc int, alpha, beta float32)

// kernel computes one full micro-tile; see kernelGo for the contract.
func kernel(k int, a *float32, rs, ps int, b, c *float32, ldc int, alpha, beta float32) {
	if haveFMA {
		kernelAVX2(k, a, rs, ps, b, c, ldc, alpha, beta)
		return
	}
	kernelPtr(k, a, rs, ps, b, c, ldc, alpha, beta)
}
