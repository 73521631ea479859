package onnxpb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// MaxElements bounds the elements of one tensor, so a corrupt or hostile
// file cannot make the decoder allocate gigabytes. A router predictor has
// a few thousand weights.
const MaxElements = 1 << 24

// ErrFormat marks bytes that are not a well-formed ONNX model of the
// supported subset.
var ErrFormat = errors.New("onnx format")

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// Unmarshal decodes ONNX protobuf bytes. Unknown fields are skipped; tensors
// of types other than float32 and int64, external data and sub-graphs are
// refused, since no supported operator uses them.
func Unmarshal(data []byte) (*Model, error) {
	m := &Model{}
	err := walk(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			m.IRVersion = int64(x)
		case 2:
			m.ProducerName = string(v)
		case 3:
			m.ProducerVersion = string(v)
		case 5:
			m.ModelVersion = int64(x)
		case 7:
			return decodeGraph(v, &m.Graph)
		case 8:
			domain, _, version, err := decodePair(v)
			m.Opsets = append(m.Opsets, OpsetID{Domain: string(domain), Version: int64(version)})
			return err
		case 14:
			key, value, _, err := decodePair(v)
			m.Metadata = append(m.Metadata, Property{Key: string(key), Value: string(value)})
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func decodeGraph(data []byte, g *Graph) error {
	return walk(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			var n Node
			if err := decodeNode(v, &n); err != nil {
				return err
			}
			g.Nodes = append(g.Nodes, n)
		case 2:
			g.Name = string(v)
		case 5:
			var t Tensor
			if err := decodeTensor(v, &t); err != nil {
				return err
			}
			g.Initializers = append(g.Initializers, t)
		case 11, 12, 13:
			var vi ValueInfo
			if err := decodeValueInfo(v, &vi); err != nil {
				return err
			}
			switch num {
			case 11:
				g.Inputs = append(g.Inputs, vi)
			case 12:
				g.Outputs = append(g.Outputs, vi)
			default:
				g.ValueInfo = append(g.ValueInfo, vi)
			}
		case 15:
			return formatErr("sparse initializers are not supported")
		}
		return nil
	})
}

func decodeNode(data []byte, n *Node) error {
	return walk(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			n.Inputs = append(n.Inputs, string(v))
		case 2:
			n.Outputs = append(n.Outputs, string(v))
		case 3:
			n.Name = string(v)
		case 4:
			n.OpType = string(v)
		case 5:
			var a Attribute
			if err := decodeAttribute(v, &a); err != nil {
				return err
			}
			n.Attributes = append(n.Attributes, a)
		case 7:
			n.Domain = string(v)
		}
		return nil
	})
}

func decodeAttribute(data []byte, a *Attribute) error {
	inferred := int32(0) // old writers leave out the type field
	err := walk(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			a.Name = string(v)
		case 2:
			a.F, inferred = math.Float32frombits(uint32(x)), AttrFloat
		case 3:
			a.I, inferred = int64(x), AttrInt
		case 4:
			a.S, inferred = append([]byte(nil), v...), AttrString
		case 5:
			a.T, inferred = &Tensor{}, AttrTensor
			return decodeTensor(v, a.T)
		case 6, 11:
			return formatErr("attribute %q: sub-graphs are not supported", a.Name)
		case 7:
			inferred = AttrFloats
			return repeatedFixed32(typ, v, x, func(u uint32) { a.Floats = append(a.Floats, math.Float32frombits(u)) })
		case 8:
			inferred = AttrInts
			return repeatedVarint(typ, v, x, func(u uint64) { a.Ints = append(a.Ints, int64(u)) })
		case 9:
			a.Strings, inferred = append(a.Strings, append([]byte(nil), v...)), AttrStrings
		case 20:
			a.Type = int32(x)
		}
		return nil
	})
	if a.Type == 0 {
		a.Type = inferred
	}
	return err
}

func decodeTensor(data []byte, t *Tensor) error {
	var raw []byte
	var haveRaw bool
	err := walk(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			return repeatedVarint(typ, v, x, func(u uint64) { t.Dims = append(t.Dims, int64(u)) })
		case 2:
			t.DataType = int32(x)
		case 4:
			return repeatedFixed32(typ, v, x, func(u uint32) { t.Floats = append(t.Floats, math.Float32frombits(u)) })
		case 7:
			return repeatedVarint(typ, v, x, func(u uint64) { t.Int64s = append(t.Int64s, int64(u)) })
		case 8:
			t.Name = string(v)
		case 9:
			raw, haveRaw = v, true
		case 13, 14:
			if num == 14 && x == 0 {
				return nil // DEFAULT location
			}
			return formatErr("tensor %q: external data is not supported", t.Name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	n := int64(1)
	for _, d := range t.Dims {
		// Each dim is bounded on its own too: a zero dim makes the product 0
		// and would let a later dim of 2^40 through to code that sizes a
		// buffer from it.
		if d < 0 || d > MaxElements || (d > 0 && n > MaxElements/d) {
			return formatErr("tensor %q: dims %v out of range", t.Name, t.Dims)
		}
		n *= d
	}
	switch t.DataType {
	case TypeFloat:
		if haveRaw {
			if len(raw)%4 != 0 {
				return formatErr("tensor %q: raw_data of %d bytes is not float32", t.Name, len(raw))
			}
			t.Floats = make([]float32, len(raw)/4)
			for i := range t.Floats {
				t.Floats[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		}
		if int64(len(t.Floats)) != n {
			return formatErr("tensor %q: %d values for dims %v", t.Name, len(t.Floats), t.Dims)
		}
	case TypeInt64:
		if haveRaw {
			if len(raw)%8 != 0 {
				return formatErr("tensor %q: raw_data of %d bytes is not int64", t.Name, len(raw))
			}
			t.Int64s = make([]int64, len(raw)/8)
			for i := range t.Int64s {
				t.Int64s[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			}
		}
		if int64(len(t.Int64s)) != n {
			return formatErr("tensor %q: %d values for dims %v", t.Name, len(t.Int64s), t.Dims)
		}
	default:
		return formatErr("tensor %q: data type %d is not supported (float32 and int64 are)", t.Name, t.DataType)
	}
	return nil
}

func decodeValueInfo(data []byte, vi *ValueInfo) error {
	return walk(data, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			vi.Name = string(v)
		case 2: // TypeProto
			return walk(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				if num != 1 {
					return nil // sequence, map, optional types: no shape to read
				}
				return walk(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
					switch num {
					case 1:
						vi.ElemType = int32(x)
					case 2:
						vi.HasShape = true
						return walk(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
							if num != 1 {
								return nil
							}
							var d Dim
							err := walk(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
								switch num {
								case 1:
									d.Value = int64(x)
								case 2:
									d.Param = string(v)
								}
								return nil
							})
							vi.Shape = append(vi.Shape, d)
							return err
						})
					}
					return nil
				})
			})
		}
		return nil
	})
}

// walk calls fn for each field of one message: v holds the bytes of a
// length-delimited field, x the value of a varint or fixed field.
func walk(data []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return formatErr("bad tag: %v", protowire.ParseError(n))
		}
		data = data[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(data)
		case protowire.Fixed32Type:
			var u uint32
			u, n = protowire.ConsumeFixed32(data)
			x = uint64(u)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(data)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(data)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return formatErr("field %d: %v", num, protowire.ParseError(n))
		}
		data = data[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// repeatedVarint reads one element or a packed run of a repeated varint field.
func repeatedVarint(typ protowire.Type, v []byte, x uint64, add func(uint64)) error {
	if typ == protowire.VarintType {
		add(x)
		return nil
	}
	if typ != protowire.BytesType {
		return formatErr("repeated varint with wire type %d", typ)
	}
	for len(v) > 0 {
		u, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return formatErr("packed varint: %v", protowire.ParseError(n))
		}
		add(u)
		v = v[n:]
	}
	return nil
}

// repeatedFixed32 reads one element or a packed run of a repeated float field.
func repeatedFixed32(typ protowire.Type, v []byte, x uint64, add func(uint32)) error {
	if typ == protowire.Fixed32Type {
		add(uint32(x))
		return nil
	}
	if typ != protowire.BytesType || len(v)%4 != 0 {
		return formatErr("repeated float with wire type %d and %d bytes", typ, len(v))
	}
	if len(v)/4 > MaxElements {
		return formatErr("repeated float of %d elements", len(v)/4)
	}
	for i := 0; i < len(v); i += 4 {
		add(binary.LittleEndian.Uint32(v[i:]))
	}
	return nil
}

// decodePair reads a message whose fields are 1 and 2 (OperatorSetIdProto,
// StringStringEntryProto): field 1's bytes, and field 2's bytes and varint.
func decodePair(b []byte) (f1, f2 []byte, x2 uint64, err error) {
	err = walk(b, func(num protowire.Number, _ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			f1 = v
		case 2:
			f2, x2 = v, x
		}
		return nil
	})
	return f1, f2, x2, err
}
