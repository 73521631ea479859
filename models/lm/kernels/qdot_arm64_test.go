package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// TestNEONKernelsMatchGo runs both arm64 kernels of every type that has
// them, base NEON always and SDOT where the CPU has it, against the Go
// kernel, bit for bit, with the four-token ones where a type has them
// (TestQuantAssemblyMatchesGo covers only the ones that fastDot and
// fastDot4 select). Under qemu, TestArm64KernelsUnderQEMU runs it on a CPU
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
		type variant struct {
			one  func(w, x *byte, nb int) float32
			four func(w, x *byte, xstride, nb int, out *[4]float32)
		}
		variants := map[string]variant{"neon": {k.neon, k.neon4}}
		if haveSDOT {
			variants["sdot"] = variant{k.sdot, k.sdot4}
		}
		for _, name := range []string{"neon", "sdot"} {
			v, ok := variants[name]
			if !ok {
				continue
			}
			one := func(w, x []byte, nb int) float32 { return v.one(unsafe.SliceData(w), unsafe.SliceData(x), nb) }
			var four func(w, x []byte, stride, nb int, out *[4]float32)
			if v.four != nil {
				four = func(w, x []byte, stride, nb int, out *[4]float32) {
					v.four(unsafe.SliceData(w), unsafe.SliceData(x), stride, nb, out)
				}
			}
			kernelMatchesGo(t, rng, d, d.String()+" "+name, one, four)
			t.Logf("%s %s kernel equals the Go kernel", d, name)
			if four != nil {
				t.Logf("%s %s ×4 kernel equals the Go kernel", d, name)
			}
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

// TestI8MMKernelsMatchGo runs each two-row, two-token SMMLA kernel against
// the Go kernel, bit for bit, on CPUs with i8mm (under qemu: -cpu max), with
// padding between the rows and between the tokens so a kernel that mixes up
// its strides fails. TestQuantMulBatchInvariant and TestGEMMMatchesPerRow
// run them inside the GEMM.
func TestI8MMKernelsMatchGo(t *testing.T) {
	if !haveI8MM {
		t.Skip("no i8mm on this CPU")
	}
	rng := rand.New(rand.NewPCG(19, 20))
	for d, f := range i8mmKernels {
		k := qkernels[d]
		bb, _ := d.RowBytes(k.blockLen)
		for trial := range 200 {
			nb := 1 + trial%5
			wstride, ab := nb*bb+trial%3, k.actBytes(nb*k.blockLen)
			xstride := ab + 8*(trial%2)
			// Random block bytes (every scale and bit pattern) with
			// small finite f16 factors, as kernelMatchesGo makes them.
			w := make([]byte, wstride+nb*bb)
			for i := range w {
				w[i] = byte(rng.Uint32())
			}
			for _, r0 := range []int{0, wstride} {
				for b := range nb {
					for _, off := range f16Fields(d) {
						binary.LittleEndian.PutUint16(w[r0+b*bb+off:], gguf.F32ToF16(float32(rng.NormFloat64()*0.01)))
					}
				}
			}
			qx := make([]byte, xstride+ab)
			k.quantize(qx, randVec(rng, nb*k.blockLen))
			k.quantize(qx[xstride:], randVec(rng, nb*k.blockLen))
			var out [4]float32
			f(unsafe.SliceData(w), wstride, unsafe.SliceData(qx), xstride, nb, &out)
			for i, got := range out {
				r, tok := i/2, i%2
				want := k.dot(w[r*wstride:], qx[tok*xstride:], nb)
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%s trial %d (%d blocks) row %d token %d: i8mm %v, Go %v", d, trial, nb, r, tok, got, want)
				}
			}
		}
		t.Logf("%s i8mm kernel equals the Go kernel", d)
	}
}

// BenchmarkI8MMKernels times two 4,096-column rows against two tokens per
// type: four SDOT calls against one SMMLA call. Under qemu (-cpu max) it is
// a sanity check only: emulated speed is not hardware speed.
func BenchmarkI8MMKernels(b *testing.B) {
	if !haveI8MM || !haveSDOT {
		b.Skip("needs i8mm and SDOT")
	}
	rng := rand.New(rand.NewPCG(25, 26))
	for d, f := range i8mmKernels {
		k, sdot := qkernels[d], arm64Kernels[d].sdot
		m := quantMatrix(b, rng, d, 2, 4096)
		nb, ab := m.cols/k.blockLen, k.actBytes(m.cols)
		qx := make([]byte, 2*ab)
		k.quantize(qx, randVec(rng, m.cols))
		k.quantize(qx[ab:], randVec(rng, m.cols))
		w := m.raw
		b.Run(d.String()+"/sdot", func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				for i := range 4 {
					sdot(&w[i/2*m.rowBytes], &qx[i%2*ab], nb)
				}
			}
		})
		b.Run(d.String()+"/i8mm", func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			var out [4]float32
			for b.Loop() {
				f(&w[0], m.rowBytes, &qx[0], ab, nb, &out)
			}
		})
	}
}
