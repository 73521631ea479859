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

// DType is a ggml tensor element type (ggml numbering; see types.go).
type DType uint32

// ErrUnsupportedType is returned for tensor types this package cannot decode
// (the IQ and ternary types, Q8_1/Q8_K, integer tensors, unknown numbers).
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
