package kernels

import "golang.org/x/sys/cpu"

// HasAVX2 selects the AVX2/FMA kernels; the products fall back to gonum on
// CPUs without them (and on other architectures, see dot_other.go). Tests
// turn it off to check the portable path gives the same results.
var HasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// HasAVX512 adds the AVX-512 matmul kernel for groups of eight tokens: it does
// two tokens' 8-lane sums per 512-bit FMA, in the same order as the AVX2
// kernels, so it changes speed but not a single bit of the result.
var HasAVX512 = HasAVX2 && cpu.X86.HasAVX512F

//go:noescape
func dot4x2AVX2(k int, w0, w1, a0, a1, a2, a3 *float32, out *[8]float32)

// Dot1x4AVX2 sets out[r] = Σ_i a[i]·wr[i] for i < k (a multiple of 8): one
// token row against four weight rows, summed as every other kernel here sums
// a row (dot_amd64.s), read unchecked.
//
//go:noescape
func Dot1x4AVX2(k int, a, w0, w1, w2, w3 *float32, out *[4]float32)

//go:noescape
func dot8x4AVX512(k int, w0, w1, w2, w3, xp, pf, out *float32, stride int)

// AttnScoresAVX2 sets out[p] = Σ_i q[i]·key_p[i] for i < k (a positive
// multiple of 8) and p < n, where key_p starts stride bytes × slots[p] after
// kc: each score summed as Dot1x4AVX2 sums a row. It follows the slot table
// unchecked (SlotsIn checks it).
//
//go:noescape
func AttnScoresAVX2(k int, q, kc *float32, slots *int32, n, stride int, out *float32)

// AttnMixAVX2 adds alpha[p]·value_p[i] to out[i] for p = 0..n-1 in order and
// i < k (a positive multiple of 8), where value_p starts stride bytes ×
// slots[p] after vc: bit-identical to one gonum Saxpy per position. It
// follows the slot table unchecked (SlotsIn checks it).
//
//go:noescape
func AttnMixAVX2(k int, alpha, vc *float32, slots *int32, n, stride int, out *float32)

//go:noescape
func prefetchAVX2(p *float32, n int)

//go:noescape
func siluAVX2(n int, gate, up *float32) (done int)

// SoftmaxExpAVX2 sets sc[p] = float32(e), e = math.Exp(float64(sc[p]-maxS)),
// and adds e to sum in order for p < done, returning the final sum:
// bit-identical to that Go loop. done stops at n&^3 or at the first group of
// four holding an argument math.Exp treats specially; the caller finishes in
// Go from there.
//
//go:noescape
func SoftmaxExpAVX2(n int, sc *float32, maxS float32, sum float64) (done int, total float64)
