package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Encode appends the encoding of src as type d to dst; len(src) must be a
// whole number of d's blocks. The float types round to nearest even; the
// block types quantize as quant.go describes.
func Encode(dst []byte, src []float32, d DType) ([]byte, error) {
	ti := typeTable[d]
	if !ti.decoded {
		return nil, UnsupportedError(d)
	}
	if len(src)%ti.block != 0 {
		return nil, fmt.Errorf("%s needs a multiple of %d values, got %d", d, ti.block, len(src))
	}
	switch d {
	case F32:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
	case F16:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(v))
		}
	case BF16:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint16(dst, F32ToBF16(v))
		}
	default:
		q := quantizers[d]
		for b := 0; b < len(src); b += ti.block {
			n := len(dst)
			dst = append(dst, make([]byte, ti.bytes)...)
			q(dst[n:], src[b:b+ti.block])
		}
	}
	return dst, nil
}

// Decode fills dst from raw data of type d; raw must hold exactly len(dst) values.
func Decode(dst []float32, raw []byte, d DType) error {
	if !d.Decoded() {
		return UnsupportedError(d)
	}
	want, err := d.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if len(raw) != want {
		return fmt.Errorf("%s data of %d bytes for %d values (want %d)", d, len(raw), len(dst), want)
	}
	Dequantize(dst, raw, d)
	return nil
}

// Dequantize is Decode without the checks, for the engine's inner loops:
// dst must be a whole number of blocks and raw must hold them.
func Dequantize(dst []float32, raw []byte, d DType) {
	switch d {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case F16:
		DecodeF16(dst, raw)
	case BF16:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	default:
		ti := typeTable[d]
		deq := dequantizers[d]
		for b := 0; b < len(dst)/ti.block; b++ {
			deq(dst[b*ti.block:(b+1)*ti.block], raw[b*ti.bytes:(b+1)*ti.bytes])
		}
	}
}

// DecodeQ8 dequantizes Q8_0 blocks in raw into dst (len(dst)/32 blocks).
func DecodeQ8(dst []float32, raw []byte) { Dequantize(dst, raw, Q8_0) }

// DecodeF16 converts little-endian half floats in raw into dst.
func DecodeF16(dst []float32, raw []byte) {
	for i := range dst {
		dst[i] = F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
	}
}

// F16ToF32 converts an IEEE 754 half-precision value.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 converts to half precision with round-to-nearest-even, saturating
// to infinity and keeping NaN a NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is the right rounding
	}
	return sign | uint16(r)
}

// F32ToBF16 rounds to bfloat16 (nearest even), keeping NaN a quiet NaN, as
// ggml's ggml_compute_fp32_to_bf16 does.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + (u >> 16 & 1))) >> 16)
}
