package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

var quantTypes = []gguf.DType{gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q8_0, gguf.Q2_K, gguf.Q3_K, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K}

// armv7NEONTypes are the types with an armv7 NEON kernel (qdot_arm.go's
// armNEONKernels); the others run the Go kernels on 32-bit ARM. On arm,
// TestQuantAssemblyMatchesGo requires exactly these to have one and
// TestNEONKernelsMatchGo each of them to match the Go kernel;
// TestArmv7KernelsUnderQEMU requires each one's "neon kernel equals" line.
var armv7NEONTypes = []gguf.DType{gguf.Q8_0, gguf.Q5_0, gguf.Q4_0, gguf.Q4_K, gguf.Q6_K, gguf.Q4_1, gguf.Q5_1}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// quantMatrix encodes random rows×cols weights as d.
func quantMatrix(t testing.TB, rng *rand.Rand, d gguf.DType, rows, cols int) *Matrix {
	t.Helper()
	raw, err := gguf.Encode(nil, randVec(rng, rows*cols), d)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewRawMatrix(rows, cols, d, raw)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestQuantDotMatchesDequantized checks each integer kernel against the
// float64 dot product of the dequantized weight row with the dequantized
// activations: they differ only by float32 rounding of the block sums.
func TestQuantDotMatchesDequantized(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const cols = 3 * 256
	for _, d := range quantTypes {
		m := quantMatrix(t, rng, d, 5, cols)
		k := m.qk
		x := randVec(rng, cols)
		qx := make([]byte, k.actBytes(cols))
		k.quantize(qx, x)
		xd := dequantAct(k, qx, cols)
		w := make([]float32, cols)
		for r := range m.rows {
			m.RowInto(r, w)
			var want, mag float64
			for i := range w {
				want += float64(w[i]) * float64(xd[i])
				mag += math.Abs(float64(w[i]) * float64(xd[i]))
			}
			got := k.dot(m.raw[r*m.rowBytes:(r+1)*m.rowBytes], qx, cols/k.blockLen)
			if math.Abs(float64(got)-want) > 1e-5*mag {
				t.Errorf("%s row %d: kernel %v, dequantized %v (|terms| %v)", d, r, got, want, mag)
			}
			if f := fastDot(d); f != nil {
				if g := f(m.raw[r*m.rowBytes:(r+1)*m.rowBytes], qx, cols/k.blockLen); math.Float32bits(g) != math.Float32bits(got) {
					t.Errorf("%s row %d: assembly %v, Go %v", d, r, g, got)
				}
			}
		}
	}
}

// dequantAct decodes quantized activations back to float (d·q).
func dequantAct(k *qkernel, qx []byte, cols int) []float32 {
	out := make([]float32, cols)
	bl, ab, off := 32, act32Bytes, 8
	if k.superK {
		bl, ab, off = gguf.QK, actKBytes, 4
	}
	for b := 0; b < cols/bl; b++ {
		blk := qx[b*ab:]
		d := f32At(blk)
		for i := range bl {
			out[b*bl+i] = d * float32(int8(blk[off+i]))
		}
	}
	return out
}

// TestQuantActivationSums checks the per-block sums the kernels use for
// mins and offsets.
func TestQuantActivationSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	x := randVec(rng, 512)
	for _, superK := range []bool{false, true} {
		k := &qkernel{superK: superK}
		qx := make([]byte, k.actBytes(512))
		k.quantize(qx, x)
		if superK {
			for b := range 2 {
				blk := qx[b*actKBytes:]
				for g := range 16 {
					var s int
					for i := range 16 {
						s += int(int8(blk[4+16*g+i]))
					}
					if got := int(int16(uint16(blk[4+256+2*g]) | uint16(blk[4+256+2*g+1])<<8)); got != s {
						t.Fatalf("bsum %d/%d = %d, want %d", b, g, got, s)
					}
				}
			}
			continue
		}
		for b := range 16 {
			blk := qx[b*act32Bytes:]
			var s int32
			for i := range 32 {
				s += int32(int8(blk[8+i]))
			}
			if got := int32(uint32(blk[4]) | uint32(blk[5])<<8 | uint32(blk[6])<<16 | uint32(blk[7])<<24); got != s {
				t.Fatalf("sum %d = %d, want %d", b, got, s)
			}
		}
	}
}

// TestQuantMulBatchInvariant: every token's outputs are the same bits
// whether it is multiplied alone, in a batch of any size, on one thread or
// several (odd row counts give partial tiles).
func TestQuantMulBatchInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, d := range quantTypes {
		m := quantMatrix(t, rng, d, 131, 512)
		const n = 19
		x := randVec(rng, n*m.cols)
		all := make([]float32, n*m.rows)
		m.Mul(NewPool(3), all, x, n)
		one := make([]float32, m.rows)
		for tok := range n {
			m.Mul(NewPool(1), one, x[tok*m.cols:(tok+1)*m.cols], 1)
			for r := range m.rows {
				if math.Float32bits(one[r]) != math.Float32bits(all[tok*m.rows+r]) {
					t.Fatalf("%s token %d row %d: alone %v, batched %v", d, tok, r, one[r], all[tok*m.rows+r])
				}
			}
		}
	}
}

// TestQuantAssemblyMatchesGo runs each assembly kernel this CPU selects
// against the Go one (kernelMatchesGo). Where the CPU runs any (it has
// AVX2, ASIMD or, on 32-bit ARM, NEON), every quantized type must have one,
// except on 32-bit ARM, where exactly armv7NEONTypes must.
func TestQuantAssemblyMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	simd := fastDot(gguf.Q8_0) != nil
	for _, d := range quantTypes {
		fast := fastDot(d)
		want := runtime.GOARCH != "arm" || slices.Contains(armv7NEONTypes, d)
		if fast != nil && !want {
			t.Errorf("%s: an armv7 kernel that armv7NEONTypes does not list", d)
		}
		if fast == nil {
			if simd && want {
				t.Errorf("%s: no assembly kernel on a CPU that runs the others", d)
			}
			continue
		}
		kernelMatchesGo(t, rng, d, d.String(), fast, fastDot4(d))
		t.Logf("%s: assembly kernel equals the Go kernel", d)
	}
}

// kernelMatchesGo checks a one-token kernel (and a four-token one, if not
// nil) against the Go kernel of d, bit for bit, on random bytes (every
// scale, min and quant bit pattern, not only what the quantizer writes),
// with small finite f16 scales, over 1–5 blocks.
func kernelMatchesGo(t *testing.T, rng *rand.Rand, d gguf.DType, name string,
	fast func(w, x []byte, nb int) float32, f4 func(w, x []byte, stride, nb int, out *[4]float32)) {
	t.Helper()
	k := qkernels[d]
	bb, _ := d.RowBytes(k.blockLen)
	for trial := range 200 {
		nb := 1 + trial%5
		w := make([]byte, nb*bb)
		for i := range w {
			w[i] = byte(rng.Uint32())
		}
		for b := range nb {
			for _, off := range f16Fields(d) {
				binary.LittleEndian.PutUint16(w[b*bb+off:], gguf.F32ToF16(float32(rng.NormFloat64()*0.01)))
			}
		}
		ab := k.actBytes(nb * k.blockLen)
		qx := make([]byte, 4*ab)
		for tok := range 4 {
			k.quantize(qx[tok*ab:(tok+1)*ab], randVec(rng, nb*k.blockLen))
		}
		want, got := k.dot(w, qx[:ab], nb), fast(w, qx[:ab], nb)
		if math.Float32bits(want) != math.Float32bits(got) {
			t.Fatalf("%s trial %d (%d blocks): assembly %v, Go %v", name, trial, nb, got, want)
		}
		if f4 == nil {
			continue
		}
		var out [4]float32
		f4(w, qx, ab, nb, &out)
		for tok, g := range out {
			if want := k.dot(w, qx[tok*ab:(tok+1)*ab], nb); math.Float32bits(g) != math.Float32bits(want) {
				t.Fatalf("%s ×4 kernel, trial %d token %d: %v, Go %v", name, trial, tok, g, want)
			}
		}
	}
}

// f16Fields are the byte offsets of a block's f16 scale fields.
func f16Fields(d gguf.DType) []int {
	switch d {
	case gguf.Q8_0, gguf.Q4_0:
		return []int{0}
	case gguf.Q4_K, gguf.Q5_K, gguf.Q4_1, gguf.Q5_1:
		return []int{0, 2}
	case gguf.Q6_K:
		return []int{208}
	case gguf.Q3_K:
		return []int{108}
	case gguf.Q2_K:
		return []int{80, 82}
	}
	return []int{0}
}

// BenchmarkQuantDot times one 4,096-column row dot product per type with the
// Go kernel ("go") and with the assembly kernel this CPU selects ("simd",
// where there is one), in the same run so their ratio is the speed-up.
func BenchmarkQuantDot(b *testing.B) {
	rng := rand.New(rand.NewPCG(19, 20))
	for _, d := range quantTypes {
		k := qkernels[d]
		m := quantMatrix(b, rng, d, 1, 4096)
		nb := m.cols / k.blockLen
		qx := make([]byte, k.actBytes(m.cols))
		k.quantize(qx, randVec(rng, m.cols))
		for _, v := range []struct {
			name string
			dot  func(w, x []byte, nb int) float32
		}{{"go", k.dot}, {"simd", fastDot(d)}} {
			if v.dot == nil {
				continue
			}
			b.Run(d.String()+"/"+v.name, func(b *testing.B) {
				b.SetBytes(int64(len(m.raw)))
				for b.Loop() {
					v.dot(m.raw, qx, nb)
				}
			})
		}
	}
}
