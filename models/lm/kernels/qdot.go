package kernels

import (
	"encoding/binary"
	"math"

	"github.com/phaseless/phaseless/models/lm/gguf"
)

// Quantized matrix products never expand weights to float. Each token's
// activations are quantized once per product to 8 bits per value, as ggml
// does (its q8_0 and q8_K blocks), and every (token, row) result is an
// integer dot product per block, scaled:
//
//	32-value types (Q4_0 … Q8_0): activation block = d f32, Σq i32, q[32] i8.
//	The block's products are summed as int32 in eight lanes of four
//	consecutive values (lane l: values 4l…4l+3, what VPMADDUBSW+VPMADDWD
//	produce), lane l accumulates float32(dw·dx)·lane as float32 (multiply,
//	then add, no fusion), and the eight lanes are reduced as REDUCE8 does:
//	((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)). Q4_1/Q5_1 add m·dx·Σq in a
//	separate scalar sum.
//
//	K-quants: activation super-block = d f32, q[256] i8, Σq per 16 values
//	i16[16]. Each super-block's integer sum Σ_g scale_g·Σ q·x (and, for types
//	with mins, Σ_g min_g·Σx_g) is exact, so any order gives the same int32;
//	it enters a scalar float32 sum as acc += float32(dw·dx)·isum, then
//	acc −= float32(dmin·dx)·msum.
//
// The assembly kernels compute exactly these operations, so every kernel,
// batch size and thread count gives the same bits (the tests check it).

// Activation block sizes in bytes.
const (
	act32Bytes = 4 + 4 + 32
	actKBytes  = 4 + gguf.QK + 2*16
)

// qkernel is how one weight type multiplies: the activation format and the
// (row, token) dot product over nb blocks.
type qkernel struct {
	superK   bool // activations are q8_K (else q8_0 with sums)
	blockLen int  // values per weight block
	dot      func(w, x []byte, nb int) float32
}

func (k *qkernel) actBytes(cols int) int {
	if k.superK {
		return cols / gguf.QK * actKBytes
	}
	return cols / 32 * act32Bytes
}

// quantize writes one token's activations x in k's format into dst.
func (k *qkernel) quantize(dst []byte, x []float32) {
	bl, ab := 32, act32Bytes
	if k.superK {
		bl, ab = gguf.QK, actKBytes
	}
	for b := 0; b < len(x)/bl; b++ {
		quantizeAct(dst[b*ab:(b+1)*ab], x[b*bl:(b+1)*bl], k.superK)
	}
}

// quantizeAct quantizes one activation block: d = max|x|/127, q = round(x/d).
func quantizeAct(dst []byte, x []float32, superK bool) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	id := float32(0)
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint32(dst, math.Float32bits(d))
	qs := dst[8:]
	if superK {
		qs = dst[4:]
	}
	var sum int32
	var bs [16]int32
	for i, v := range x {
		q := int8(math.Round(float64(v * id)))
		qs[i] = byte(q)
		sum += int32(q)
		bs[i/16] += int32(q)
	}
	if !superK {
		binary.LittleEndian.PutUint32(dst[4:], uint32(sum))
		return
	}
	for g := range 16 {
		binary.LittleEndian.PutUint16(dst[4+gguf.QK+2*g:], uint16(int16(bs[g])))
	}
}

var qkernels = map[gguf.DType]*qkernel{
	gguf.Q4_0: {blockLen: 32, dot: dot32(gguf.Q4_0)},
	gguf.Q4_1: {blockLen: 32, dot: dot32(gguf.Q4_1)},
	gguf.Q5_0: {blockLen: 32, dot: dot32(gguf.Q5_0)},
	gguf.Q5_1: {blockLen: 32, dot: dot32(gguf.Q5_1)},
	gguf.Q8_0: {blockLen: 32, dot: dotQ8_0Go},
	gguf.Q2_K: {superK: true, blockLen: gguf.QK, dot: dotK(gguf.Q2_K)},
	gguf.Q3_K: {superK: true, blockLen: gguf.QK, dot: dotK(gguf.Q3_K)},
	gguf.Q4_K: {superK: true, blockLen: gguf.QK, dot: dotK(gguf.Q4_K)},
	gguf.Q5_K: {superK: true, blockLen: gguf.QK, dot: dotK(gguf.Q5_K)},
	gguf.Q6_K: {superK: true, blockLen: gguf.QK, dot: dotK(gguf.Q6_K)},
}

func f16At(b []byte) float32 { return gguf.F16ToF32(binary.LittleEndian.Uint16(b)) }
func f32At(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

// reduce8 is REDUCE8's order of summing eight lanes.
func reduce8(a *[8]float32) float32 {
	s0, s1, s2, s3 := a[0]+a[4], a[1]+a[5], a[2]+a[6], a[3]+a[7]
	return (s0 + s1) + (s2 + s3)
}

// lanes32 accumulates one 32-value block: lane l += dd·Σ_{4l…4l+3} w·x.
func lanes32(acc *[8]float32, dd float32, w *[32]int32, xq []byte) {
	for l := range 8 {
		var s int32
		for i := 4 * l; i < 4*l+4; i++ {
			s += w[i] * int32(int8(xq[i]))
		}
		acc[l] += float32(dd * float32(s))
	}
}

// dotQ8_0Go is the Q8_0 product (the shape the assembly kernel mirrors).
func dotQ8_0Go(w, x []byte, nb int) float32 {
	var acc [8]float32
	var q [32]int32
	for b := range nb {
		wb, xb := w[b*34:(b+1)*34], x[b*act32Bytes:(b+1)*act32Bytes]
		for i := range 32 {
			q[i] = int32(int8(wb[2+i]))
		}
		lanes32(&acc, float32(f16At(wb)*f32At(xb)), &q, xb[8:])
	}
	return reduce8(&acc)
}

// dot32 builds the product of the other 32-value types: unpack the block's
// integer quants (with Q4_0/Q5_0's offset applied), then lanes32; the
// offset-free types add their m·dx·Σq term to a separate sum.
func dot32(d gguf.DType) func(w, x []byte, nb int) float32 {
	bb, _ := d.RowBytes(32)
	return func(w, x []byte, nb int) float32 {
		var acc [8]float32
		var macc float32
		var q [32]int32
		for b := range nb {
			wb, xb := w[b*bb:(b+1)*bb], x[b*act32Bytes:(b+1)*act32Bytes]
			var m float32
			var qs []byte
			var qh uint32
			off := int32(0)
			switch d {
			case gguf.Q4_0:
				qs, off = wb[2:18], 8
			case gguf.Q4_1:
				qs, m = wb[4:20], f16At(wb[2:])
			case gguf.Q5_0:
				qh, qs, off = binary.LittleEndian.Uint32(wb[2:]), wb[6:22], 16
			case gguf.Q5_1:
				m, qh, qs = f16At(wb[2:]), binary.LittleEndian.Uint32(wb[4:]), wb[8:24]
			}
			for j := range 16 {
				q[j] = int32(qs[j]&15|byte(qh>>j&1)<<4) - off
				q[j+16] = int32(qs[j]>>4|byte(qh>>(j+16)&1)<<4) - off
			}
			dx := f32At(xb)
			lanes32(&acc, float32(f16At(wb)*dx), &q, xb[8:])
			if d == gguf.Q4_1 || d == gguf.Q5_1 {
				sum := int32(binary.LittleEndian.Uint32(xb[4:]))
				macc += float32(float32(m*dx) * float32(sum))
			}
		}
		return reduce8(&acc) + macc
	}
}

// kBlock is a K-quant super-block unpacked to integers: quants q (signed,
// offsets applied), a scale and a min per 16 values, and the f16 factors.
type kBlock struct {
	q       [gguf.QK]int32
	sc, m   [16]int32
	d, dmin float32
	hasMins bool
}

// unpackK fills kb from one super-block of type d.
func unpackK(kb *kBlock, d gguf.DType, b []byte) {
	switch d {
	case gguf.Q2_K:
		for g := range 16 {
			kb.sc[g], kb.m[g] = int32(b[g]&15), int32(b[g]>>4)
		}
		for i := range gguf.QK {
			half, o := i/128, i%128
			kb.q[i] = int32(b[16+32*half+o%32] >> (2 * (o / 32)) & 3)
		}
		kb.d, kb.dmin, kb.hasMins = f16At(b[80:]), f16At(b[82:]), true
	case gguf.Q3_K:
		sc := gguf.ScalesQ3K(b[96:108])
		for g := range 16 {
			kb.sc[g] = int32(sc[g])
		}
		for i := range gguf.QK {
			half, o := i/128, i%128
			l, j := o%32, o/32
			q := int32(b[32+32*half+l] >> (2 * j) & 3)
			if b[l]>>(4*half+j)&1 == 0 {
				q -= 4
			}
			kb.q[i] = q
		}
		kb.d, kb.hasMins = f16At(b[108:]), false
	case gguf.Q4_K, gguf.Q5_K:
		qs := b[16:144]
		if d == gguf.Q5_K {
			qs = b[48:176]
		}
		for j := range 8 {
			sc, m := gguf.ScaleMinK4(j, b[4:16])
			kb.sc[2*j], kb.sc[2*j+1], kb.m[2*j], kb.m[2*j+1] = int32(sc), int32(sc), int32(m), int32(m)
			for l := range 32 {
				q := int32(qs[32*(j/2)+l] >> (4 * (j % 2)) & 15)
				if d == gguf.Q5_K {
					q |= int32(b[16+l]>>j&1) << 4
				}
				kb.q[32*j+l] = q
			}
		}
		kb.d, kb.dmin, kb.hasMins = f16At(b), f16At(b[2:]), true
	case gguf.Q6_K:
		for g := range 16 {
			kb.sc[g] = int32(int8(b[192+g]))
		}
		for i := range gguf.QK {
			half, o := i/128, i%128
			l, j := o%32, o/32
			lo := b[64*half+l+32*(j%2)] >> (4 * (j / 2)) & 15
			hi := b[128+32*half+l] >> (2 * j) & 3
			kb.q[i] = int32(lo|hi<<4) - 32
		}
		kb.d, kb.hasMins = f16At(b[208:]), false
	}
}

// dotK builds the product of a K-quant type with q8_K activations.
func dotK(d gguf.DType) func(w, x []byte, nb int) float32 {
	bb, _ := d.RowBytes(gguf.QK)
	return func(w, x []byte, nb int) float32 {
		var kb kBlock
		var acc float32
		for b := range nb {
			xb := x[b*actKBytes : (b+1)*actKBytes]
			unpackK(&kb, d, w[b*bb:(b+1)*bb])
			xq := xb[4 : 4+gguf.QK]
			var isum, msum int32
			for g := range 16 {
				var s int32
				for i := 16 * g; i < 16*g+16; i++ {
					s += kb.q[i] * int32(int8(xq[i]))
				}
				isum += kb.sc[g] * s
				msum += kb.m[g] * int32(int16(binary.LittleEndian.Uint16(xb[4+gguf.QK+2*g:])))
			}
			dx := f32At(xb)
			acc += float32(float32(kb.d*dx) * float32(isum))
			if kb.hasMins {
				acc -= float32(float32(kb.dmin*dx) * float32(msum))
			}
		}
		return acc
	}
}
