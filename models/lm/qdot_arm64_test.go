package lm

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// TestQ8_0NEONKernelsMatchGo runs both arm64 Q8_0 kernels (SDOT where the
// CPU has it, and base NEON always) against the Go kernel, bit for bit.
func TestQ8_0NEONKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	k := qkernels[gguf.Q8_0]
	kernels := map[string]func(w, x *byte, nb int) float32{"neon": dotQ8_0NEON}
	if haveSDOT {
		kernels["sdot"] = dotQ8_0SDOT
	} else {
		t.Log("no SDOT on this CPU: base NEON kernel only")
	}
	for trial := range 300 {
		nb := 1 + trial%7
		w := make([]byte, nb*34)
		for i := range w {
			w[i] = byte(rng.Uint32())
		}
		for b := range nb {
			copy(w[b*34:], []byte{byte(rng.Uint32()), byte(rng.Uint32()&0x1f | 0x10)}) // f16 scale, exponent kept moderate
		}
		qx := make([]byte, k.actBytes(nb*32))
		k.quantize(qx, randVec(rng, nb*32))
		want := k.dot(w, qx, nb)
		for name, f := range kernels {
			if got := f(unsafe.SliceData(w), unsafe.SliceData(qx), nb); math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s trial %d (%d blocks): %v, Go %v", name, trial, nb, got, want)
			}
		}
	}
}
