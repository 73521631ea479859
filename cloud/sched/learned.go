package sched

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/phaseless/phaseless/models/predictor/onnxpb"
)

// The learned classifier's file: an ONNX graph (IR 7, opset 13)
//
//	features [1, NumFeatures] → MatMul w1 → Add b1 → Relu → MatMul w2 → Add b2 → Tanh → embedding [1, 3]
//
// with two more initializers the graph does not use, centres [K, 3] and
// centre_combos [K] (int64 Combo values), and metadata naming the feature
// layout. Any ONNX runtime computes the embedding; the nearest centre's
// combination is the decision. `phaselessctl sched train` writes it.
const (
	LearnedInput       = "features"
	LearnedOutput      = "embedding"
	MetaFeatureVersion = "phaseless.sched.features"
	MetaCombos         = "phaseless.sched.combos"
	// MaxLearnedHidden bounds the hidden layer so Decide keeps its
	// activations on the stack.
	MaxLearnedHidden = 64
)

// EmbedDim is the classifier's vector width (the source articles' 3-d
// vector).
const EmbedDim = 3

//go:embed learned.onnx
var shippedLearned []byte

// LearnedModel is a trained classifier: the MLP's weights (input
// standardisation folded into the first layer) and the labelled centres.
type LearnedModel struct {
	In, Hidden int
	W1         []float32 // In × Hidden, row-major
	B1         []float32 // Hidden
	W2         []float32 // Hidden × EmbedDim
	B2         [EmbedDim]float32
	Centres    [][EmbedDim]float32
	Combos     []Combo // per centre
	// Source names where the model came from (a path, "shipped").
	Source string
}

// Validate checks the shapes.
func (m *LearnedModel) Validate() error {
	switch {
	case m.In != NumFeatures:
		return fmt.Errorf("learned model: %d inputs, want %d", m.In, NumFeatures)
	case m.Hidden < 1 || m.Hidden > MaxLearnedHidden:
		return fmt.Errorf("learned model: %d hidden units, want 1..%d", m.Hidden, MaxLearnedHidden)
	case len(m.W1) != m.In*m.Hidden || len(m.B1) != m.Hidden || len(m.W2) != m.Hidden*EmbedDim:
		return errors.New("learned model: weight shapes do not match")
	case len(m.Centres) == 0 || len(m.Centres) != len(m.Combos) || len(m.Centres) > 255:
		return fmt.Errorf("learned model: %d centres and %d labels (1..255 each)", len(m.Centres), len(m.Combos))
	}
	for _, c := range m.Combos {
		if c >= NumCombos {
			return fmt.Errorf("learned model: combination %d out of range", c)
		}
	}
	for _, v := range [][]float32{m.W1, m.B1, m.W2, m.B2[:]} {
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return errors.New("learned model: non-finite weight")
			}
		}
	}
	return nil
}

// Embed computes the 3-d vector for a feature row without allocating.
func (m *LearnedModel) Embed(x *[NumFeatures]float32) [EmbedDim]float32 {
	var h [MaxLearnedHidden]float32
	for k := 0; k < m.Hidden; k++ {
		h[k] = m.B1[k]
	}
	for j := 0; j < m.In; j++ {
		xj := x[j]
		if xj == 0 {
			continue
		}
		row := m.W1[j*m.Hidden : (j+1)*m.Hidden]
		for k, w := range row {
			h[k] += xj * w
		}
	}
	var e [EmbedDim]float32
	for d := range e {
		e[d] = m.B2[d]
	}
	for k := 0; k < m.Hidden; k++ {
		if h[k] <= 0 {
			continue
		}
		for d := range e {
			e[d] += h[k] * m.W2[k*EmbedDim+d]
		}
	}
	for d := range e {
		e[d] = float32(math.Tanh(float64(e[d])))
	}
	return e
}

// Nearest returns the index of the centre closest to e.
func (m *LearnedModel) Nearest(e [EmbedDim]float32) int {
	best, bestD := 0, float32(math.Inf(1))
	for i, c := range m.Centres {
		var d float32
		for k := range e {
			t := e[k] - c[k]
			d += t * t
		}
		if d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// ONNX encodes the model in the format above.
func (m *LearnedModel) ONNX() []byte {
	centres := make([]float32, 0, len(m.Centres)*EmbedDim)
	for _, c := range m.Centres {
		centres = append(centres, c[:]...)
	}
	combos := make([]int64, len(m.Combos))
	names := make([]string, NumCombos)
	for i, c := range m.Combos {
		combos[i] = int64(c)
	}
	for c := range NumCombos {
		names[c] = c.String()
	}
	f := func(name string, dims []int64, v []float32) onnxpb.Tensor {
		return onnxpb.Tensor{Name: name, Dims: dims, DataType: onnxpb.TypeFloat, Floats: append([]float32(nil), v...)}
	}
	node := func(op string, in []string, out string) onnxpb.Node {
		return onnxpb.Node{Name: out, OpType: op, Inputs: in, Outputs: []string{out}}
	}
	shape := func(n int64) []onnxpb.Dim { return []onnxpb.Dim{{Param: "batch"}, {Value: n}} }
	pb := &onnxpb.Model{
		IRVersion: 7, ProducerName: "phaseless", ProducerVersion: "sched-learned",
		Opsets: []onnxpb.OpsetID{{Version: 13}},
		Graph: onnxpb.Graph{
			Name: "sched_classifier",
			Nodes: []onnxpb.Node{
				node("MatMul", []string{LearnedInput, "w1"}, "h_mm"),
				node("Add", []string{"h_mm", "b1"}, "h_pre"),
				node("Relu", []string{"h_pre"}, "h"),
				node("MatMul", []string{"h", "w2"}, "e_mm"),
				node("Add", []string{"e_mm", "b2"}, "e_pre"),
				node("Tanh", []string{"e_pre"}, LearnedOutput),
			},
			Initializers: []onnxpb.Tensor{
				f("w1", []int64{int64(m.In), int64(m.Hidden)}, m.W1),
				f("b1", []int64{int64(m.Hidden)}, m.B1),
				f("w2", []int64{int64(m.Hidden), EmbedDim}, m.W2),
				f("b2", []int64{EmbedDim}, m.B2[:]),
				f("centres", []int64{int64(len(m.Centres)), EmbedDim}, centres),
				{Name: "centre_combos", Dims: []int64{int64(len(combos))}, DataType: onnxpb.TypeInt64, Int64s: combos},
			},
			Inputs:  []onnxpb.ValueInfo{{Name: LearnedInput, ElemType: onnxpb.TypeFloat, HasShape: true, Shape: shape(int64(m.In))}},
			Outputs: []onnxpb.ValueInfo{{Name: LearnedOutput, ElemType: onnxpb.TypeFloat, HasShape: true, Shape: shape(EmbedDim)}},
		},
		Metadata: []onnxpb.Property{
			{Key: MetaFeatureVersion, Value: strconv.Itoa(FeatureVersion)},
			{Key: MetaCombos, Value: strings.Join(names, ",")},
		},
	}
	return onnxpb.Marshal(pb)
}

// ReadLearned decodes a model written by ONNX. The bytes come from disk or
// an operator, so anything malformed is an error, never a panic.
func ReadLearned(data []byte) (*LearnedModel, error) {
	pb, err := onnxpb.Unmarshal(data)
	if err != nil {
		return nil, fmt.Errorf("learned model: %w", err)
	}
	if v, _ := pb.Meta(MetaFeatureVersion); v != strconv.Itoa(FeatureVersion) {
		return nil, fmt.Errorf("learned model: feature layout %q, want %d", v, FeatureVersion)
	}
	want := []string{"MatMul", "Add", "Relu", "MatMul", "Add", "Tanh"}
	if len(pb.Graph.Nodes) != len(want) {
		return nil, fmt.Errorf("learned model: %d nodes, want %d", len(pb.Graph.Nodes), len(want))
	}
	for i, n := range pb.Graph.Nodes {
		if n.OpType != want[i] {
			return nil, fmt.Errorf("learned model: node %d is %s, want %s", i, n.OpType, want[i])
		}
	}
	inits := map[string]*onnxpb.Tensor{}
	for i := range pb.Graph.Initializers {
		inits[pb.Graph.Initializers[i].Name] = &pb.Graph.Initializers[i]
	}
	get := func(name string, rank int) (*onnxpb.Tensor, error) {
		t := inits[name]
		if t == nil || len(t.Dims) != rank {
			return nil, fmt.Errorf("learned model: initializer %s missing or not rank %d", name, rank)
		}
		for _, d := range t.Dims {
			if d < 1 || d > 1<<16 {
				return nil, fmt.Errorf("learned model: %s has dimension %d", name, d)
			}
		}
		n := int(t.NumElements())
		if (t.DataType == onnxpb.TypeFloat && len(t.Floats) != n) || (t.DataType == onnxpb.TypeInt64 && len(t.Int64s) != n) ||
			(t.DataType != onnxpb.TypeFloat && t.DataType != onnxpb.TypeInt64) {
			return nil, fmt.Errorf("learned model: %s holds the wrong number or type of elements", name)
		}
		return t, nil
	}
	var ts [6]*onnxpb.Tensor
	for i, n := range []struct {
		name string
		rank int
	}{{"w1", 2}, {"b1", 1}, {"w2", 2}, {"b2", 1}, {"centres", 2}, {"centre_combos", 1}} {
		if ts[i], err = get(n.name, n.rank); err != nil {
			return nil, err
		}
	}
	m := &LearnedModel{In: int(ts[0].Dims[0]), Hidden: int(ts[0].Dims[1]), W1: ts[0].Floats, B1: ts[1].Floats, W2: ts[2].Floats}
	if ts[2].Dims[1] != EmbedDim || len(ts[3].Floats) != EmbedDim || ts[4].Dims[1] != EmbedDim || ts[4].DataType != onnxpb.TypeFloat ||
		ts[5].DataType != onnxpb.TypeInt64 || ts[0].DataType != onnxpb.TypeFloat || ts[1].DataType != onnxpb.TypeFloat || ts[2].DataType != onnxpb.TypeFloat {
		return nil, errors.New("learned model: embedding width or element types do not match")
	}
	copy(m.B2[:], ts[3].Floats)
	for i := 0; i+EmbedDim <= len(ts[4].Floats); i += EmbedDim {
		m.Centres = append(m.Centres, [EmbedDim]float32(ts[4].Floats[i:i+EmbedDim]))
	}
	for _, c := range ts[5].Int64s {
		if c < 0 || c >= int64(NumCombos) {
			return nil, fmt.Errorf("learned model: combination %d out of range", c)
		}
		m.Combos = append(m.Combos, Combo(c))
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// ShippedLearned returns the classifier shipped in the binary (trained by
// `phaselessctl sched train` with its defaults; docs/cloud.md).
func ShippedLearned() (*LearnedModel, error) {
	m, err := ReadLearned(shippedLearned)
	if err != nil {
		return nil, err
	}
	m.Source = "shipped"
	return m, nil
}

// Learned is the learned classifier as a Policy: the signals of the request
// and the pools (Features) through the MLP to a 3-d vector, the nearest
// centre's resource combination, and inside it the workers Priced's
// estimates choose. The model can be swapped while decisions run.
type Learned struct {
	cur    atomic.Pointer[LearnedModel]
	priced *Priced
}

// NewLearned returns the policy over m, or over the shipped model when m is
// nil.
func NewLearned(m *LearnedModel) (*Learned, error) { return newLearned(m, PricedConfig{}) }

func newLearned(m *LearnedModel, slo PricedConfig) (*Learned, error) {
	if m == nil {
		var err error
		if m, err = ShippedLearned(); err != nil {
			return nil, err
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	slo.Classes, slo.Disaggregate = true, true
	p, err := NewPriced(NameLearned, slo)
	if err != nil {
		return nil, err
	}
	l := &Learned{priced: p}
	l.cur.Store(m)
	return l, nil
}

// Name implements Policy.
func (*Learned) Name() string { return NameLearned }

// Model returns the model deciding now.
func (l *Learned) Model() *LearnedModel { return l.cur.Load() }

// Swap replaces the model; decisions in flight finish on the old one.
func (l *Learned) Swap(m *LearnedModel) error {
	if err := m.Validate(); err != nil {
		return err
	}
	l.cur.Store(m)
	return nil
}

// SwapFile loads a model file and swaps it in.
func (l *Learned) SwapFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("learned model: %w", err)
	}
	m, err := ReadLearned(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	m.Source = path
	return l.Swap(m)
}

// Classify returns the 3-d vector and the centre for req on s.
func (l *Learned) Classify(req *Request, s *Snapshot) (e [EmbedDim]float32, centre int, c Combo) {
	m := l.cur.Load()
	var x [NumFeatures]float32
	Features(req, s, &x)
	e = m.Embed(&x)
	centre = m.Nearest(e)
	return e, centre, m.Combos[centre]
}

// Decide implements Policy.
func (l *Learned) Decide(req *Request, s *Snapshot) (Decision, error) {
	e, centre, c := l.Classify(req, s)
	d, err := l.priced.DecideCombo(req, s, c, PolicyLearned, ReasonCentre)
	if err != nil {
		return d, err
	}
	d.classified(req, s, e, centre)
	return d, nil
}
