package lm

import "golang.org/x/sys/cpu"

// haveDot4 selects the AVX2/FMA kernel; the forward pass falls back to gonum
// on CPUs without it (and on other architectures, see dot_other.go).
var haveDot4 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dot4AVX2(k int, w, a0, a1, a2, a3 *float32, out *[4]float32)
