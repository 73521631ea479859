package predictor

import (
	"fmt"

	"github.com/phaseless/phaseless/models/predictor/onnxpb"
)

// Opset range accepted for the default domain. Gemm, MatMul, Add, Relu and
// Sigmoid compute the same float32 results in every opset from 7 (when
// Gemm/Add got numpy broadcasting) to 21; DESIGN.md promises 11–13.
const (
	minOpset = 7
	maxOpset = 21
)

// supportedOps are the operators a router MLP needs (DESIGN.md §4 Artifacts).
var supportedOps = map[string]bool{"Gemm": true, "MatMul": true, "Add": true, "Relu": true, "Sigmoid": true}

// prepare checks that m is a single-input, single-output float32 model made
// of supported operators, fixes its batch dimension to 1, puts the real
// input first, and rewrites every Gemm into MatMul + Add. It returns the
// input width.
func prepare(m *onnxpb.Model) (int, error) {
	if err := checkOpset(m.Opsets); err != nil {
		return 0, err
	}
	g := &m.Graph
	inits := make(map[string]*onnxpb.Tensor, len(g.Initializers))
	for i := range g.Initializers {
		inits[g.Initializers[i].Name] = &g.Initializers[i]
	}

	// Older exporters list initializers among the inputs. onnx-go's SetInput
	// looks inputs up by position, so keep only the real one.
	var real []onnxpb.ValueInfo
	for _, in := range g.Inputs {
		if inits[in.Name] == nil {
			real = append(real, in)
		}
	}
	if len(real) != 1 {
		return 0, fmt.Errorf("%w: %d graph inputs besides initializers, want 1", ErrUnsupported, len(real))
	}
	in := real[0]
	if in.ElemType != onnxpb.TypeFloat {
		return 0, fmt.Errorf("%w: input %q has element type %d, want float32", ErrUnsupported, in.Name, in.ElemType)
	}
	if len(in.Shape) != 2 || in.Shape[1].Param != "" || in.Shape[1].Value <= 0 {
		return 0, fmt.Errorf("%w: input %q must have shape [batch, width] with a fixed width, has %s", ErrUnsupported, in.Name, shapeString(in.Shape))
	}
	if b := in.Shape[0]; b.Param == "" && b.Value != 1 {
		return 0, fmt.Errorf("%w: input %q has batch %d; a router model runs one request at a time (batch 1 or symbolic)", ErrUnsupported, in.Name, b.Value)
	}
	width := int(in.Shape[1].Value)
	in.Shape = []onnxpb.Dim{{Value: 1}, {Value: int64(width)}}
	g.Inputs = []onnxpb.ValueInfo{in}

	if len(g.Outputs) != 1 {
		return 0, fmt.Errorf("%w: %d graph outputs, want 1 (the cloud probability)", ErrUnsupported, len(g.Outputs))
	}
	out := &g.Outputs[0]
	// onnx-go allocates the declared output shape before running: a shape
	// of 2^33 elements would kill the process, so only one value may be
	// declared (found by FuzzRead).
	if len(out.Shape) > 2 {
		return 0, fmt.Errorf("%w: output %q has rank %d, want [batch, 1] or [batch]", ErrUnsupported, out.Name, len(out.Shape))
	}
	for i := range out.Shape {
		if out.Shape[i].Param != "" {
			out.Shape[i] = onnxpb.Dim{Value: 1}
		}
		if out.Shape[i].Value != 1 {
			return 0, fmt.Errorf("%w: output %q has shape %s, want one probability per request", ErrUnsupported, out.Name, shapeString(out.Shape))
		}
	}
	// Intermediate shapes may carry symbolic batch dims; onnx-go infers them.
	g.ValueInfo = nil

	defined := map[string]bool{in.Name: true}
	for name := range inits {
		defined[name] = true
	}
	nodes := make([]onnxpb.Node, 0, len(g.Nodes)+2)
	for _, n := range g.Nodes {
		if n.Domain != "" && n.Domain != "ai.onnx" {
			return 0, fmt.Errorf("%w: node %q is in domain %q", ErrUnsupported, n.Name, n.Domain)
		}
		if !supportedOps[n.OpType] {
			return 0, fmt.Errorf("%w: operator %s (node %q); supported: Gemm, MatMul, Add, Relu, Sigmoid", ErrUnsupported, n.OpType, n.Name)
		}
		for _, name := range n.Inputs {
			if name != "" && !defined[name] {
				return 0, fmt.Errorf("%w: node %q reads %q before anything defines it (nodes must be in topological order)", ErrUnsupported, n.Name, name)
			}
		}
		if len(n.Outputs) != 1 || n.Outputs[0] == "" || defined[n.Outputs[0]] {
			return 0, fmt.Errorf("%w: node %q must define exactly one new output", ErrUnsupported, n.Name)
		}
		defined[n.Outputs[0]] = true
		if n.OpType != "Gemm" {
			if want := map[string]int{"MatMul": 2, "Add": 2, "Relu": 1, "Sigmoid": 1}[n.OpType]; len(n.Inputs) != want {
				return 0, fmt.Errorf("%w: %s node %q has %d inputs, want %d", ErrUnsupported, n.OpType, n.Name, len(n.Inputs), want)
			}
			nodes = append(nodes, n)
			continue
		}
		rewritten, err := rewriteGemm(g, inits, defined, n)
		if err != nil {
			return 0, err
		}
		nodes = append(nodes, rewritten...)
	}
	if !defined[out.Name] {
		return 0, fmt.Errorf("%w: output %q is not computed by any node", ErrUnsupported, out.Name)
	}
	g.Nodes = nodes
	return width, nil
}

func checkOpset(opsets []onnxpb.OpsetID) error {
	for _, o := range opsets {
		if o.Domain == "" || o.Domain == "ai.onnx" {
			if o.Version < minOpset || o.Version > maxOpset {
				return fmt.Errorf("%w: opset %d, supported %d–%d", ErrUnsupported, o.Version, minOpset, maxOpset)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: no default-domain opset import", ErrUnsupported)
}

// rewriteGemm turns Y = alpha·A·op(B) + beta·C into MatMul(A, B') and
// Add(·, C'), where B' = alpha·op(B) and C' = beta·C reshaped to [1, n] are
// new initializers. onnx-go's Gemm aliases its output with C at batch 1 (see
// the package doc); MatMul + Add does not. transA is refused: no MLP
// exporter emits it.
func rewriteGemm(g *onnxpb.Graph, inits map[string]*onnxpb.Tensor, defined map[string]bool, n onnxpb.Node) ([]onnxpb.Node, error) {
	if len(n.Inputs) < 2 || len(n.Inputs) > 3 {
		return nil, fmt.Errorf("%w: Gemm node %q has %d inputs", ErrUnsupported, n.Name, len(n.Inputs))
	}
	alpha, beta := float32(1), float32(1)
	var transA, transB int64
	for _, a := range n.Attributes {
		switch a.Name {
		case "alpha":
			alpha = a.F
		case "beta":
			beta = a.F
		case "transA":
			transA = a.I
		case "transB":
			transB = a.I
		}
	}
	if transA != 0 {
		return nil, fmt.Errorf("%w: Gemm node %q has transA=1", ErrUnsupported, n.Name)
	}
	b := inits[n.Inputs[1]]
	if b == nil || b.DataType != onnxpb.TypeFloat || len(b.Dims) != 2 {
		return nil, fmt.Errorf("%w: Gemm node %q: B must be a 2-D float32 initializer", ErrUnsupported, n.Name)
	}
	k, cols := b.Dims[0], b.Dims[1]
	if k == 0 || cols == 0 {
		return nil, fmt.Errorf("%w: Gemm node %q: B has shape %v", ErrUnsupported, n.Name, b.Dims)
	}
	if transB != 0 {
		k, cols = cols, k
	}
	w := make([]float32, k*cols)
	for i := int64(0); i < k; i++ {
		for j := int64(0); j < cols; j++ {
			v := b.Floats[i*cols+j]
			if transB != 0 {
				v = b.Floats[j*k+i]
			}
			w[i*cols+j] = alpha * v
		}
	}
	out := n.Outputs[0]
	wName := uniqueName(defined, out+"__gemm_w")
	addInit(g, inits, onnxpb.Tensor{Name: wName, Dims: []int64{k, cols}, DataType: onnxpb.TypeFloat, Floats: w})

	mm := onnxpb.Node{Name: n.Name + "/matmul", OpType: "MatMul", Inputs: []string{n.Inputs[0], wName}, Outputs: []string{out}}
	if len(n.Inputs) < 3 || n.Inputs[2] == "" || beta == 0 {
		return []onnxpb.Node{mm}, nil
	}
	c := inits[n.Inputs[2]]
	if c == nil || c.DataType != onnxpb.TypeFloat {
		return nil, fmt.Errorf("%w: Gemm node %q: C must be a float32 initializer", ErrUnsupported, n.Name)
	}
	bias := make([]float32, cols)
	switch int64(len(c.Floats)) {
	case cols:
		for j := range bias {
			bias[j] = beta * c.Floats[j]
		}
	case 1:
		for j := range bias {
			bias[j] = beta * c.Floats[0]
		}
	default:
		return nil, fmt.Errorf("%w: Gemm node %q: C has %d values for %d columns", ErrUnsupported, n.Name, len(c.Floats), cols)
	}
	cName := uniqueName(defined, out+"__gemm_c")
	addInit(g, inits, onnxpb.Tensor{Name: cName, Dims: []int64{1, cols}, DataType: onnxpb.TypeFloat, Floats: bias})
	mmOut := uniqueName(defined, out+"__gemm_mm")
	mm.Outputs = []string{mmOut}
	add := onnxpb.Node{Name: n.Name + "/add", OpType: "Add", Inputs: []string{mmOut, cName}, Outputs: []string{out}}
	return []onnxpb.Node{mm, add}, nil
}

func addInit(g *onnxpb.Graph, inits map[string]*onnxpb.Tensor, t onnxpb.Tensor) {
	g.Initializers = append(g.Initializers, t)
	// Appending may move the slice: rebuild the index.
	for i := range g.Initializers {
		inits[g.Initializers[i].Name] = &g.Initializers[i]
	}
}

// uniqueName returns a name not yet defined in the graph and reserves it.
// Names later nodes define are not known yet; the suffix makes a clash with
// them as unlikely as any exporter's own naming.
func uniqueName(defined map[string]bool, base string) string {
	name := base
	for i := 1; defined[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	defined[name] = true
	return name
}

func shapeString(s []onnxpb.Dim) string {
	out := "["
	for i, d := range s {
		if i > 0 {
			out += ","
		}
		if d.Param != "" {
			out += d.Param
		} else {
			out += fmt.Sprint(d.Value)
		}
	}
	return out + "]"
}
