package onnxpb

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func sample() *Model {
	return &Model{
		IRVersion:    7,
		ProducerName: "test",
		Opsets:       []OpsetID{{Version: 13}},
		Graph: Graph{
			Name: "g",
			Nodes: []Node{
				{Name: "gemm", OpType: "Gemm", Inputs: []string{"x", "w", "b"}, Outputs: []string{"y"},
					Attributes: []Attribute{{Name: "transB", Type: AttrInt, I: 1}, {Name: "alpha", Type: AttrFloat, F: 0.5}}},
				{Name: "s", OpType: "Sigmoid", Inputs: []string{"y"}, Outputs: []string{"p"}},
			},
			Initializers: []Tensor{
				{Name: "w", Dims: []int64{1, 3}, DataType: TypeFloat, Floats: []float32{1, -2, 3.5}},
				{Name: "b", Dims: []int64{1}, DataType: TypeFloat, Floats: []float32{0.25}},
				{Name: "shape", Dims: []int64{2}, DataType: TypeInt64, Int64s: []int64{-1, 3}},
			},
			Inputs:  []ValueInfo{{Name: "x", ElemType: TypeFloat, HasShape: true, Shape: []Dim{{Param: "batch"}, {Value: 3}}}},
			Outputs: []ValueInfo{{Name: "p", ElemType: TypeFloat, HasShape: true, Shape: []Dim{{Param: "batch"}, {Value: 1}}}},
		},
		Metadata: []Property{{Key: "phaseless.cloud_threshold", Value: "0.42"}, {Key: "note", Value: "ünïcode"}},
	}
}

func TestMetadata(t *testing.T) {
	// metadata_props as onnx.helper.set_model_props writes it: field 14,
	// one StringStringEntryProto (key 1, value 2) per entry.
	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "threshold")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, "0.3")
	b := Marshal(&Model{IRVersion: 7})
	b = protowire.AppendTag(b, 14, protowire.BytesType)
	b = protowire.AppendBytes(b, entry)
	m, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Meta("threshold"); !ok || v != "0.3" {
		t.Fatalf("Meta(threshold) = %q, %v", v, ok)
	}
	if _, ok := m.Meta("absent"); ok {
		t.Fatal("Meta found a key that is not there")
	}
	// A model without metadata encodes exactly as before metadata was
	// supported, so older shipped files still reproduce byte for byte.
	plain := sample()
	plain.Metadata = nil
	withEmpty := sample()
	withEmpty.Metadata = []Property{}
	if string(Marshal(plain)) != string(Marshal(withEmpty)) {
		t.Fatal("empty metadata changed the encoding")
	}
}

func TestRoundTrip(t *testing.T) {
	m := sample()
	b := Marshal(m)
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got, m)
	}
	if b2 := Marshal(got); string(b2) != string(b) {
		t.Fatal("re-encoding is not byte-identical")
	}
}

// Writers differ in how they lay out repeated numbers and tensor data; the
// reader must take PyTorch's (raw_data, unpacked dims) and the packed forms.
func TestDecodePackedAndFloatData(t *testing.T) {
	var tb []byte
	tb = protowire.AppendTag(tb, 1, protowire.BytesType) // packed dims
	tb = protowire.AppendBytes(tb, protowire.AppendVarint(protowire.AppendVarint(nil, 2), 1))
	tb = protowire.AppendTag(tb, 2, protowire.VarintType)
	tb = protowire.AppendVarint(tb, TypeFloat)
	tb = protowire.AppendTag(tb, 4, protowire.Fixed32Type) // unpacked float_data
	tb = protowire.AppendFixed32(tb, 0x3f800000)
	tb = protowire.AppendTag(tb, 4, protowire.Fixed32Type)
	tb = protowire.AppendFixed32(tb, 0x40000000)
	var tensor Tensor
	if err := decodeTensor(tb, &tensor); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tensor.Dims, []int64{2, 1}) || !reflect.DeepEqual(tensor.Floats, []float32{1, 2}) {
		t.Fatalf("got %+v", tensor)
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *Model)
	}{
		{"value count does not match dims", func(m *Model) { m.Graph.Initializers[0].Dims = []int64{2, 3} }},
		{"unsupported data type", func(m *Model) { m.Graph.Initializers[0].DataType = 10 }},
		{"huge dims", func(m *Model) { m.Graph.Initializers[0].Dims = []int64{1 << 30, 1 << 30} }},
		{"huge dim hidden behind a zero", func(m *Model) {
			m.Graph.Initializers[0].Dims = []int64{0, 1 << 40}
			m.Graph.Initializers[0].Floats = nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := sample()
			tt.edit(m)
			if _, err := Unmarshal(Marshal(m)); !errors.Is(err, ErrFormat) {
				t.Fatalf("want ErrFormat, got %v", err)
			}
		})
	}
	if _, err := Unmarshal([]byte{0x3a, 0x05, 0x01}); !errors.Is(err, ErrFormat) {
		t.Fatalf("truncated: want ErrFormat, got %v", err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add(Marshal(sample()))
	f.Add([]byte{})
	f.Add([]byte{0x3a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Unmarshal(b)
		if err != nil {
			return
		}
		// What decodes must re-encode and decode to the same model.
		m2, err := Unmarshal(Marshal(m))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(normalizeEmpty(m), normalizeEmpty(m2)) {
			t.Fatalf("round trip differs")
		}
	})
}

// normalizeEmpty maps nil and empty slices alike so DeepEqual compares content.
func normalizeEmpty(m *Model) string {
	return string(Marshal(m))
}
