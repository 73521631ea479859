package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
)

// maxDims is ggml's GGML_MAX_DIMS.
const maxDims = 4

// File is a parsed GGUF header; tensor data is read on demand from the
// underlying reader.
type File struct {
	Version    uint32
	KVs        []KV
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset int64 // absolute offset of the data section

	kv     map[string]any
	tensor map[string]int
	r      io.ReaderAt
	size   int64
	data   []byte // the whole image when read with ReadBytes
}

// ReadBytes is Read over an image already in memory (a memory-mapped file,
// an embedded model). TensorData then returns slices of b instead of
// copies, so b must stay valid and unmodified while they are in use.
func ReadBytes(b []byte) (*File, error) {
	f, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	f.data = b
	return f, nil
}

// Read parses the header of a GGUF file of the given size and checks that every
// tensor lies inside the file.
func Read(r io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: negative size", ErrFormat)
	}
	d := &decoder{br: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 64<<10), size: size}
	f := &File{r: r, size: size, kv: map[string]any{}, tensor: map[string]int{}}
	if m := d.u32(); d.err == nil && m != Magic {
		return nil, fmt.Errorf("%w: bad magic %#x (not a GGUF file)", ErrFormat, m)
	}
	f.Version = d.u32()
	if d.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: unsupported version %d (want 2 or 3)", ErrFormat, f.Version)
	}
	nTensors, nKV := d.u64(), d.u64()
	// Bound counts by what could possibly fit: a KV takes at least 13 bytes
	// (key length, type, one byte of value), a tensor descriptor at least 32.
	d.bound(nKV, 13, "metadata count")
	d.bound(nTensors, 32, "tensor count")
	for i := uint64(0); i < nKV && d.err == nil; i++ {
		key := d.str()
		v := d.value(ValueType(d.u32()), 0)
		if d.err != nil {
			break
		}
		if _, dup := f.kv[key]; dup {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrFormat, key)
		}
		f.kv[key] = v
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
	}
	for i := uint64(0); i < nTensors && d.err == nil; i++ {
		var t TensorInfo
		t.Name = d.str()
		nd := d.u32()
		if d.err == nil && (nd == 0 || nd > maxDims) {
			return nil, fmt.Errorf("%w: tensor %q has %d dimensions", ErrFormat, t.Name, nd)
		}
		for j := uint32(0); j < nd && d.err == nil; j++ {
			t.Dims = append(t.Dims, d.u64())
		}
		t.Type = DType(d.u32())
		t.Offset = d.u64()
		if d.err != nil {
			break
		}
		if _, dup := f.tensor[t.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate tensor %q", ErrFormat, t.Name)
		}
		f.tensor[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	if d.err != nil {
		return nil, d.err
	}
	f.Alignment = DefaultAlignment
	if a, ok := f.kv["general.alignment"]; ok {
		av, ok := a.(uint32)
		if !ok || av == 0 || av&(av-1) != 0 {
			return nil, fmt.Errorf("%w: general.alignment %v is not a power-of-two uint32", ErrFormat, a)
		}
		f.Alignment = uint64(av)
	}
	f.DataOffset = int64(alignUp(uint64(d.pos), f.Alignment))
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if err := f.checkTensor(t); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *File) checkTensor(t *TensorInfo) error {
	n := uint64(1)
	for _, dim := range t.Dims {
		hi, lo := bits.Mul64(n, dim)
		if dim == 0 || hi != 0 || lo/8 > uint64(f.size) { // no type takes under a bit per value
			return fmt.Errorf("%w: tensor %q has dimensions %v", ErrFormat, t.Name, t.Dims)
		}
		n = lo
	}
	if t.Dims[0] > math.MaxInt32 {
		return fmt.Errorf("%w: tensor %q row of %d elements", ErrFormat, t.Name, t.Dims[0])
	}
	nb, err := t.Bytes()
	if errors.Is(err, ErrUnsupportedType) {
		return err // an unknown type number: say so, not "malformed"
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if t.Offset%f.Alignment != 0 {
		return fmt.Errorf("%w: tensor %q offset %d not aligned to %d", ErrFormat, t.Name, t.Offset, f.Alignment)
	}
	end := uint64(f.DataOffset) + t.Offset + nb
	if t.Offset > uint64(f.size) || end < nb || end > uint64(f.size) {
		return fmt.Errorf("%w: tensor %q (%d bytes at %d) runs past the end of the file (%d bytes)", ErrFormat, t.Name, nb, t.Offset, f.size)
	}
	return nil
}

// Get returns the metadata value for key.
func (f *File) Get(key string) (any, bool) {
	v, ok := f.kv[key]
	return v, ok
}

// IntValue reads a metadata value of any integer type (a value Get
// returned) as an int64; a uint64 too large for one is an error.
func IntValue(v any) (int64, error) {
	switch x := v.(type) {
	case uint8:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint64:
		if x > 1<<62 {
			return 0, fmt.Errorf("%d is too large", x)
		}
		return int64(x), nil
	case int64:
		return x, nil
	}
	return 0, fmt.Errorf("%T is not an integer", v)
}

// Tensor returns the descriptor of the named tensor.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tensor[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// TensorData returns the raw bytes of a tensor: read into a new buffer, or,
// for a File from ReadBytes, a slice of the image that must not be written.
func (f *File) TensorData(t *TensorInfo) ([]byte, error) {
	nb, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	if f.data != nil {
		off := uint64(f.DataOffset) + t.Offset // bounds checked when the header was read
		return f.data[off : off+nb : off+nb], nil
	}
	buf := make([]byte, nb)
	if _, err := f.r.ReadAt(buf, f.DataOffset+int64(t.Offset)); err != nil {
		return nil, fmt.Errorf("read tensor %q: %w", t.Name, err)
	}
	return buf, nil
}

// Float32s reads a tensor and decodes it to float32, whatever its stored type.
func (f *File) Float32s(t *TensorInfo) ([]float32, error) {
	raw, err := f.TensorData(t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.Elements())
	if err := Decode(out, raw, t.Type); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return out, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// decoder reads little-endian values and remembers the first error, so the
// parsing code reads straight through and checks once.
type decoder struct {
	br   *bufio.Reader
	pos  int64
	size int64
	err  error
	buf  [8]byte
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
	}
}

func (d *decoder) remaining() uint64 { return uint64(d.size - d.pos) }

// bound fails when n items of at least min bytes each cannot fit in the rest of the file.
func (d *decoder) bound(n, min uint64, what string) {
	if d.err == nil && n > d.remaining()/min {
		d.fail("%s %d is larger than the file allows", what, n)
	}
}

func (d *decoder) read(n int) []byte {
	if d.err != nil {
		return d.buf[:n]
	}
	if _, err := io.ReadFull(d.br, d.buf[:n]); err != nil {
		d.fail("truncated at byte %d", d.pos)
		return d.buf[:n]
	}
	d.pos += int64(n)
	return d.buf[:n]
}

func (d *decoder) u8() uint8   { return d.read(1)[0] }
func (d *decoder) u16() uint16 { return binary.LittleEndian.Uint16(d.read(2)) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.read(4)) }
func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.read(8)) }

func (d *decoder) str() string {
	n := d.u64()
	d.bound(n, 1, "string length")
	if d.err != nil {
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.br, b); err != nil {
		d.fail("truncated string at byte %d", d.pos)
		return ""
	}
	d.pos += int64(n)
	return string(b)
}

// value decodes one value of type t; depth guards nested arrays.
func (d *decoder) value(t ValueType, depth int) any {
	if d.err != nil {
		return nil
	}
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeBool:
		b := d.u8()
		if b > 1 {
			d.fail("bool value %d", b)
		}
		return b == 1
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	case TypeArray:
		if depth > 0 {
			d.fail("nested arrays are not supported")
			return nil
		}
		et := ValueType(d.u32())
		n := d.u64()
		min := uint64(et.scalarSize())
		if et == TypeString {
			min = 8
		}
		if min == 0 {
			d.fail("array of type %d", et)
			return nil
		}
		d.bound(n, min, "array length")
		return d.array(et, int(n))
	}
	d.fail("unknown value type %d", t)
	return nil
}

func (d *decoder) array(et ValueType, n int) any {
	if d.err != nil {
		return nil
	}
	switch et {
	case TypeUint8:
		return arrayOf(d, n, d.u8)
	case TypeInt8:
		return arrayOf(d, n, func() int8 { return int8(d.u8()) })
	case TypeUint16:
		return arrayOf(d, n, d.u16)
	case TypeInt16:
		return arrayOf(d, n, func() int16 { return int16(d.u16()) })
	case TypeUint32:
		return arrayOf(d, n, d.u32)
	case TypeInt32:
		return arrayOf(d, n, func() int32 { return int32(d.u32()) })
	case TypeFloat32:
		return arrayOf(d, n, func() float32 { return math.Float32frombits(d.u32()) })
	case TypeBool:
		return arrayOf(d, n, func() bool { return d.u8() != 0 })
	case TypeString:
		return arrayOf(d, n, d.str)
	case TypeUint64:
		return arrayOf(d, n, d.u64)
	case TypeInt64:
		return arrayOf(d, n, func() int64 { return int64(d.u64()) })
	case TypeFloat64:
		return arrayOf(d, n, func() float64 { return math.Float64frombits(d.u64()) })
	}
	d.fail("array of type %d", et)
	return nil
}

func arrayOf[T any](d *decoder, n int, next func() T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = next()
		if d.err != nil {
			return nil
		}
	}
	return out
}
