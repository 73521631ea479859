// Package gguf reads and writes GGUF v3 files, the container llama.cpp and the
// built-in engine use for language-model weights: a header of typed key/value
// metadata, a table of tensor descriptors, then aligned tensor data.
//
// The reader treats every file as hostile: each count and length is checked
// against the bytes that remain before anything is allocated, so a truncated or
// forged file is an error, never a panic or an allocation larger than the file.
package gguf

import (
	"errors"
	"fmt"
)

// Magic is "GGUF" read as a little-endian uint32.
const Magic = 0x46554747

// Version is the GGUF version this package writes; it reads 2 and 3 (they
// differ from each other only in what v1 changed, which we do not read).
const Version = 3

// DefaultAlignment is the tensor data alignment when general.alignment is absent.
const DefaultAlignment = 32

// ValueType is the type tag of a metadata value.
type ValueType uint32

// Metadata value types, numbered as in the GGUF specification.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// scalarSize is the encoded size of fixed-size types; 0 for string and array.
func (t ValueType) scalarSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// DType is a ggml tensor element type.
type DType uint32

// The tensor types this package can encode and decode (ggml numbering).
const (
	F32  DType = 0
	F16  DType = 1
	Q8_0 DType = 8
)

// Q8BlockSize is the number of values sharing one scale in Q8_0.
const Q8BlockSize = 32

// q8BlockBytes is one Q8_0 block: a float16 scale then 32 int8 values.
const q8BlockBytes = 2 + Q8BlockSize

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case Q8_0:
		return "q8_0"
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(d))
}

// ParseDType accepts f32, f16 and q8_0 (case-sensitive, as the CLI spells them).
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32":
		return F32, nil
	case "f16":
		return F16, nil
	case "q8_0":
		return Q8_0, nil
	}
	return 0, fmt.Errorf("unknown tensor type %q (want f32, f16 or q8_0)", s)
}

// RowBytes is the encoded size of n elements of type d, or an error when d is
// unsupported or n does not fit d's block size.
func (d DType) RowBytes(n int) (int, error) {
	switch d {
	case F32:
		return 4 * n, nil
	case F16:
		return 2 * n, nil
	case Q8_0:
		if n%Q8BlockSize != 0 {
			return 0, fmt.Errorf("q8_0 needs a multiple of %d elements per row, got %d", Q8BlockSize, n)
		}
		return n / Q8BlockSize * q8BlockBytes, nil
	}
	return 0, fmt.Errorf("%w: %s", ErrUnsupportedType, d)
}

// ErrUnsupportedType is returned for tensor types outside F32, F16 and Q8_0.
var ErrUnsupportedType = errors.New("unsupported tensor type")

// ErrFormat marks a malformed file; errors.Is(err, ErrFormat) holds for every
// structural problem the reader finds.
var ErrFormat = errors.New("malformed gguf")

// KV is one metadata entry. Value holds uint8…float64, bool, string, or a
// slice of one of those ([]string, []float32, []int32, …) for arrays.
type KV struct {
	Key   string
	Value any
}

// TensorInfo describes one tensor. Dims are in ggml order: Dims[0] is the
// fastest-varying (contiguous) dimension, so a matrix with Dims [in, out] is
// stored row-major as out rows of in elements.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   DType
	Offset uint64 // from the start of the data section
}

// Elements is the product of Dims.
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Bytes is the encoded size of the tensor's data.
func (t *TensorInfo) Bytes() (uint64, error) {
	if len(t.Dims) == 0 {
		return 0, fmt.Errorf("%w: tensor %q has no dimensions", ErrFormat, t.Name)
	}
	row, err := t.Type.RowBytes(int(t.Dims[0]))
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return uint64(row) * (t.Elements() / t.Dims[0]), nil
}
