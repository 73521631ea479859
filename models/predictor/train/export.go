package train

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/predictor/onnxpb"
	"github.com/phaseless/phaseless/models/textfeat"
)

// Names in the exported graph; docs/predictor.md documents them for anyone
// feeding the file to another runtime.
const (
	InputName  = "features"
	OutputName = "cloud_prob"
)

// ONNX returns the net as an ONNX model (IR 7, opset 13): MatMul, Add,
// Relu, MatMul, Add, Sigmoid. MatMul + Add rather than Gemm because onnx-go
// v0.5.0's Gemm corrupts its bias at batch 1. The input standardisation is
// folded into the first layer: W1'[j,k] = W1[j,k]/Std[j] and
// B1'[k] = B1[k] − Σ_j Mean[j]·W1[j,k]/Std[j]. A Net with a Threshold
// carries it in the metadata (predictor.MetaThreshold, four decimals).
func (n *Net) ONNX() []byte {
	w1 := make([]float32, n.In*n.Hidden)
	b1 := make([]float32, n.Hidden)
	for k := 0; k < n.Hidden; k++ {
		acc := float64(n.B1[k])
		for j := 0; j < n.In; j++ {
			w := float64(n.W1[j*n.Hidden+k]) / float64(n.Std[j])
			w1[j*n.Hidden+k] = float32(w)
			acc -= float64(n.Mean[j]) * w
		}
		b1[k] = float32(acc)
	}
	f := func(name string, dims []int64, v []float32) onnxpb.Tensor {
		return onnxpb.Tensor{Name: name, Dims: dims, DataType: onnxpb.TypeFloat, Floats: v}
	}
	node := func(op string, in []string, out string) onnxpb.Node {
		return onnxpb.Node{Name: out, OpType: op, Inputs: in, Outputs: []string{out}}
	}
	m := &onnxpb.Model{
		IRVersion:       7,
		ProducerName:    "phaseless",
		ProducerVersion: fmt.Sprintf("textfeat-v%d", n.featureVersion()),
		Opsets:          []onnxpb.OpsetID{{Version: 13}},
		Graph: onnxpb.Graph{
			Name: "router_mlp",
			Nodes: []onnxpb.Node{
				node("MatMul", []string{InputName, "w1"}, "h_mm"),
				node("Add", []string{"h_mm", "b1"}, "h_pre"),
				node("Relu", []string{"h_pre"}, "h"),
				node("MatMul", []string{"h", "w2"}, "z_mm"),
				node("Add", []string{"z_mm", "b2"}, "z"),
				node("Sigmoid", []string{"z"}, OutputName),
			},
			Initializers: []onnxpb.Tensor{
				f("w1", []int64{int64(n.In), int64(n.Hidden)}, w1),
				f("b1", []int64{int64(n.Hidden)}, b1),
				f("w2", []int64{int64(n.Hidden), 1}, append([]float32(nil), n.W2...)),
				f("b2", []int64{1}, []float32{n.B2}),
			},
			Inputs: []onnxpb.ValueInfo{{Name: InputName, ElemType: onnxpb.TypeFloat, HasShape: true,
				Shape: []onnxpb.Dim{{Param: "batch"}, {Value: int64(n.In)}}}},
			Outputs: []onnxpb.ValueInfo{{Name: OutputName, ElemType: onnxpb.TypeFloat, HasShape: true,
				Shape: []onnxpb.Dim{{Param: "batch"}, {Value: 1}}}},
		},
	}
	if n.Threshold > 0 {
		m.Metadata = []onnxpb.Property{{Key: predictor.MetaThreshold, Value: strconv.FormatFloat(n.Threshold, 'f', 4, 64)}}
	}
	if n.In == textfeat.Dim {
		reads := "1"
		if n.IgnoresProbe {
			reads = "0"
		}
		m.Metadata = append(m.Metadata, onnxpb.Property{Key: predictor.MetaProbe, Value: reads})
	}
	return onnxpb.Marshal(m)
}

// featureVersion is the textfeat layout the net reads: 1 for a
// version-1-wide net (RouteLLM labels), 2 for a version-2-wide one, else
// the current one.
func (n *Net) featureVersion() int {
	switch n.In {
	case textfeat.V1Dim:
		return 1
	case textfeat.V2Dim:
		return 2
	}
	return textfeat.Version
}

// NetFromONNX reads back a net that ONNX wrote, for Config.Head: its
// first layer as exported (the standardisation folded in, so Mean 0 and
// Std 1, which export folds again without changing a bit), its output
// layer, threshold and probe flag.
func NetFromONNX(b []byte) (*Net, error) {
	m, err := onnxpb.Unmarshal(b)
	if err != nil {
		return nil, err
	}
	init := map[string]onnxpb.Tensor{}
	for _, t := range m.Graph.Initializers {
		init[t.Name] = t
	}
	w1, b1, w2, b2 := init["w1"], init["b1"], init["w2"], init["b2"]
	if len(w1.Dims) != 2 || len(w2.Dims) != 2 || len(b2.Floats) != 1 {
		return nil, errors.New("train: not a router MLP written by train (initializers w1, b1, w2, b2)")
	}
	in, hid := int(w1.Dims[0]), int(w1.Dims[1])
	if in < 1 || hid < 1 || len(w1.Floats) != in*hid || len(b1.Floats) != hid || len(w2.Floats) != hid {
		return nil, fmt.Errorf("train: router MLP of %v, %d, %d weights", w1.Dims, len(b1.Floats), len(w2.Floats))
	}
	n := &Net{In: in, Hidden: hid, W1: w1.Floats, B1: b1.Floats, W2: w2.Floats, B2: b2.Floats[0],
		Mean: make([]float32, in), Std: make([]float32, in)}
	for j := range n.Std {
		n.Std[j] = 1
	}
	if v, ok := m.Meta(predictor.MetaThreshold); ok {
		if n.Threshold, err = strconv.ParseFloat(v, 64); err != nil {
			return nil, fmt.Errorf("train: threshold %q: %w", v, err)
		}
	}
	if v, ok := m.Meta(predictor.MetaProbe); ok {
		n.IgnoresProbe = v == "0"
	}
	return n, nil
}
