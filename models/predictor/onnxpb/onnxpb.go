// Package onnxpb reads and writes the subset of the ONNX protobuf format that
// the router predictor needs (ModelProto, GraphProto, NodeProto, TensorProto,
// AttributeProto, ValueInfoProto, OperatorSetIdProto), with
// google.golang.org/protobuf/encoding/protowire. onnx-go keeps its protobuf
// types internal, so the project writes exported models itself and rewrites
// models from other exporters before handing them to onnx-go.
//
// Field numbers are those of onnx/onnx.proto (IR version 7+). Fields the
// predictor has no use for (doc strings, training info, functions) are
// skipped on decode and not written back; the model's metadata_props are
// kept, because the trainer stores the decision threshold there.
package onnxpb

// Tensor element types (TensorProto.DataType).
const (
	TypeFloat = 1
	TypeInt64 = 7
)

// Attribute types (AttributeProto.AttributeType).
const (
	AttrFloat   = 1
	AttrInt     = 2
	AttrString  = 3
	AttrTensor  = 4
	AttrFloats  = 6
	AttrInts    = 7
	AttrStrings = 8
)

// Model is an ONNX ModelProto.
type Model struct {
	IRVersion       int64
	ProducerName    string
	ProducerVersion string
	ModelVersion    int64
	Opsets          []OpsetID
	Graph           Graph
	// Metadata is ModelProto.metadata_props, in file order: free-form
	// key/value strings that travel with the model.
	Metadata []Property
}

// Property is one StringStringEntryProto of the model's metadata.
type Property struct {
	Key, Value string
}

// Meta returns the value of the first metadata entry called key.
func (m *Model) Meta(key string) (string, bool) {
	for _, p := range m.Metadata {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// OpsetID names an operator set; Domain "" (or "ai.onnx") is the default one.
type OpsetID struct {
	Domain  string
	Version int64
}

// Graph is an ONNX GraphProto.
type Graph struct {
	Name         string
	Nodes        []Node
	Initializers []Tensor
	Inputs       []ValueInfo
	Outputs      []ValueInfo
	ValueInfo    []ValueInfo
}

// Node is an ONNX NodeProto.
type Node struct {
	Name       string
	OpType     string
	Domain     string
	Inputs     []string
	Outputs    []string
	Attributes []Attribute
}

// Attribute is an ONNX AttributeProto of one of the types above.
type Attribute struct {
	Name    string
	Type    int32
	F       float32
	I       int64
	S       []byte
	T       *Tensor
	Floats  []float32
	Ints    []int64
	Strings [][]byte
}

// Tensor is an ONNX TensorProto holding float32 or int64 data.
type Tensor struct {
	Name     string
	Dims     []int64
	DataType int32
	Floats   []float32 // TypeFloat
	Int64s   []int64   // TypeInt64
}

// ValueInfo is an ONNX ValueInfoProto for a tensor: name, element type and
// shape. A Dim with Param set is symbolic (e.g. "batch").
type ValueInfo struct {
	Name     string
	ElemType int32
	Shape    []Dim
	HasShape bool
}

// Dim is one dimension of a ValueInfo shape: a value or a symbolic name.
type Dim struct {
	Value int64
	Param string
}

// Attr returns the attribute called name, or nil.
func (n *Node) Attr(name string) *Attribute {
	for i := range n.Attributes {
		if n.Attributes[i].Name == name {
			return &n.Attributes[i]
		}
	}
	return nil
}

// NumElements is the product of the dims (1 for a scalar).
func (t *Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}
