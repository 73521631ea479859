package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Encode appends the encoding of src as type d to dst. Q8_0 needs len(src)
// to be a multiple of Q8BlockSize.
func Encode(dst []byte, src []float32, d DType) ([]byte, error) {
	switch d {
	case F32:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
	case F16:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(v))
		}
	case Q8_0:
		if len(src)%Q8BlockSize != 0 {
			return nil, fmt.Errorf("q8_0 needs a multiple of %d values, got %d", Q8BlockSize, len(src))
		}
		for b := 0; b < len(src); b += Q8BlockSize {
			blk := src[b : b+Q8BlockSize]
			var amax float32
			for _, v := range blk {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			// Same rule as ggml's quantize_row_q8_0_ref: d = amax/127, and the
			// values are rounded against 1/d computed from the unrounded d.
			scale := amax / 127
			inv := float32(0)
			if scale != 0 {
				inv = 1 / scale
			}
			dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(scale))
			for _, v := range blk {
				dst = append(dst, byte(int8(math.Round(float64(v*inv)))))
			}
		}
	default:
		return nil, fmt.Errorf("%w: %s", ErrUnsupportedType, d)
	}
	return dst, nil
}

// Decode fills dst from raw data of type d; raw must hold exactly len(dst) values.
func Decode(dst []float32, raw []byte, d DType) error {
	want, err := d.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if len(raw) != want {
		return fmt.Errorf("%s data of %d bytes for %d values (want %d)", d, len(raw), len(dst), want)
	}
	switch d {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case Q8_0:
		DecodeQ8(dst, raw)
	}
	return nil
}

// DecodeQ8 dequantizes Q8_0 blocks in raw into dst (len(dst)/32 blocks). It is
// the engine's inner loop for quantized weights, so it skips Decode's checks.
func DecodeQ8(dst []float32, raw []byte) {
	for b := 0; b < len(dst)/Q8BlockSize; b++ {
		blk := raw[b*q8BlockBytes : (b+1)*q8BlockBytes]
		scale := F16ToF32(binary.LittleEndian.Uint16(blk))
		out := dst[b*Q8BlockSize : (b+1)*Q8BlockSize]
		q := blk[2 : 2+Q8BlockSize]
		for i := range out {
			out[i] = scale * float32(int8(q[i]))
		}
	}
}

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
