package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Tensor is a tensor to write: float32 values encoded as Type on the way out,
// or, when Raw is set, bytes already in Type's encoding (a tensor copied
// from another file bit for bit: decoding and encoding again a quantized
// type is not the identity).
type Tensor struct {
	Name string
	Dims []uint64 // ggml order: Dims[0] is contiguous
	Type DType
	Data []float32
	Raw  []byte
}

// Write writes a GGUF v3 file with the metadata in order and the tensors in
// order, data aligned to DefaultAlignment (or general.alignment when given as
// a uint32 in kvs).
func Write(w io.Writer, kvs []KV, tensors []Tensor) error {
	align := uint64(DefaultAlignment)
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("general.alignment must be a power-of-two uint32, got %v", kv.Value)
			}
			align = uint64(a)
		}
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	e := &encoder{w: bw}
	e.u32(Magic)
	e.u32(Version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		if err := e.value(kv.Value); err != nil {
			return fmt.Errorf("metadata %q: %w", kv.Key, err)
		}
	}
	var off uint64
	for _, t := range tensors {
		info := TensorInfo{Name: t.Name, Dims: t.Dims, Type: t.Type}
		nb, err := info.Bytes()
		if err != nil {
			return err
		}
		switch {
		case t.Raw != nil && uint64(len(t.Raw)) != nb:
			return fmt.Errorf("tensor %q: dims %v take %d bytes, raw data has %d", t.Name, t.Dims, nb, len(t.Raw))
		case t.Raw == nil && info.Elements() != uint64(len(t.Data)):
			return fmt.Errorf("tensor %q: dims %v hold %d values, data has %d", t.Name, t.Dims, info.Elements(), len(t.Data))
		}
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off = alignUp(off+nb, align)
	}
	e.pad(align)
	var buf []byte
	for i, t := range tensors {
		if t.Raw != nil {
			e.bytes(t.Raw)
		} else {
			var err error
			if buf, err = Encode(buf[:0], t.Data, t.Type); err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			e.bytes(buf)
		}
		if i < len(tensors)-1 {
			e.pad(align)
		}
	}
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
	b   [8]byte
}

func (e *encoder) bytes(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
		e.n += uint64(len(p))
	}
}
func (e *encoder) u8(v uint8)   { e.bytes([]byte{v}) }
func (e *encoder) u16(v uint16) { binary.LittleEndian.PutUint16(e.b[:], v); e.bytes(e.b[:2]) }
func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.b[:], v); e.bytes(e.b[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.b[:], v); e.bytes(e.b[:8]) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.bytes([]byte(s)) }
func (e *encoder) pad(align uint64) {
	for e.n%align != 0 && e.err == nil {
		e.u8(0)
	}
}

func (e *encoder) value(v any) error {
	switch x := v.(type) {
	case uint8:
		e.u32(uint32(TypeUint8))
		e.u8(x)
	case int8:
		e.u32(uint32(TypeInt8))
		e.u8(uint8(x))
	case uint16:
		e.u32(uint32(TypeUint16))
		e.u16(x)
	case int16:
		e.u32(uint32(TypeInt16))
		e.u16(uint16(x))
	case uint32:
		e.u32(uint32(TypeUint32))
		e.u32(x)
	case int32:
		e.u32(uint32(TypeInt32))
		e.u32(uint32(x))
	case float32:
		e.u32(uint32(TypeFloat32))
		e.u32(math.Float32bits(x))
	case bool:
		e.u32(uint32(TypeBool))
		e.u8(b2u(x))
	case string:
		e.u32(uint32(TypeString))
		e.str(x)
	case uint64:
		e.u32(uint32(TypeUint64))
		e.u64(x)
	case int64:
		e.u32(uint32(TypeInt64))
		e.u64(uint64(x))
	case float64:
		e.u32(uint32(TypeFloat64))
		e.u64(math.Float64bits(x))
	case int:
		e.u32(uint32(TypeInt64))
		e.u64(uint64(x))
	case []string:
		e.arrayHeader(TypeString, len(x))
		for _, s := range x {
			e.str(s)
		}
	case []float32:
		e.arrayHeader(TypeFloat32, len(x))
		for _, f := range x {
			e.u32(math.Float32bits(f))
		}
	case []int32:
		e.arrayHeader(TypeInt32, len(x))
		for _, i := range x {
			e.u32(uint32(i))
		}
	case []uint32:
		e.arrayHeader(TypeUint32, len(x))
		for _, i := range x {
			e.u32(i)
		}
	case []uint8:
		e.arrayHeader(TypeUint8, len(x))
		e.bytes(x)
	case []int64:
		e.arrayHeader(TypeInt64, len(x))
		for _, i := range x {
			e.u64(uint64(i))
		}
	case []float64:
		e.arrayHeader(TypeFloat64, len(x))
		for _, f := range x {
			e.u64(math.Float64bits(f))
		}
	case []bool:
		e.arrayHeader(TypeBool, len(x))
		for _, b := range x {
			e.u8(b2u(b))
		}
	default:
		return fmt.Errorf("cannot encode %T", v)
	}
	return nil
}

func (e *encoder) arrayHeader(t ValueType, n int) {
	e.u32(uint32(TypeArray))
	e.u32(uint32(t))
	e.u64(uint64(n))
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
