package lm

import "golang.org/x/sys/cpu"

// haveDot4 selects the AVX2/FMA kernels; the forward pass falls back to gonum
// on CPUs without them (and on other architectures, see dot_other.go).
var haveDot4 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dot4x2AVX2(k int, w0, w1, a0, a1, a2, a3 *float32, out *[8]float32)

//go:noescape
func dot1x4AVX2(k int, a, w0, w1, w2, w3 *float32, out *[4]float32)

//go:noescape
func prefetchAVX2(p *float32, n int)
