package lm

import "golang.org/x/sys/cpu"

// haveDot4 selects the AVX2/FMA kernels; the forward pass falls back to gonum
// on CPUs without them (and on other architectures, see dot_other.go).
var haveDot4 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// haveDot8 adds the AVX-512 matmul kernel for groups of eight tokens: it does
// two tokens' 8-lane sums per 512-bit FMA, in the same order as the AVX2
// kernels, so it changes speed but not a single bit of the result.
var haveDot8 = haveDot4 && cpu.X86.HasAVX512F

//go:noescape
func dot4x2AVX2(k int, w0, w1, a0, a1, a2, a3 *float32, out *[8]float32)

//go:noescape
func dot1x4AVX2(k int, a, w0, w1, w2, w3 *float32, out *[4]float32)

//go:noescape
func dot8x4AVX512(k int, w0, w1, w2, w3, xp, pf, out *float32, stride int)

//go:noescape
func attnScoresAVX2(k int, q, kc *float32, slots *int32, n, stride int, out *float32)

//go:noescape
func attnMixAVX2(k int, alpha, vc *float32, slots *int32, n, stride int, out *float32)

//go:noescape
func prefetchAVX2(p *float32, n int)

//go:noescape
func siluAVX2(n int, gate, up *float32) (done int)

//go:noescape
func softmaxExpAVX2(n int, sc *float32, maxS float32, sum float64) (done int, total float64)
