package lm

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestNEONKernelsMatchGo runs both arm64 kernels of every type that has
// them, base NEON always and SDOT where the CPU has it, against the Go
// kernel, bit for bit (TestQuantAssemblyMatchesGo covers only the one that
// fastDot selects). Under qemu, TestArm64KernelsUnderQEMU runs it on a CPU
// model without SDOT (cortex-a72) and on one with it.
func TestNEONKernelsMatchGo(t *testing.T) {
	if !haveNEON {
		t.Skip("no ASIMD on this CPU")
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for _, d := range quantTypes {
		k, ok := arm64Kernels[d]
		if !ok {
			continue
		}
		variants := map[string]func(w, x *byte, nb int) float32{"neon": k.neon}
		if haveSDOT {
			variants["sdot"] = k.sdot
		}
		for _, name := range []string{"neon", "sdot"} {
			f, ok := variants[name]
			if !ok {
				continue
			}
			one := func(w, x []byte, nb int) float32 { return f(unsafe.SliceData(w), unsafe.SliceData(x), nb) }
			kernelMatchesGo(t, rng, d, d.String()+" "+name, one, nil)
			t.Logf("%s %s kernel equals the Go kernel", d, name)
		}
	}
	if !haveSDOT {
		t.Log("no SDOT on this CPU: base NEON kernels only")
	}
}
