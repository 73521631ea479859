package predictor

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/owulveryck/onnx-go"
	"github.com/owulveryck/onnx-go/backend/x/gorgonnx"
	"gorgonia.org/tensor"

	"github.com/phaseless/phaseless/models/predictor/onnxpb"
	"github.com/phaseless/phaseless/models/textfeat"
)

// MaxModelBytes bounds what Read accepts. The shipped model is about 15 KB
// and the budget 64 KB; 16 MiB leaves room for models from other exporters
// without letting a bad file exhaust a device's memory.
const MaxModelBytes = 16 << 20

// Model is an ONNX router model run by onnx-go's gorgonnx backend. It is
// safe for concurrent use: each call borrows one of up to GOMAXPROCS
// instances of the graph, built lazily from the same prepared bytes.
type Model struct {
	width     int
	threshold float64 // from MetaThreshold; 0 = the model names none
	probe     bool    // reads the probe block (MetaProbe)
	prepared  []byte  // the model after prepare(), re-encoded; what each instance decodes
	free      chan *instance

	mu      sync.Mutex // guards created
	created int
}

var _ Predictor = (*Model)(nil)

// buildMu serialises building onnx-go graphs, across all models: gorgonnx
// names nodes from an unsynchronised package-level counter (uniq.go) while it
// populates a graph at the first Run, which the race detector catches when
// two models load at once (a hot-swap while the pool grows).
var buildMu sync.Mutex

// instance is one onnx-go graph, used by one goroutine at a time.
type instance struct {
	backend *gorgonnx.Graph
	model   *onnx.Model
	input   onnx.DataCarrier
	x       tensor.Tensor // [1, width], backed by buf
	buf     []float32
}

// Load reads an ONNX router model from path. See Read.
func Load(path string) (*Model, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load predictor %s: %w", path, err)
	}
	if fi.Size() > MaxModelBytes {
		return nil, fmt.Errorf("load predictor %s: %d bytes, more than %d", path, fi.Size(), MaxModelBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load predictor %s: %w", path, err)
	}
	m, err := Read(data)
	if err != nil {
		return nil, fmt.Errorf("load predictor %s: %w", path, err)
	}
	return m, nil
}

// Read parses an ONNX router model: one float32 input of shape
// [batch, textfeat.Dim], one output holding the cloud probability, built from
// Gemm, MatMul, Add, Relu and Sigmoid (opset 7–21). Gemm nodes are rewritten
// into MatMul + Add. One instance is built and run on a probe vector before
// Read returns, so a model that onnx-go cannot run fails here, not on the
// first request.
func Read(data []byte) (*Model, error) {
	if len(data) > MaxModelBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrUnsupported, len(data), MaxModelBytes)
	}
	pb, err := onnxpb.Unmarshal(data)
	if err != nil {
		return nil, err
	}
	th, err := readThreshold(pb)
	if err != nil {
		return nil, err
	}
	width, err := prepare(pb)
	if err != nil {
		return nil, err
	}
	if width != textfeat.Dim && width != textfeat.V1Dim && width != textfeat.V2Dim {
		return nil, fmt.Errorf("%w: model input has %d features, textfeat v%d has %d (v1: %d, v2: %d)", ErrInputWidth, width, textfeat.Version, textfeat.Dim, textfeat.V1Dim, textfeat.V2Dim)
	}
	m := &Model{
		width:     width,
		threshold: th,
		probe:     readsProbe(pb, width),
		prepared:  onnxpb.Marshal(pb),
		free:      make(chan *instance, max(1, runtime.GOMAXPROCS(0))),
	}
	in, err := m.newInstance()
	if err != nil {
		return nil, err
	}
	m.created = 1
	m.free <- in
	return m, nil
}

// MetaThreshold is the ONNX metadata_props key under which a model carries
// its decision threshold: the cloud probability at or above which a request
// should go to the cloud, chosen on held-out data when the model was trained
// (models/predictor/train). The value is a decimal in (0,1).
const MetaThreshold = "phaseless.cloud_threshold"

// readThreshold parses MetaThreshold. A model without it has no threshold
// (0); one with a value that is not a probability strictly between 0 and 1
// is refused, since a router would otherwise send everything one way.
func readThreshold(pb *onnxpb.Model) (float64, error) {
	v, ok := pb.Meta(MetaThreshold)
	if !ok {
		return 0, nil
	}
	th, err := strconv.ParseFloat(v, 64)
	if err != nil || !(th > 0 && th < 1) {
		return 0, fmt.Errorf("%w: metadata %s = %q, want a number in (0,1)", ErrUnsupported, MetaThreshold, v)
	}
	return th, nil
}

// Threshold is the decision threshold the model was shipped with (see
// MetaThreshold); ok is false when the file names none, and the caller
// keeps its own default.
func (m *Model) Threshold() (th float64, ok bool) { return m.threshold, m.threshold > 0 }

// MetaProbe is the ONNX metadata_props key that says whether a model reads
// the feature vector's probe block (textfeat.SetProbe): "1" when it was
// trained on the edge model's prefill probe, "0" when it was trained with
// the block empty, so the device need not run the probe for it. A file
// without the key reads the block when it is as wide as the block
// (version 2, whose models were all trained on it).
const MetaProbe = "phaseless.reads_probe"

func readsProbe(pb *onnxpb.Model, width int) bool {
	if v, ok := pb.Meta(MetaProbe); ok {
		return v == "1"
	}
	return width >= textfeat.V2Dim
}

// ReadsProbe reports whether the model reads the probe block (MetaProbe):
// the router runs the edge model's probe only for a predictor that does.
func (m *Model) ReadsProbe() bool { return m.probe }

// ProbeReader is a Predictor that says whether it reads the probe block;
// one that does not say is taken to read it.
type ProbeReader interface {
	ReadsProbe() bool
}

var _ ProbeReader = (*Model)(nil)

// InputWidth is the number of features the model takes.
func (m *Model) InputWidth() int { return m.width }

// Predict implements Predictor: one forward pass at batch 1. A version-1
// or version-2 model (textfeat.V1Dim, V2Dim inputs) reads its prefix of a
// current vector, which is laid out unchanged.
func (m *Model) Predict(features []float32) (float64, error) {
	if m.width < textfeat.Dim && len(features) == textfeat.Dim {
		features = features[:m.width]
	}
	if len(features) != m.width {
		return 0, fmt.Errorf("%w: %d features, model takes %d", ErrInputWidth, len(features), m.width)
	}
	in, err := m.acquire()
	if err != nil {
		return 0, err
	}
	p, err := in.run(features)
	m.free <- in
	return p, err
}

// acquire returns a free instance, building a new one while fewer than
// cap(free) exist, else waiting for one.
func (m *Model) acquire() (*instance, error) {
	select {
	case in := <-m.free:
		return in, nil
	default:
	}
	m.mu.Lock()
	grow := m.created < cap(m.free)
	if grow {
		m.created++
	}
	m.mu.Unlock()
	if !grow {
		return <-m.free, nil
	}
	in, err := m.newInstance()
	if err != nil {
		m.mu.Lock()
		m.created--
		m.mu.Unlock()
		return nil, err
	}
	return in, nil
}

// newInstance decodes the prepared model and runs it once on a zero vector,
// which fixes onnx-go's graph at batch 1 (it never changes shape after the
// first run). onnx-go panics on some malformed graphs; a panic becomes an
// error so a bad model file cannot take the agent down.
func (m *Model) newInstance() (in *instance, err error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			in, err = nil, fmt.Errorf("%w: onnx-go: %v", ErrUnsupported, r)
		}
	}()
	backend := gorgonnx.NewGraph()
	model := onnx.NewModel(backend)
	if err := model.UnmarshalBinary(m.prepared); err != nil {
		return nil, fmt.Errorf("%w: onnx-go: %v", ErrUnsupported, err)
	}
	if len(model.Input) != 1 || len(model.Output) != 1 {
		return nil, fmt.Errorf("%w: onnx-go sees %d inputs and %d outputs", ErrUnsupported, len(model.Input), len(model.Output))
	}
	dc, ok := backend.Node(model.Input[0]).(onnx.DataCarrier)
	if !ok {
		return nil, fmt.Errorf("%w: input node carries no data", ErrUnsupported)
	}
	buf := make([]float32, m.width)
	in = &instance{
		backend: backend,
		model:   model,
		input:   dc,
		x:       tensor.New(tensor.WithShape(1, m.width), tensor.WithBacking(buf)),
		buf:     buf,
	}
	if _, err := in.run(buf); err != nil {
		return nil, err
	}
	return in, nil
}

func (in *instance) run(features []float32) (p float64, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = 0, fmt.Errorf("%w: onnx-go: %v", ErrUnsupported, r)
		}
	}()
	copy(in.buf, features)
	if err := in.input.SetTensor(in.x); err != nil {
		return 0, fmt.Errorf("predictor: set input: %w", err)
	}
	if err := in.backend.Run(); err != nil {
		return 0, fmt.Errorf("predictor: run: %w", err)
	}
	outs, err := in.model.GetOutputTensors()
	if err != nil {
		return 0, fmt.Errorf("predictor: output: %w", err)
	}
	if len(outs) != 1 || outs[0] == nil {
		return 0, fmt.Errorf("%w: no output tensor", ErrBadOutput)
	}
	switch d := outs[0].Data().(type) {
	case []float32:
		if len(d) != 1 {
			return 0, fmt.Errorf("%w: %d output values at batch 1, want 1", ErrBadOutput, len(d))
		}
		p = float64(d[0])
	case float32:
		p = float64(d)
	default:
		return 0, fmt.Errorf("%w: output of type %T", ErrBadOutput, d)
	}
	if math.IsNaN(p) || p < 0 || p > 1 {
		return 0, fmt.Errorf("%w: %v", ErrBadOutput, p)
	}
	return p, nil
}
