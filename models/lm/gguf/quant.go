package gguf

import (
	"encoding/binary"
	"math"
)

// Block layouts (ggml-common.h), all little-endian, f16 = IEEE half:
//
//	Q4_0  d f16, qs[16]: value j = (qs[j]&15 − 8)·d, value j+16 = (qs[j]>>4 − 8)·d
//	Q4_1  d f16, m f16, qs[16]: as Q4_0 without the −8, times d plus m
//	Q5_0  d f16, qh u32, qs[16]: the fifth bit of value j is qh bit j; q − 16
//	Q5_1  d f16, m f16, qh u32, qs[16]: as Q5_0 without the −16, plus m
//	Q8_0  d f16, qs[32] int8
//	Q2_K  scales[16] (4-bit scale | 4-bit min << 4 per 16 values), qs[64]
//	      (2 bits), d f16, dmin f16: value = d·sc·q − dmin·m
//	Q3_K  hmask[32] (high bit set means no −4), qs[64] (low 2 bits),
//	      scales[12] (sixteen 6-bit scales, offset 32), d f16
//	Q4_K  d f16, dmin f16, scales[12] (eight 6-bit scales and mins per 32
//	      values), qs[128]: value = d·sc·q − dmin·m
//	Q5_K  as Q4_K plus qh[32] (the fifth bits) before qs
//	Q6_K  ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8 (per
//	      16 values), d f16: value = d·sc·(q − 32)
//
// Within a 128-value half of a K-quant super-block the 2-bit planes are
// interleaved: byte l of a 32-byte plane holds values l, l+32, l+64, l+96 at
// shifts 0, 2, 4, 6. The dequantizers round to float32 after every product
// and sum, as ggml's C reference does (no fused multiply-add).

// dequantizers and quantizers are the per-block codecs of the block types.
var (
	dequantizers = map[DType]func(dst []float32, b []byte){
		Q4_0: deqQ4_0, Q4_1: deqQ4_1, Q5_0: deqQ5_0, Q5_1: deqQ5_1, Q8_0: deqQ8_0,
		Q2_K: deqQ2K, Q3_K: deqQ3K, Q4_K: deqQ4K, Q5_K: deqQ5K, Q6_K: deqQ6K,
	}
	quantizers = map[DType]func(b []byte, x []float32){
		Q4_0: quantQ4_0, Q4_1: quantQ4_1, Q5_0: quantQ5_0, Q5_1: quantQ5_1, Q8_0: quantQ8_0,
		Q2_K: quantQ2K, Q3_K: quantQ3K, Q4_K: quantQ4K, Q5_K: quantQ5K, Q6_K: quantQ6K,
	}
)

func f16(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

func putF16(b []byte, v float32) { binary.LittleEndian.PutUint16(b, F32ToF16(v)) }

func deqQ4_0(y []float32, b []byte) {
	d, qs := f16(b), b[2:18]
	for j := range 16 {
		y[j] = float32(int(qs[j]&15)-8) * d
		y[j+16] = float32(int(qs[j]>>4)-8) * d
	}
}

func deqQ4_1(y []float32, b []byte) {
	d, m, qs := f16(b), f16(b[2:]), b[4:20]
	for j := range 16 {
		y[j] = float32(float32(qs[j]&15)*d) + m
		y[j+16] = float32(float32(qs[j]>>4)*d) + m
	}
}

func deqQ5_0(y []float32, b []byte) {
	d, qh, qs := f16(b), binary.LittleEndian.Uint32(b[2:]), b[6:22]
	for j := range 16 {
		lo := int(qs[j]&15) | int(qh>>j&1)<<4
		hi := int(qs[j]>>4) | int(qh>>(j+16)&1)<<4
		y[j] = float32(lo-16) * d
		y[j+16] = float32(hi-16) * d
	}
}

func deqQ5_1(y []float32, b []byte) {
	d, m, qh, qs := f16(b), f16(b[2:]), binary.LittleEndian.Uint32(b[4:]), b[8:24]
	for j := range 16 {
		lo := uint32(qs[j]&15) | (qh>>j&1)<<4
		hi := uint32(qs[j]>>4) | (qh>>(j+16)&1)<<4
		y[j] = float32(float32(lo)*d) + m
		y[j+16] = float32(float32(hi)*d) + m
	}
}

func deqQ8_0(y []float32, b []byte) {
	d, qs := f16(b), b[2:34]
	for j := range 32 {
		y[j] = float32(int8(qs[j])) * d
	}
}

func deqQ2K(y []float32, b []byte) {
	scales, qs := b[:16], b[16:80]
	d, dmin := f16(b[80:]), f16(b[82:])
	for i := range QK {
		half, o := i/128, i%128
		q := qs[32*half+o%32] >> (2 * (o / 32)) & 3
		sc := scales[i/16]
		dl, ml := d*float32(sc&15), dmin*float32(sc>>4)
		y[i] = float32(dl*float32(q)) - ml
	}
}

// ScalesQ3K unpacks Q3_K's twelve scale bytes into its sixteen signed
// scales (the stored 6-bit value minus 32).
func ScalesQ3K(s []byte) [16]int8 {
	var out [16]int8
	for j := range 16 {
		lo := s[j%8] >> (4 * (j / 8)) & 15
		hi := s[8+j%4] >> (2 * (j / 4)) & 3
		out[j] = int8(lo|hi<<4) - 32
	}
	return out
}

func deqQ3K(y []float32, b []byte) {
	hmask, qs, d := b[:32], b[32:96], f16(b[108:])
	sc := ScalesQ3K(b[96:108])
	for i := range QK {
		half, o := i/128, i%128
		l, j := o%32, o/32
		q := int(qs[32*half+l] >> (2 * j) & 3)
		if hmask[l]>>(4*half+j)&1 == 0 {
			q -= 4
		}
		y[i] = float32(d*float32(sc[i/16])) * float32(q)
	}
}

// ScaleMinK4 returns the 6-bit scale and min of sub-block j (0–7) from the
// twelve scale bytes of a Q4_K or Q5_K super-block.
func ScaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&15 | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

func deqQ4K(y []float32, b []byte) {
	d, dmin, scales, qs := f16(b), f16(b[2:]), b[4:16], b[16:144]
	for j := range 8 {
		sc, m := ScaleMinK4(j, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		plane := qs[32*(j/2) : 32*(j/2)+32]
		for l := range 32 {
			q := plane[l] >> (4 * (j % 2)) & 15
			y[32*j+l] = float32(d1*float32(q)) - m1
		}
	}
}

func deqQ5K(y []float32, b []byte) {
	d, dmin, scales, qh, qs := f16(b), f16(b[2:]), b[4:16], b[16:48], b[48:176]
	for j := range 8 {
		sc, m := ScaleMinK4(j, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		plane := qs[32*(j/2) : 32*(j/2)+32]
		for l := range 32 {
			q := plane[l]>>(4*(j%2))&15 | (qh[l]>>j&1)<<4
			y[32*j+l] = float32(d1*float32(q)) - m1
		}
	}
}

func deqQ6K(y []float32, b []byte) {
	ql, qh, sc, d := b[:128], b[128:192], b[192:208], f16(b[208:])
	for i := range QK {
		half, o := i/128, i%128
		l, j := o%32, o/32
		lo := ql[64*half+l+32*(j%2)] >> (4 * (j / 2)) & 15
		hi := qh[32*half+l] >> (2 * j) & 3
		q := int(lo|hi<<4) - 32
		y[i] = float32(d*float32(int8(sc[i/16]))) * float32(q)
	}
}

// The quantizers. Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 follow ggml's reference
// quantizers (quantize_row_*_ref) and write the same bytes; the K-quants
// pick each sub-block's scale (and min): Q4_K and Q5_K search as ggml's
// make_qkx2_quants does, Q3_K and Q6_K as its make_qx_quants, Q2_K takes
// the range; they then quantize the scales against the super-block's
// largest and round every value against its quantized scale. The Q6_K
// quantizer writes the same bytes as ggml's reference; for the others the
// layout, which is what any reader depends on, is the same and the error
// about the same (docs/engine.md).

func nearest(x float32) int { return int(math.RoundToEven(float64(x))) }

func clampInt(v, lo, hi int) int { return max(lo, min(hi, v)) }

// signedMax is the value of largest magnitude (keeping its sign).
func signedMax(x []float32) (amax, vmax float32) {
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, vmax = a, v
		}
	}
	return amax, vmax
}

func inv(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

func quantQ8_0(b []byte, x []float32) {
	amax, _ := signedMax(x)
	d := amax / 127
	id := inv(d)
	putF16(b, d)
	for j, v := range x {
		b[2+j] = byte(int8(math.Round(float64(v * id))))
	}
}

func quantQ4_0(b []byte, x []float32) {
	_, vmax := signedMax(x)
	d := vmax / -8
	id := inv(d)
	putF16(b, d)
	for j := range 16 {
		lo := min(15, int(int8(x[j]*id+8.5)))
		hi := min(15, int(int8(x[j+16]*id+8.5)))
		b[2+j] = byte(lo) | byte(hi)<<4
	}
}

func minMax(x []float32) (lo, hi float32) {
	lo, hi = float32(math.MaxFloat32), -float32(math.MaxFloat32)
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

func quantQ4_1(b []byte, x []float32) {
	lo, hi := minMax(x)
	d := (hi - lo) / 15
	id := inv(d)
	putF16(b, d)
	putF16(b[2:], lo)
	for j := range 16 {
		q0 := min(15, int(int8((x[j]-lo)*id+0.5)))
		q1 := min(15, int(int8((x[j+16]-lo)*id+0.5)))
		b[4+j] = byte(q0) | byte(q1)<<4
	}
}

// packQ5 stores 32 five-bit values: low nibbles in qs, fifth bits in qh.
func packQ5(qh, qs []byte, q func(j int) int) {
	var h uint32
	for j := range 16 {
		q0, q1 := q(j), q(j+16)
		qs[j] = byte(q0&15) | byte(q1&15)<<4
		h |= uint32(q0>>4&1)<<j | uint32(q1>>4&1)<<(j+16)
	}
	binary.LittleEndian.PutUint32(qh, h)
}

func quantQ5_0(b []byte, x []float32) {
	_, vmax := signedMax(x)
	d := vmax / -16
	id := inv(d)
	putF16(b, d)
	packQ5(b[2:6], b[6:22], func(j int) int { return min(31, int(int8(x[j]*id+16.5))) })
}

func quantQ5_1(b []byte, x []float32) {
	lo, hi := minMax(x)
	d := (hi - lo) / 31
	id := inv(d)
	putF16(b, d)
	putF16(b[2:], lo)
	packQ5(b[4:8], b[8:24], func(j int) int { return min(31, int(int8((x[j]-lo)*id+0.5))) })
}

// affineScales chooses, for each group of x of size g, a scale and a
// non-negative min so that value ≈ scale·q − min with q in [0, levels]; the
// range is widened to include 0, as ggml's K-quants require.
func affineScales(x []float32, g int, levels float32) (scales, mins []float32) {
	for s := 0; s < len(x); s += g {
		lo, hi := minMax(x[s : s+g])
		lo = min(lo, 0)
		scales = append(scales, (hi-lo)/levels)
		mins = append(mins, -lo)
	}
	return scales, mins
}

// searchAffine refines one group's scale and min the way ggml's
// make_qkx2_quants does: for 21 trial inverse scales around levels/range it
// rounds the values, solves the weighted least-squares scale and min for
// those levels (weights |x| plus the group's RMS, so large values count
// more), and keeps the pair with the least weighted error. min is returned
// as the non-negative amount subtracted.
func searchAffine(x []float32, levels int) (scale, min float32) {
	lo, hi := minMax(x)
	lo = float32(math.Min(float64(lo), 0))
	if hi == lo {
		return 0, -lo
	}
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	av := math.Sqrt(ss / float64(len(x)))
	w := make([]float64, len(x))
	for i, v := range x {
		w[i] = av + math.Abs(float64(v))
	}
	errOf := func(sc, mn float64) float64 {
		var e float64
		for i, v := range x {
			q := math.Max(0, math.Min(float64(levels), math.RoundToEven((float64(v)-mn)/sc)))
			d := sc*q + mn - float64(v)
			e += w[i] * d * d
		}
		return e
	}
	bestS, bestM := float64(hi-lo)/float64(levels), float64(lo)
	best := errOf(bestS, bestM)
	for step := 0; step <= 20; step++ {
		iscale := (float64(levels) - 1 + 0.1*float64(step)) / float64(hi-lo)
		var sw, sx, sl, sl2, sxl float64
		for i, v := range x {
			l := math.Max(0, math.Min(float64(levels), math.RoundToEven(iscale*(float64(v)-float64(lo)))))
			sw += w[i]
			sx += w[i] * float64(v)
			sl += w[i] * l
			sl2 += w[i] * l * l
			sxl += w[i] * l * float64(v)
		}
		D := sw*sl2 - sl*sl
		if D <= 0 {
			continue
		}
		sc, mn := (sw*sxl-sx*sl)/D, (sl2*sx-sl*sxl)/D
		if mn > 0 {
			mn, sc = 0, sxl/sl2
		}
		if sc <= 0 {
			continue
		}
		if e := errOf(sc, mn); e < best {
			best, bestS, bestM = e, sc, mn
		}
	}
	return float32(bestS), float32(-bestM)
}

// superScale quantizes non-negative per-group values v against their
// maximum: d = max/levels (stored f16) and each q = round(v/d) in [0, levels].
func superScale(v []float32, levels int) (d float32, q []int) {
	var hi float32
	for _, s := range v {
		hi = max(hi, s)
	}
	d = F16ToF32(F32ToF16(hi / float32(levels)))
	id := inv(d)
	for _, s := range v {
		q = append(q, clampInt(nearest(s*id), 0, levels))
	}
	return d, q
}

// affineQuants rounds value x against scale dl and min ml: q = round((x+ml)/dl).
func affineQuant(x, dl, ml float32, levels int) int {
	if dl == 0 {
		return 0
	}
	return clampInt(nearest((x+ml)/dl), 0, levels)
}

// packScalesK4 stores eight 6-bit scales and mins as get_scale_min_k4 reads them.
func packScalesK4(s []byte, sc, m []int) {
	for j := range 4 {
		s[j] = byte(sc[j]) | byte(sc[j+4]>>4)<<6
		s[j+4] = byte(m[j]) | byte(m[j+4]>>4)<<6
		s[j+8] = byte(sc[j+4]&15) | byte(m[j+4]&15)<<4
	}
}

// quantK4 is Q4_K (levels 15) and Q5_K (levels 31): it returns the
// sub-block quants and writes d, dmin and the scales.
func quantK4(b []byte, x []float32, levels int) [QK]int {
	var scales, mins []float32
	for s := 0; s < QK; s += 32 {
		sc, mn := searchAffine(x[s:s+32], levels)
		scales, mins = append(scales, sc), append(mins, mn)
	}
	d, sc := superScale(scales, 63)
	dmin, m := superScale(mins, 63)
	putF16(b, d)
	putF16(b[2:], dmin)
	packScalesK4(b[4:16], sc, m)
	var q [QK]int
	for i := range QK {
		q[i] = affineQuant(x[i], d*float32(sc[i/32]), dmin*float32(m[i/32]), levels)
	}
	return q
}

func quantQ4K(b []byte, x []float32) {
	q := quantK4(b, x, 15)
	qs := b[16:144]
	for i := range QK {
		j, l := i/32, i%32
		qs[32*(j/2)+l] |= byte(q[i]) << (4 * (j % 2))
	}
}

func quantQ5K(b []byte, x []float32) {
	q := quantK4(b, x, 31)
	qh, qs := b[16:48], b[48:176]
	for i := range QK {
		j, l := i/32, i%32
		qs[32*(j/2)+l] |= byte(q[i]&15) << (4 * (j % 2))
		qh[l] |= byte(q[i]>>4) << j
	}
}

// put2 stores 2-bit value q of value i in a Q2_K/Q3_K qs plane.
func put2(qs []byte, i, q int) {
	half, o := i/128, i%128
	qs[32*half+o%32] |= byte(q&3) << (2 * (o / 32))
}

func quantQ2K(b []byte, x []float32) {
	scales, mins := affineScales(x, 16, 3)
	d, sc := superScale(scales, 15)
	dmin, m := superScale(mins, 15)
	for g := range 16 {
		b[g] = byte(sc[g]) | byte(m[g])<<4
	}
	putF16(b[80:], d)
	putF16(b[82:], dmin)
	for i := range QK {
		put2(b[16:80], i, affineQuant(x[i], d*float32(sc[i/16]), dmin*float32(m[i/16]), 3))
	}
}

// symScales gives each group of 16 values its searchSym scale for levels
// lo…−lo−1 (lo −4 for Q3_K, −32 for Q6_K), then quantizes those
// scales as signed integers in [−smax−1, smax] against the largest of them
// (ggml's choice of sign: the extreme becomes the most negative level).
func symScales(x []float32, lo float32, smax int) (d float32, sc []int) {
	var gs []float32
	for s := 0; s < len(x); s += 16 {
		gs = append(gs, searchSym(x[s:s+16], int(-lo)))
	}
	_, smaxv := signedMax(gs)
	if smaxv == 0 {
		return 0, make([]int, len(gs))
	}
	iscale := -float32(smax+1) / smaxv
	for _, s := range gs {
		sc = append(sc, clampInt(nearest(iscale*s), -smax-1, smax))
	}
	return 1 / iscale, sc
}

// searchSym is a group's scale for levels −nmax…nmax−1, chosen as ggml's
// make_qx_quants does: 19 trial inverse scales around −nmax/max, each
// scored by the x²-weighted least-squares fit of its rounded levels, the
// best fit's scale kept.
func searchSym(x []float32, nmax int) float32 {
	_, vmax := signedMax(x)
	if vmax == 0 {
		return 0
	}
	best, scale := 0.0, float64(vmax)/float64(-nmax)
	for step := -9; step <= 9; step++ {
		iscale := -(float64(nmax) + 0.1*float64(step)) / float64(vmax)
		var sumlx, suml2 float64
		for _, v := range x {
			l := math.Max(float64(-nmax), math.Min(float64(nmax-1), math.RoundToEven(iscale*float64(v))))
			w := float64(v) * float64(v)
			sumlx += w * float64(v) * l
			suml2 += w * l * l
		}
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			best, scale = sumlx*sumlx/suml2, sumlx/suml2
		}
	}
	return float32(scale)
}

// symQuant rounds x against scale dl into [lo, hi].
func symQuant(x, dl float32, lo, hi int) int {
	if dl == 0 {
		return 0
	}
	return clampInt(nearest(x/dl), lo, hi)
}

func quantQ3K(b []byte, x []float32) {
	d, sc := symScales(x, -4, 31)
	d = F16ToF32(F32ToF16(d))
	putF16(b[108:], d)
	s := b[96:108]
	for j := range 16 {
		u := byte(sc[j] + 32)
		s[j%8] |= (u & 15) << (4 * (j / 8))
		s[8+j%4] |= (u >> 4) << (2 * (j / 4))
	}
	for i := range QK {
		q := symQuant(x[i], d*float32(sc[i/16]), -4, 3) + 4
		if q >= 4 {
			half, o := i/128, i%128
			b[o%32] |= 1 << (4*half + o/32)
			q -= 4
		}
		put2(b[32:96], i, q)
	}
}

func quantQ6K(b []byte, x []float32) {
	d, sc := symScales(x, -32, 127)
	d = F16ToF32(F32ToF16(d))
	putF16(b[208:], d)
	ql, qh := b[:128], b[128:192]
	for g := range 16 {
		b[192+g] = byte(int8(sc[g]))
	}
	for i := range QK {
		q := symQuant(x[i], d*float32(sc[i/16]), -32, 31) + 32
		half, o := i/128, i%128
		l, j := o%32, o/32
		ql[64*half+l+32*(j%2)] |= byte(q&15) << (4 * (j / 2))
		qh[32*half+l] |= byte(q>>4) << (2 * j)
	}
}
