package onnxpb

import (
	"encoding/binary"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Marshal encodes m as ONNX protobuf bytes. The output depends only on m
// (fields in field-number order, tensors as little-endian raw_data), so a
// seeded training run writes the same bytes every time.
func Marshal(m *Model) []byte {
	var b []byte
	b = appendVarintField(b, 1, uint64(m.IRVersion))
	b = appendStringField(b, 2, m.ProducerName)
	b = appendStringField(b, 3, m.ProducerVersion)
	if m.ModelVersion != 0 {
		b = appendVarintField(b, 5, uint64(m.ModelVersion))
	}
	b = appendMessage(b, 7, appendGraph(nil, &m.Graph))
	for _, o := range m.Opsets {
		var ob []byte
		if o.Domain != "" {
			ob = appendStringField(ob, 1, o.Domain)
		}
		ob = appendVarintField(ob, 2, uint64(o.Version))
		b = appendMessage(b, 8, ob)
	}
	for _, p := range m.Metadata {
		var pb []byte
		pb = appendStringField(pb, 1, p.Key)
		pb = appendStringField(pb, 2, p.Value)
		b = appendMessage(b, 14, pb)
	}
	return b
}

func appendGraph(b []byte, g *Graph) []byte {
	for i := range g.Nodes {
		b = appendMessage(b, 1, appendNode(nil, &g.Nodes[i]))
	}
	b = appendStringField(b, 2, g.Name)
	for i := range g.Initializers {
		b = appendMessage(b, 5, appendTensor(nil, &g.Initializers[i]))
	}
	for i := range g.Inputs {
		b = appendMessage(b, 11, appendValueInfo(nil, &g.Inputs[i]))
	}
	for i := range g.Outputs {
		b = appendMessage(b, 12, appendValueInfo(nil, &g.Outputs[i]))
	}
	for i := range g.ValueInfo {
		b = appendMessage(b, 13, appendValueInfo(nil, &g.ValueInfo[i]))
	}
	return b
}

func appendNode(b []byte, n *Node) []byte {
	for _, s := range n.Inputs {
		b = appendBytesField(b, 1, []byte(s)) // empty names are meaningful (omitted optional input)
	}
	for _, s := range n.Outputs {
		b = appendBytesField(b, 2, []byte(s))
	}
	b = appendStringField(b, 3, n.Name)
	b = appendStringField(b, 4, n.OpType)
	for i := range n.Attributes {
		b = appendMessage(b, 5, appendAttribute(nil, &n.Attributes[i]))
	}
	b = appendStringField(b, 7, n.Domain)
	return b
}

func appendAttribute(b []byte, a *Attribute) []byte {
	b = appendStringField(b, 1, a.Name)
	switch a.Type {
	case AttrFloat:
		b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.F))
	case AttrInt:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.I))
	case AttrString:
		b = appendBytesField(b, 4, a.S)
	case AttrTensor:
		if a.T != nil {
			b = appendMessage(b, 5, appendTensor(nil, a.T))
		}
	case AttrFloats:
		for _, f := range a.Floats {
			b = protowire.AppendTag(b, 7, protowire.Fixed32Type)
			b = protowire.AppendFixed32(b, math.Float32bits(f))
		}
	case AttrInts:
		for _, v := range a.Ints {
			b = protowire.AppendTag(b, 8, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(v))
		}
	case AttrStrings:
		for _, s := range a.Strings {
			b = appendBytesField(b, 9, s)
		}
	}
	b = protowire.AppendTag(b, 20, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(a.Type))
}

func appendTensor(b []byte, t *Tensor) []byte {
	for _, d := range t.Dims {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	b = appendVarintField(b, 2, uint64(t.DataType))
	b = appendStringField(b, 8, t.Name)
	var raw []byte
	switch t.DataType {
	case TypeFloat:
		raw = make([]byte, 4*len(t.Floats))
		for i, f := range t.Floats {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
		}
	case TypeInt64:
		raw = make([]byte, 8*len(t.Int64s))
		for i, v := range t.Int64s {
			binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
		}
	}
	return appendBytesField(b, 9, raw)
}

func appendValueInfo(b []byte, v *ValueInfo) []byte {
	b = appendStringField(b, 1, v.Name)
	var tt []byte // TypeProto.Tensor
	tt = appendVarintField(tt, 1, uint64(v.ElemType))
	if v.HasShape || len(v.Shape) > 0 {
		var sh []byte
		for _, d := range v.Shape {
			var db []byte
			if d.Param != "" {
				db = appendStringField(db, 2, d.Param)
			} else {
				db = protowire.AppendTag(db, 1, protowire.VarintType)
				db = protowire.AppendVarint(db, uint64(d.Value))
			}
			sh = appendMessage(sh, 1, db)
		}
		tt = appendMessage(tt, 2, sh)
	}
	var typ []byte // TypeProto
	typ = appendMessage(typ, 1, tt)
	return appendMessage(b, 2, typ)
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// appendStringField omits empty strings, as proto3-style writers do; ONNX
// treats an absent string as empty.
func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendBytesField(b, num, []byte(s))
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}
