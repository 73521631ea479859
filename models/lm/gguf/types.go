package gguf

import (
	"fmt"
	"strings"
)

// The ggml tensor types, numbered as ggml numbers them. Those marked
// "decoded" have codecs here; the others are known by name and size only, so
// a file holding them parses and the loader can say which tensor has which
// type it cannot run.
const (
	F32     DType = 0  // decoded
	F16     DType = 1  // decoded
	Q4_0    DType = 2  // decoded
	Q4_1    DType = 3  // decoded
	Q5_0    DType = 6  // decoded
	Q5_1    DType = 7  // decoded
	Q8_0    DType = 8  // decoded
	Q8_1    DType = 9  // ggml's activation type: known by size only
	Q2_K    DType = 10 // decoded
	Q3_K    DType = 11 // decoded
	Q4_K    DType = 12 // decoded
	Q5_K    DType = 13 // decoded
	Q6_K    DType = 14 // decoded
	Q8_K    DType = 15 // ggml's activation type: known by size only
	IQ2_XXS DType = 16
	IQ2_XS  DType = 17
	IQ3_XXS DType = 18
	IQ1_S   DType = 19
	IQ4_NL  DType = 20
	IQ3_S   DType = 21
	IQ2_S   DType = 22
	IQ4_XS  DType = 23
	I8      DType = 24
	I16     DType = 25
	I32     DType = 26
	I64     DType = 27
	F64     DType = 28
	IQ1_M   DType = 29
	BF16    DType = 30 // decoded
	TQ1_0   DType = 34
	TQ2_0   DType = 35
	MXFP4   DType = 39
)

// QK is the super-block size of the K-quants (ggml's QK_K).
const QK = 256

// Q8BlockSize is the number of values sharing one scale in Q8_0 (and in the
// other 32-value block types).
const Q8BlockSize = 32

// q8BlockBytes is one Q8_0 block: a float16 scale then 32 int8 values.
const q8BlockBytes = 2 + Q8BlockSize

// typeInfo is a type's ggml name, block length in values, block size in
// bytes, and whether Encode/Decode handle it.
type typeInfo struct {
	name         string
	block, bytes int
	decoded      bool
}

var typeTable = map[DType]typeInfo{
	F32:     {"f32", 1, 4, true},
	F16:     {"f16", 1, 2, true},
	BF16:    {"bf16", 1, 2, true},
	Q4_0:    {"q4_0", 32, 2 + 16, true},
	Q4_1:    {"q4_1", 32, 2 + 2 + 16, true},
	Q5_0:    {"q5_0", 32, 2 + 4 + 16, true},
	Q5_1:    {"q5_1", 32, 2 + 2 + 4 + 16, true},
	Q8_0:    {"q8_0", 32, q8BlockBytes, true},
	Q8_1:    {"q8_1", 32, 4 + 32, false},
	Q2_K:    {"q2_K", QK, QK/16 + QK/4 + 2 + 2, true},
	Q3_K:    {"q3_K", QK, QK/8 + QK/4 + 12 + 2, true},
	Q4_K:    {"q4_K", QK, 2 + 2 + 12 + QK/2, true},
	Q5_K:    {"q5_K", QK, 2 + 2 + 12 + QK/8 + QK/2, true},
	Q6_K:    {"q6_K", QK, QK/2 + QK/4 + QK/16 + 2, true},
	Q8_K:    {"q8_K", QK, 4 + QK + QK/16*2, false},
	IQ2_XXS: {"iq2_xxs", QK, 66, false},
	IQ2_XS:  {"iq2_xs", QK, 74, false},
	IQ3_XXS: {"iq3_xxs", QK, 98, false},
	IQ1_S:   {"iq1_s", QK, 50, false},
	IQ4_NL:  {"iq4_nl", 32, 18, false},
	IQ3_S:   {"iq3_s", QK, 110, false},
	IQ2_S:   {"iq2_s", QK, 82, false},
	IQ4_XS:  {"iq4_xs", QK, 136, false},
	I8:      {"i8", 1, 1, false},
	I16:     {"i16", 1, 2, false},
	I32:     {"i32", 1, 4, false},
	I64:     {"i64", 1, 8, false},
	F64:     {"f64", 1, 8, false},
	IQ1_M:   {"iq1_m", QK, 56, false},
	TQ1_0:   {"tq1_0", QK, 54, false},
	TQ2_0:   {"tq2_0", QK, 66, false},
	MXFP4:   {"mxfp4", 32, 17, false},
}

// String is ggml's name for the type (q4_K, iq2_xxs, …).
func (d DType) String() string {
	if ti, ok := typeTable[d]; ok {
		return ti.name
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(d))
}

// BlockSize is how many values one block of d holds (1 for float types).
func (d DType) BlockSize() int { return typeTable[d].block }

// Decoded reports whether Encode and Decode handle d.
func (d DType) Decoded() bool { return typeTable[d].decoded }

// Quantized reports whether d is a block type (not F32/F16/BF16).
func (d DType) Quantized() bool { return typeTable[d].block > 1 }

// UnsupportedError is the error for a type outside the decoded set; it names
// the type the way llama.cpp's tools print it (Q8_1, IQ2_XXS, …).
func UnsupportedError(d DType) error {
	if _, ok := typeTable[d]; ok {
		return fmt.Errorf("%w %s", ErrUnsupportedType, strings.ToUpper(d.String()))
	}
	return fmt.Errorf("%w %s", ErrUnsupportedType, d)
}

// decodedTypes lists the names ParseDType accepts, in ggml order.
func decodedTypes() []string {
	var names []string
	for d := DType(0); d <= MXFP4; d++ {
		if ti, ok := typeTable[d]; ok && ti.decoded {
			names = append(names, strings.ToLower(ti.name))
		}
	}
	return names
}

// ParseDType accepts the name of any decoded type, in either case (f32, f16,
// bf16, q8_0, q4_k, Q6_K, …).
func ParseDType(s string) (DType, error) {
	for d, ti := range typeTable {
		if ti.decoded && strings.EqualFold(ti.name, s) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown tensor type %q (want one of %s)", s, strings.Join(decodedTypes(), ", "))
}

// RowBytes is the encoded size of n elements of type d, or an error when d is
// unknown or n is not a whole number of d's blocks. Types known by size
// only have a size too, so files holding them parse.
func (d DType) RowBytes(n int) (int, error) {
	ti, ok := typeTable[d]
	if !ok {
		return 0, UnsupportedError(d)
	}
	if n%ti.block != 0 {
		return 0, fmt.Errorf("%s needs a multiple of %d elements per row, got %d", d, ti.block, n)
	}
	return n / ti.block * ti.bytes, nil
}
