package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// The references below are written from the format description (ggml-common.h
// and dequantize_row_* in ggml-quants.c) in ggml's own loop order, not from
// quant.go's per-value indexing, so a layout slip in either shows up.

func h(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

func refBlock(d DType, b []byte) []float32 {
	var y []float32
	put := func(v float32) { y = append(y, v) }
	switch d {
	case Q4_0, Q4_1:
		qs, sc, m := b[2:18], h(b), float32(0)
		if d == Q4_1 {
			qs, m = b[4:20], h(b[2:])
		}
		lo, hi := make([]float32, 16), make([]float32, 16)
		for j := 0; j < 16; j++ {
			a, c := float32(qs[j]&0x0F), float32(qs[j]>>4)
			if d == Q4_0 {
				lo[j], hi[j] = (a-8)*sc, (c-8)*sc
			} else {
				lo[j], hi[j] = float32(a*sc)+m, float32(c*sc)+m
			}
		}
		y = append(lo, hi...)
	case Q5_0, Q5_1:
		off := 2
		if d == Q5_1 {
			off = 4
		}
		sc, qh, qs := h(b), binary.LittleEndian.Uint32(b[off:]), b[off+4:off+20]
		lo, hi := make([]float32, 16), make([]float32, 16)
		for j := 0; j < 16; j++ {
			xh0 := ((qh >> uint(j)) << 4) & 0x10
			xh1 := (qh >> uint(j+12)) & 0x10
			x0, x1 := int32(uint32(qs[j]&0x0F)|xh0), int32(uint32(qs[j]>>4)|xh1)
			if d == Q5_0 {
				lo[j], hi[j] = float32(x0-16)*sc, float32(x1-16)*sc
			} else {
				m := h(b[2:])
				lo[j], hi[j] = float32(float32(x0)*sc)+m, float32(float32(x1)*sc)+m
			}
		}
		y = append(lo, hi...)
	case Q8_0:
		for j := 0; j < 32; j++ {
			put(float32(int8(b[2+j])) * h(b))
		}
	case Q2_K:
		sc, q, dd, mn := b[0:16], b[16:80], h(b[80:]), h(b[82:])
		is := 0
		for n := 0; n < 256; n += 128 {
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					s := sc[is]
					is++
					dl, ml := dd*float32(s&0xF), mn*float32(s>>4)
					for l := 0; l < 16; l++ {
						put(float32(dl*float32((q[l+16*half]>>shift)&3)) - ml)
					}
				}
			}
			q = q[32:]
		}
	case Q3_K:
		hm, q, dAll := b[0:32], b[32:96], h(b[108:])
		var aux [4]uint32
		for i := range 3 {
			aux[i] = binary.LittleEndian.Uint32(b[96+4*i:])
		}
		tmp := aux[2]
		const k1, k2 = 0x03030303, 0x0f0f0f0f
		aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4)
		aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4)
		aux[0] = (aux[0] & k2) | (((tmp >> 0) & k1) << 4)
		aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4)
		var scales [16]int8
		for i := range 16 {
			scales[i] = int8(aux[i/4] >> (8 * (i % 4)))
		}
		is, m := 0, byte(1)
		for n := 0; n < 256; n += 128 {
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					dl := dAll * float32(scales[is]-32)
					is++
					for l := 16 * half; l < 16*half+16; l++ {
						v := int8((q[l] >> shift) & 3)
						if hm[l]&m == 0 {
							v -= 4
						}
						put(dl * float32(v))
					}
				}
				m <<= 1
			}
			q = q[32:]
		}
	case Q4_K, Q5_K:
		dd, mn, sc := h(b), h(b[2:]), b[4:16]
		ql, qh := b[16:144], []byte(nil)
		if d == Q5_K {
			qh, ql = b[16:48], b[48:176]
		}
		getSM := func(j int) (byte, byte) {
			if j < 4 {
				return sc[j] & 63, sc[j+4] & 63
			}
			return (sc[j+4] & 0xF) | ((sc[j-4] >> 6) << 4), (sc[j+4] >> 4) | ((sc[j] >> 6) << 4)
		}
		is, u1, u2 := 0, byte(1), byte(2)
		for j := 0; j < 256; j += 64 {
			s1, m1 := getSM(is)
			s2, m2 := getSM(is + 1)
			d1, mm1, d2, mm2 := dd*float32(s1), mn*float32(m1), dd*float32(s2), mn*float32(m2)
			for pass := 0; pass < 2; pass++ {
				for l := 0; l < 32; l++ {
					v := ql[l] & 0xF
					dl, ml, u := d1, mm1, u1
					if pass == 1 {
						v, dl, ml, u = ql[l]>>4, d2, mm2, u2
					}
					if qh != nil && qh[l]&u != 0 {
						v += 16
					}
					put(float32(dl*float32(v)) - ml)
				}
			}
			ql = ql[32:]
			is += 2
			u1 <<= 2
			u2 <<= 2
		}
	case Q6_K:
		ql, qh, sc, dd := b[0:128], b[128:192], b[192:208], h(b[208:])
		out := make([]float32, 256)
		for n := 0; n < 256; n += 128 {
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int8((ql[l]&0xF)|((qh[l]>>0)&3)<<4) - 32
				q2 := int8((ql[l+32]&0xF)|((qh[l]>>2)&3)<<4) - 32
				q3 := int8((ql[l]>>4)|((qh[l]>>4)&3)<<4) - 32
				q4 := int8((ql[l+32]>>4)|((qh[l]>>6)&3)<<4) - 32
				out[n+l] = float32(dd*float32(int8(sc[is]))) * float32(q1)
				out[n+l+32] = float32(dd*float32(int8(sc[is+2]))) * float32(q2)
				out[n+l+64] = float32(dd*float32(int8(sc[is+4]))) * float32(q3)
				out[n+l+96] = float32(dd*float32(int8(sc[is+6]))) * float32(q4)
			}
			ql, qh, sc = ql[64:], qh[32:], sc[8:]
		}
		y = out
	case BF16:
		put(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	}
	return y
}

// randomBlocks is n blocks of random bytes whose f16 scale fields are small
// finite numbers, so the dequantized values are finite and comparable.
func randomBlocks(rng *rand.Rand, d DType, n int) []byte {
	ti := typeTable[d]
	raw := make([]byte, n*ti.bytes)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	var scaleAt []int
	switch d {
	case Q4_0, Q5_0, Q8_0, Q4_K, Q5_K:
		scaleAt = []int{0, 2}
	case Q4_1, Q5_1:
		scaleAt = []int{0, 2}
	case Q2_K:
		scaleAt = []int{80, 82}
	case Q3_K:
		scaleAt = []int{108}
	case Q6_K:
		scaleAt = []int{208}
	case BF16:
		scaleAt = []int{0}
	}
	for b := 0; b < n; b++ {
		for _, off := range scaleAt {
			v := float32(rng.NormFloat64() * 0.01)
			if d == BF16 {
				binary.LittleEndian.PutUint16(raw[b*ti.bytes+off:], F32ToBF16(v*100))
				continue
			}
			if (d == Q4_0 || d == Q5_0 || d == Q8_0) && off == 2 {
				continue // quants, not a scale
			}
			binary.LittleEndian.PutUint16(raw[b*ti.bytes+off:], F32ToF16(v))
		}
	}
	return raw
}

var blockTypes = []DType{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16}

func TestDequantizeMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, d := range blockTypes {
		ti := typeTable[d]
		const blocks = 9
		raw := randomBlocks(rng, d, blocks)
		got := make([]float32, blocks*ti.block)
		if err := Decode(got, raw, d); err != nil {
			t.Fatal(d, err)
		}
		for b := 0; b < blocks; b++ {
			want := refBlock(d, raw[b*ti.bytes:(b+1)*ti.bytes])
			if len(want) != ti.block {
				t.Fatalf("%s: reference gave %d values", d, len(want))
			}
			for i, w := range want {
				if g := got[b*ti.block+i]; math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("%s block %d value %d = %v, reference %v", d, b, i, g, w)
				}
			}
		}
	}
}

// TestQuantizeRoundTrip bounds each quantizer's error, relative to the
// block's RMS, by what its bit width allows, and checks the encoding decodes
// to the same values the reference reads.
func TestQuantizeRoundTrip(t *testing.T) {
	bound := map[DType]float64{Q8_0: 0.01, Q6_K: 0.04, Q5_0: 0.07, Q5_1: 0.07, Q5_K: 0.07,
		Q4_0: 0.14, Q4_1: 0.14, Q4_K: 0.14, Q3_K: 0.3, Q2_K: 0.5, BF16: 0.005, F16: 0.001}
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, 4*QK)
	for i := range x {
		x[i] = float32(rng.NormFloat64()) * float32(1+i/300) // varying scale across blocks
	}
	x[17] = 9 // an outlier
	for d, b := range bound {
		raw, err := Encode(nil, x, d)
		if err != nil {
			t.Fatal(d, err)
		}
		if n, _ := d.RowBytes(len(x)); len(raw) != n {
			t.Fatalf("%s: %d bytes, want %d", d, len(raw), n)
		}
		y := make([]float32, len(x))
		if err := Decode(y, raw, d); err != nil {
			t.Fatal(d, err)
		}
		var se, ss float64
		for i := range x {
			e := float64(y[i] - x[i])
			se += e * e
			ss += float64(x[i]) * float64(x[i])
		}
		rel := math.Sqrt(se / ss)
		t.Logf("%-5s relative RMS error %.4f", d, rel)
		if rel > b || math.IsNaN(rel) {
			t.Errorf("%s: relative RMS error %.4f > %.3f", d, rel, b)
		}
		if ti := typeTable[d]; ti.block > 1 {
			for blk := 0; blk < len(x)/ti.block; blk++ {
				want := refBlock(d, raw[blk*ti.bytes:(blk+1)*ti.bytes])
				for i, w := range want {
					if y[blk*ti.block+i] != w {
						t.Fatalf("%s: decode disagrees with the reference at %d", d, blk*ti.block+i)
					}
				}
			}
		}
	}
	// All-zero blocks quantize to zeros, not NaN.
	for _, d := range blockTypes {
		raw, _ := Encode(nil, make([]float32, QK), d)
		y := make([]float32, QK)
		_ = Decode(y, raw, d)
		for _, v := range y {
			if v != 0 {
				t.Fatalf("%s: zero block decodes to %v", d, v)
			}
		}
	}
}

func TestUnsupportedTypes(t *testing.T) {
	for _, tc := range []struct {
		d    DType
		name string
	}{{IQ2_XXS, "IQ2_XXS"}, {Q8_1, "Q8_1"}, {MXFP4, "MXFP4"}, {DType(99), "ggml_type(99)"}} {
		if _, err := Encode(nil, make([]float32, QK), tc.d); !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("Encode %v: %v", tc.d, err)
		}
		if err := Decode(make([]float32, QK), make([]byte, 4096), tc.d); !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("Decode %v: %v", tc.d, err)
		}
	}
	// A file holding a known but undecoded type parses; an unknown type
	// number is "unsupported", not "malformed".
	for _, tc := range []struct {
		d      DType
		parses bool
	}{{IQ4_XS, true}, {DType(77), false}} {
		raw := fileWithRawTensor(t, tc.d, 256, 2)
		f, err := Read(bytes.NewReader(raw), int64(len(raw)))
		if tc.parses {
			if err != nil {
				t.Fatalf("%v: %v", tc.d, err)
			}
			if _, err := f.Float32s(&f.Tensors[0]); !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), "IQ4_XS") || !strings.Contains(err.Error(), "w") {
				t.Errorf("Float32s: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrUnsupportedType) || errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `"w"`) {
			t.Errorf("%v: %v", tc.d, err)
		}
	}
}

// fileWithRawTensor writes a GGUF image with one tensor "w" of the given
// type and shape, its data zero bytes of the size the type's table entry
// (or, for unknown types, 1 KiB) says.
func fileWithRawTensor(t *testing.T, d DType, cols, rows int) []byte {
	t.Helper()
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	e := &encoder{w: bw}
	e.u32(Magic)
	e.u32(Version)
	e.u64(1)
	e.u64(0)
	e.str("w")
	e.u32(2)
	e.u64(uint64(cols))
	e.u64(uint64(rows))
	e.u32(uint32(d))
	e.u64(0)
	e.pad(DefaultAlignment)
	n := 1024
	if rb, err := d.RowBytes(cols); err == nil {
		n = rb * rows
	}
	e.bytes(make([]byte, n))
	if e.err != nil || bw.Flush() != nil {
		t.Fatal(e.err)
	}
	return buf.Bytes()
}

func TestParseDType(t *testing.T) {
	for _, s := range []string{"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "Q3_K", "q4_K", "q5_k", "q6_k"} {
		d, err := ParseDType(s)
		if err != nil || !strings.EqualFold(d.String(), s) {
			t.Errorf("ParseDType(%q) = %v, %v", s, d, err)
		}
	}
	if _, err := ParseDType("iq2_xxs"); err == nil {
		t.Error("iq2_xxs parsed")
	}
}

// FuzzDecode feeds Decode arbitrary bytes as any type and value count: it
// must decode or refuse (wrong size, unsupported type), never panic.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{1, 2, 3}, uint8(Q4_K), uint16(256))
	f.Add(make([]byte, 144), uint8(Q4_K), uint16(256))
	f.Add(make([]byte, 210), uint8(Q6_K), uint16(256))
	f.Add(make([]byte, 18), uint8(Q4_0), uint16(31))
	f.Fuzz(func(t *testing.T, raw []byte, typ uint8, n uint16) {
		d := DType(typ)
		dst := make([]float32, n)
		err := Decode(dst, raw, d)
		if err == nil {
			if want, _ := d.RowBytes(int(n)); want != len(raw) {
				t.Fatalf("%s: decoded %d bytes as %d values", d, len(raw), n)
			}
		}
	})
}
