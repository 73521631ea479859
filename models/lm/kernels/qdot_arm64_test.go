package kernels

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

// BenchmarkArm64Kernels times one 4,096-column row dot product per type with
// the Go kernel, base NEON and (where the CPU has it) SDOT. Under qemu the
// ratios are a sanity check only: emulated speed is not hardware speed.
func BenchmarkArm64Kernels(b *testing.B) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, d := range quantTypes {
		ak, ok := arm64Kernels[d]
		if !ok {
			continue
		}
		k := qkernels[d]
		m := quantMatrix(b, rng, d, 1, 4096)
		nb := m.cols / k.blockLen
		qx := make([]byte, k.actBytes(m.cols))
		k.quantize(qx, randVec(rng, m.cols))
		w := m.raw
		variants := map[string]func(w, x []byte, nb int) float32{
			"go":   k.dot,
			"neon": func(w, x []byte, nb int) float32 { return ak.neon(unsafe.SliceData(w), unsafe.SliceData(x), nb) },
		}
		if haveSDOT {
			variants["sdot"] = func(w, x []byte, nb int) float32 { return ak.sdot(unsafe.SliceData(w), unsafe.SliceData(x), nb) }
		}
		for _, name := range []string{"go", "neon", "sdot"} {
			if f, ok := variants[name]; ok {
				b.Run(d.String()+"/"+name, func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					for b.Loop() {
						f(w, qx, nb)
					}
				})
			}
		}
	}
}
