//go:build arm && arm.6

package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// TestNEONKernelsMatchGo (the armv7 one; qdot_arm64_test.go has arm64's):
// every type in armv7NEONTypes must have a kernel, and only those, and where
// the CPU has NEON each runs against the Go kernel bit for bit
// (kernelMatchesGo). TestArmv7KernelsUnderQEMU runs it on a CPU with NEON
// (cortex-a15) and on one without (cortex-r5f, where it must say so).
func TestNEONKernelsMatchGo(t *testing.T) {
	for _, d := range quantTypes {
		_, has := armNEONKernels[d]
		if listed := slices.Contains(armv7NEONTypes, d); has != listed {
			t.Errorf("%s: armv7 kernel %v, listed in armv7NEONTypes %v", d, has, listed)
		}
	}
	if !haveNEON {
		for _, d := range quantTypes {
			if fastDot(d) != nil {
				t.Errorf("%s: fastDot gives a NEON kernel on a CPU without NEON", d)
			}
		}
		t.Skip("no NEON on this CPU: the Go kernels run")
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for _, d := range armv7NEONTypes {
		f, ok := armNEONKernels[d]
		if !ok {
			continue // reported above
		}
		one := func(w, x []byte, nb int) float32 { return f(unsafe.SliceData(w), unsafe.SliceData(x), nb) }
		kernelMatchesGo(t, rng, d, d.String()+" neon", one, nil)
		t.Logf("%s neon kernel equals the Go kernel", d)
	}
}

// TestNEONFallback: with NEON switched off (the hook a CPU without it
// sets), fastDot gives no kernel and a product takes the Go kernels' bits,
// the same bits the NEON kernels give.
func TestNEONFallback(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, d := range armv7NEONTypes {
		m := quantMatrix(t, rng, d, 7, 256)
		x := randVec(rng, 3*m.cols)
		fast := make([]float32, 3*m.rows)
		m.Mul(NewPool(1), fast, x, 3)
		had := haveNEON
		haveNEON = false
		if fastDot(d) != nil {
			t.Errorf("%s: fastDot gives a kernel with NEON off", d)
		}
		slow := make([]float32, 3*m.rows)
		m.Mul(NewPool(1), slow, x, 3)
		haveNEON = had
		for i := range fast {
			if math.Float32bits(fast[i]) != math.Float32bits(slow[i]) {
				t.Fatalf("%s output %d: %v with NEON (if the CPU has it), %v without", d, i, fast[i], slow[i])
			}
		}
	}
}

// TestF16BitsARM checks the kernels' f16 conversion (F16_BITS, qdot_arm.s,
// integer instructions only) against gguf.F16ToF32 on all 65,536 inputs:
// zeros, subnormals, normals, infinities and NaNs with their payloads.
func TestF16BitsARM(t *testing.T) {
	var b [2]byte
	for h := range 1 << 16 {
		b[0], b[1] = byte(h), byte(h>>8)
		want := math.Float32bits(gguf.F16ToF32(uint16(h)))
		if got := f16BitsARM(&b[0]); got != want {
			t.Fatalf("f16 %#04x: %#08x, want %#08x", h, got, want)
		}
	}
}

// TestNEONKernelsSpecialScales runs the NEON kernels against the Go ones
// with every f16 scale field a random bit pattern (subnormal, zero,
// infinite and NaN scales included), so the float steps must match the Go
// kernel's VFP operations in IEEE corner cases too: Inf·0, NaN payloads,
// subnormal products (which NEON's own float arithmetic would flush).
func TestNEONKernelsSpecialScales(t *testing.T) {
	if !haveNEON {
		t.Skip("no NEON on this CPU")
	}
	rng := rand.New(rand.NewPCG(23, 24))
	for _, d := range armv7NEONTypes {
		f, ok := armNEONKernels[d]
		if !ok {
			continue // TestNEONKernelsMatchGo reports it
		}
		k := qkernels[d]
		bb, _ := d.RowBytes(k.blockLen)
		for trial := range 300 {
			nb := 1 + trial%4
			w := make([]byte, nb*bb)
			for i := range w {
				w[i] = byte(rng.Uint32())
			}
			// Half the trials have activations near float32's smallest
			// normal (dx about 3e-38), so float32(dw·dx) and the lane
			// products are often subnormal.
			x := randVec(rng, nb*k.blockLen)
			if trial%2 == 0 {
				for i := range x {
					x[i] *= 1e-36
				}
			}
			qx := make([]byte, k.actBytes(nb*k.blockLen))
			k.quantize(qx, x)
			want, got := k.dot(w, qx, nb), f(&w[0], &qx[0], nb)
			if math.Float32bits(want) != math.Float32bits(got) {
				t.Fatalf("%s trial %d: NEON %v (%#08x), Go %v (%#08x)", d, trial, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
}
