package predictor

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/models/predictor/onnxpb"
	"github.com/phaseless/phaseless/models/textfeat"
)

// mlp is a reference two-layer network for building test models.
type mlp struct {
	in, hid int
	w1      []float32 // [in, hid]
	b1      []float32
	w2      []float32 // [hid]
	b2      float32
}

func newMLP(seed uint64, in, hid int) *mlp {
	r := rand.New(rand.NewPCG(seed, 1))
	m := &mlp{in: in, hid: hid, w1: make([]float32, in*hid), b1: make([]float32, hid), w2: make([]float32, hid), b2: float32(r.NormFloat64() * 0.1)}
	for i := range m.w1 {
		m.w1[i] = float32(r.NormFloat64() * 0.3)
	}
	for i := range m.b1 {
		m.b1[i] = float32(r.NormFloat64() * 0.1)
	}
	for i := range m.w2 {
		m.w2[i] = float32(r.NormFloat64() * 0.5)
	}
	return m
}

func (m *mlp) predict(x []float32) float64 {
	z := float64(m.b2)
	for k := 0; k < m.hid; k++ {
		a := float64(m.b1[k])
		for j := 0; j < m.in; j++ {
			a += float64(x[j]) * float64(m.w1[j*m.hid+k])
		}
		z += math.Max(a, 0) * float64(m.w2[k])
	}
	return 1 / (1 + math.Exp(-z))
}

func floatT(name string, dims []int64, v []float32) onnxpb.Tensor {
	return onnxpb.Tensor{Name: name, Dims: dims, DataType: onnxpb.TypeFloat, Floats: v}
}

func valueInfo(name string, dims ...onnxpb.Dim) onnxpb.ValueInfo {
	return onnxpb.ValueInfo{Name: name, ElemType: onnxpb.TypeFloat, HasShape: true, Shape: dims}
}

// gemmModel writes m the way PyTorch 1.13's exporter writes nn.Linear:
// Gemm with transB=1 and weights stored [out, in], initializers also listed
// as graph inputs (after the real one), a symbolic batch dimension.
func (m *mlp) gemmModel(opset int64) []byte {
	w1t := make([]float32, m.in*m.hid) // [hid, in]
	for j := 0; j < m.in; j++ {
		for k := 0; k < m.hid; k++ {
			w1t[k*m.in+j] = m.w1[j*m.hid+k]
		}
	}
	transB := onnxpb.Attribute{Name: "transB", Type: onnxpb.AttrInt, I: 1}
	one := onnxpb.Attribute{Name: "alpha", Type: onnxpb.AttrFloat, F: 1}
	batch := onnxpb.Dim{Param: "batch_size"}
	return onnxpb.Marshal(&onnxpb.Model{
		IRVersion: 7, ProducerName: "pytorch", ProducerVersion: "1.13.1",
		Opsets: []onnxpb.OpsetID{{Version: opset}},
		Graph: onnxpb.Graph{
			Name: "torch_jit",
			Nodes: []onnxpb.Node{
				{Name: "/fc1/Gemm", OpType: "Gemm", Inputs: []string{"input", "fc1.weight", "fc1.bias"}, Outputs: []string{"/fc1/Gemm_output_0"}, Attributes: []onnxpb.Attribute{one, {Name: "beta", Type: onnxpb.AttrFloat, F: 1}, transB}},
				{Name: "/Relu", OpType: "Relu", Inputs: []string{"/fc1/Gemm_output_0"}, Outputs: []string{"/Relu_output_0"}},
				{Name: "/fc2/Gemm", OpType: "Gemm", Inputs: []string{"/Relu_output_0", "fc2.weight", "fc2.bias"}, Outputs: []string{"/fc2/Gemm_output_0"}, Attributes: []onnxpb.Attribute{one, transB}},
				{Name: "/Sigmoid", OpType: "Sigmoid", Inputs: []string{"/fc2/Gemm_output_0"}, Outputs: []string{"output"}},
			},
			Initializers: []onnxpb.Tensor{
				floatT("fc1.weight", []int64{int64(m.hid), int64(m.in)}, w1t),
				floatT("fc1.bias", []int64{int64(m.hid)}, m.b1),
				floatT("fc2.weight", []int64{1, int64(m.hid)}, m.w2),
				floatT("fc2.bias", []int64{1}, []float32{m.b2}),
			},
			Inputs: []onnxpb.ValueInfo{
				valueInfo("input", batch, onnxpb.Dim{Value: int64(m.in)}),
				valueInfo("fc1.weight", onnxpb.Dim{Value: int64(m.hid)}, onnxpb.Dim{Value: int64(m.in)}),
				valueInfo("fc1.bias", onnxpb.Dim{Value: int64(m.hid)}),
			},
			Outputs: []onnxpb.ValueInfo{valueInfo("output", batch, onnxpb.Dim{Value: 1})},
		},
	})
}

func testVectors() [][]float32 {
	texts := []string{"set a timer for ten minutes", "navigate home", "what is the derivative of x^2 sin x",
		"東京駅までの道を教えてください 🚗", "", "Which of the following is a prime number?\nA. 4\nB. 6\nC. 7\nD. 9\nAnswer:"}
	out := make([][]float32, len(texts))
	for i, s := range texts {
		out[i] = textfeat.Extract(s)
	}
	return out
}

func TestDefaultIsRepeatable(t *testing.T) {
	m, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if m.InputWidth() != textfeat.Dim {
		t.Fatalf("width %d", m.InputWidth())
	}
	vecs := testVectors()
	first := make([]float64, len(vecs))
	for i, v := range vecs {
		if first[i], err = m.Predict(v); err != nil {
			t.Fatal(err)
		}
	}
	// Repeated batch-1 calls, interleaved, must give bit-identical answers:
	// onnx-go's Gemm bug or a stale graph would make them drift.
	for round := 0; round < 20; round++ {
		for i, v := range vecs {
			p, err := m.Predict(v)
			if err != nil {
				t.Fatal(err)
			}
			if p != first[i] {
				t.Fatalf("round %d, vector %d: %v, first call gave %v", round, i, p, first[i])
			}
		}
	}
	distinct := map[float64]bool{}
	for _, p := range first {
		distinct[p] = true
	}
	if len(distinct) < len(first)-1 {
		t.Fatalf("the model answers nearly the same for different texts: %v", first)
	}
}

func TestGemmTransBModelLoadsAndIsStable(t *testing.T) {
	for _, opset := range []int64{11, 13} {
		ref := newMLP(uint64(opset), textfeat.Dim, 16)
		m, err := Read(ref.gemmModel(opset))
		if err != nil {
			t.Fatalf("opset %d: %v", opset, err)
		}
		for i, v := range testVectors() {
			want := ref.predict(v)
			for call := 0; call < 5; call++ {
				got, err := m.Predict(v)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(got-want) > 1e-5 {
					t.Fatalf("opset %d, vector %d, call %d: %v, reference %v", opset, i, call, got, want)
				}
			}
		}
	}
}

func TestPrepareRewritesGemm(t *testing.T) {
	ref := newMLP(3, textfeat.Dim, 4)
	pb, err := onnxpb.Unmarshal(ref.gemmModel(13))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prepare(pb); err != nil {
		t.Fatal(err)
	}
	for _, n := range pb.Graph.Nodes {
		if n.OpType == "Gemm" {
			t.Fatalf("Gemm survived the rewrite: %+v", n)
		}
	}
	if len(pb.Graph.Inputs) != 1 || pb.Graph.Inputs[0].Name != "input" || pb.Graph.Inputs[0].Shape[0].Value != 1 {
		t.Fatalf("inputs after prepare: %+v", pb.Graph.Inputs)
	}
}

// brokenModels returns models Read must refuse, with the error each must match.
func brokenModels() map[string]struct {
	data []byte
	want error
} {
	ref := newMLP(5, textfeat.Dim, 4)
	edit := func(f func(*onnxpb.Model)) []byte {
		pb, err := onnxpb.Unmarshal(ref.gemmModel(13))
		if err != nil {
			panic(err)
		}
		f(pb)
		return onnxpb.Marshal(pb)
	}
	narrow := newMLP(5, textfeat.Dim-1, 4)
	return map[string]struct {
		data []byte
		want error
	}{
		"wrong input width": {narrow.gemmModel(13), ErrInputWidth},
		"not onnx":          {[]byte("this is not a model"), onnxpb.ErrFormat},
		"unsupported op":    {edit(func(m *onnxpb.Model) { m.Graph.Nodes[1].OpType = "Tanh" }), ErrUnsupported},
		"opset too new":     {edit(func(m *onnxpb.Model) { m.Opsets[0].Version = 30 }), ErrUnsupported},
		"two real inputs": {edit(func(m *onnxpb.Model) {
			m.Graph.Inputs = append(m.Graph.Inputs, valueInfo("extra", onnxpb.Dim{Value: 1}, onnxpb.Dim{Value: 1}))
		}), ErrUnsupported},
		"huge output shape": {edit(func(m *onnxpb.Model) { m.Graph.Outputs[0].Shape[1].Value = 1 << 33 }), ErrUnsupported},
		"empty weight": {edit(func(m *onnxpb.Model) {
			m.Graph.Initializers[0].Dims = []int64{0, textfeat.Dim}
			m.Graph.Initializers[0].Floats = nil
		}), ErrUnsupported},
		"dangling input":         {edit(func(m *onnxpb.Model) { m.Graph.Nodes[1].Inputs[0] = "nowhere" }), ErrUnsupported},
		"threshold not a number": {edit(func(m *onnxpb.Model) { m.Metadata = []onnxpb.Property{{Key: MetaThreshold, Value: "high"}} }), ErrUnsupported},
		"threshold 1":            {edit(func(m *onnxpb.Model) { m.Metadata = []onnxpb.Property{{Key: MetaThreshold, Value: "1"}} }), ErrUnsupported},
		"threshold NaN":          {edit(func(m *onnxpb.Model) { m.Metadata = []onnxpb.Property{{Key: MetaThreshold, Value: "NaN"}} }), ErrUnsupported},
		"transA": {edit(func(m *onnxpb.Model) {
			m.Graph.Nodes[0].Attributes[2] = onnxpb.Attribute{Name: "transA", Type: onnxpb.AttrInt, I: 1}
		}), ErrUnsupported},
		"not a probability": {edit(func(m *onnxpb.Model) {
			// Drop the Sigmoid and push the logit far out of [0,1].
			m.Graph.Nodes = m.Graph.Nodes[:3]
			m.Graph.Nodes[2].Outputs[0] = "output"
			m.Graph.Initializers[3].Floats[0] = 50
		}), ErrBadOutput},
	}
}

func TestReadRefuses(t *testing.T) {
	for name, tc := range brokenModels() {
		t.Run(name, func(t *testing.T) {
			_, err := Read(tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Read: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestPredictWrongWidth(t *testing.T) {
	m, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Predict(make([]float32, 3)); !errors.Is(err, ErrInputWidth) {
		t.Fatalf("got %v", err)
	}
	if _, err := (EntropyRule{}).Predict(make([]float32, 3)); !errors.Is(err, ErrInputWidth) {
		t.Fatalf("entropy rule: got %v", err)
	}
}

func TestEntropyRule(t *testing.T) {
	v := make([]float32, textfeat.Dim)
	for _, tt := range []struct {
		h     float32
		cloud bool
	}{{3.5, false}, {4.19, false}, {4.21, true}, {5.5, true}} {
		v[textfeat.IdxByteEntropy] = tt.h
		p, err := EntropyRule{Threshold: 4.2}.Predict(v)
		if err != nil {
			t.Fatal(err)
		}
		if (p > 0.5) != tt.cloud {
			t.Errorf("H=%v: p=%v, want cloud=%v", tt.h, p, tt.cloud)
		}
	}
	// The rule reads the same number textfeat.ByteEntropy reports.
	s := "Explain the Navier–Stokes existence and smoothness problem, with equations."
	v = textfeat.Extract(s)
	if math.Abs(float64(v[textfeat.IdxByteEntropy])-textfeat.ByteEntropy(s)) > 1e-6 {
		t.Fatal("feature slot and ByteEntropy disagree")
	}
}

func TestConcurrentPredictMatchesSerial(t *testing.T) {
	m, err := Read(newMLP(9, textfeat.Dim, 16).gemmModel(13))
	if err != nil {
		t.Fatal(err)
	}
	vecs := testVectors()
	want := make([]float64, len(vecs))
	for i, v := range vecs {
		want[i], _ = m.Predict(v)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 50; r++ {
				i := (g + r) % len(vecs)
				p, err := m.Predict(vecs[i])
				if err == nil && p != want[i] {
					err = errors.New("concurrent answer differs from serial")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestSwappable(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.onnx")
	other := filepath.Join(dir, "other.onnx")
	bad := filepath.Join(dir, "narrow.onnx")
	must(t, os.WriteFile(good, newMLP(1, textfeat.Dim, 8).gemmModel(13), 0o644))
	must(t, os.WriteFile(other, Shipped(), 0o644))
	must(t, os.WriteFile(bad, newMLP(1, textfeat.Dim+3, 8).gemmModel(13), 0o644))

	def, err := Default()
	must(t, err)
	s := NewSwappable(def)
	if err := s.Swap(bad); !errors.Is(err, ErrInputWidth) {
		t.Fatalf("swap to a wrong-width model: %v", err)
	}
	if err := s.Swap(filepath.Join(dir, "missing.onnx")); err == nil {
		t.Fatal("swap to a missing file succeeded")
	}
	if s.Current() != Predictor(def) {
		t.Fatal("a failed swap replaced the serving model")
	}

	// Requests keep flowing, without errors, while models are swapped in
	// and refused.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	vec := textfeat.Extract("turn on the seat heating")
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if p, err := s.Predict(vec); err != nil || p < 0 || p > 1 {
					errs <- errors.New("predict during swap failed")
					return
				}
			}
		}()
	}
	for i := 0; i < 10; i++ {
		path := good
		if i%2 == 1 {
			path = other
		}
		if err := s.Swap(path); err != nil {
			t.Errorf("swap %s: %v", path, err)
		}
		if err := s.Swap(bad); err == nil {
			t.Error("bad model accepted")
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.SwapTo(EntropyRule{}); err != nil {
		t.Fatalf("swap to the entropy rule: %v", err)
	}
	if _, ok := s.Threshold(); ok {
		t.Fatal("the entropy rule has no model threshold, Swappable reported one")
	}
}

func TestThresholdMetadata(t *testing.T) {
	def, err := Default()
	must(t, err)
	th, ok := def.Threshold()
	if !ok || !(th > 0 && th < 1) {
		t.Fatalf("shipped model threshold %v, %v; want one in (0,1) (phaselessctl model train writes it)", th, ok)
	}
	// The first predictor (RouteLLM labels) was shipped without one.
	old, err := Load("testdata/predictor-routellm.onnx")
	must(t, err)
	if _, ok := old.Threshold(); ok {
		t.Fatal("a model without metadata reported a threshold")
	}
	// A model from another exporter with the key set.
	pb, err := onnxpb.Unmarshal(newMLP(3, textfeat.Dim, 4).gemmModel(13))
	must(t, err)
	pb.Metadata = []onnxpb.Property{{Key: "producer_note", Value: "x"}, {Key: MetaThreshold, Value: "0.375"}}
	m, err := Read(onnxpb.Marshal(pb))
	must(t, err)
	if th, ok := m.Threshold(); !ok || th != 0.375 {
		t.Fatalf("threshold %v, %v; want 0.375", th, ok)
	}
	// Swappable answers for whichever model serves.
	s := NewSwappable(old)
	if _, ok := s.Threshold(); ok {
		t.Fatal("Swappable over a model without a threshold reported one")
	}
	must(t, s.SwapTo(m))
	if th, ok := s.Threshold(); !ok || th != 0.375 {
		t.Fatalf("after swap: threshold %v, %v", th, ok)
	}
}

// TestONNXChecker runs the official checker over the shipped model and a
// rewritten Gemm model when Debian's python3-onnx is installed (CI installs
// it).
func TestONNXChecker(t *testing.T) {
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import onnx").Run() != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3-onnx is required in CI (.ci/run installs it: apt-get install python3-onnx)")
		}
		t.Skip("python3-onnx not installed")
	}
	dir := t.TempDir()
	pb, err := onnxpb.Unmarshal(newMLP(2, textfeat.Dim, 8).gemmModel(13))
	must(t, err)
	_, err = prepare(pb)
	must(t, err)
	files := map[string][]byte{"shipped.onnx": Shipped(), "gemm.onnx": newMLP(2, textfeat.Dim, 8).gemmModel(13), "rewritten.onnx": onnxpb.Marshal(pb)}
	for name, data := range files {
		path := filepath.Join(dir, name)
		must(t, os.WriteFile(path, data, 0o644))
		out, err := exec.Command(py, "-c", "import onnx,sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)", path).CombinedOutput()
		if err != nil {
			t.Errorf("%s fails onnx.checker: %v\n%s", name, err, out)
		}
	}
	// The official reader sees the threshold where Read does.
	out, err := exec.Command(py, "-c", "import onnx,sys; print({p.key: p.value for p in onnx.load(sys.argv[1]).metadata_props}[sys.argv[2]])",
		filepath.Join(dir, "shipped.onnx"), MetaThreshold).Output()
	must(t, err)
	def, err := Default()
	must(t, err)
	th, _ := def.Threshold()
	if got, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err != nil || got != th {
		t.Errorf("onnx reads threshold %q from the shipped model, Read %v", out, th)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzRead feeds arbitrary bytes to Read. Seeds are small models: the
// fuzzer minimises each new input byte by byte, and an 11 KB seed (the
// shipped model) keeps it minimising for minutes.
func FuzzRead(f *testing.F) {
	f.Add(newMLP(1, textfeat.Dim, 2).gemmModel(13))
	for _, tc := range brokenModels() {
		f.Add(tc.data)
	}
	vec := textfeat.Extract("hello")
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Read(data)
		if err != nil {
			return
		}
		p, err := m.Predict(vec)
		if err == nil && (math.IsNaN(p) || p < 0 || p > 1) {
			t.Fatalf("accepted model answered %v", p)
		}
	})
}

// TestPyTorchExport loads real torch.onnx.export files (PyTorch 1.13,
// opset 11 and 13: Gemm with transB=1, made by testdata/make_torch_fixture.py)
// and checks onnx-go, after the Gemm rewrite, gives torch's answers on every
// repeated batch-1 call.
func TestPyTorchExport(t *testing.T) {
	raw, err := os.ReadFile("testdata/torch_mlp_expected.json")
	must(t, err)
	var want struct {
		Inputs  [][]float32 `json:"inputs"`
		Outputs []float64   `json:"outputs"`
	}
	must(t, json.Unmarshal(raw, &want))
	for _, opset := range []string{"11", "13"} {
		m, err := Load("testdata/torch_mlp_opset" + opset + ".onnx")
		if err != nil {
			t.Fatalf("opset %s: %v", opset, err)
		}
		for call := 0; call < 3; call++ {
			for i, x := range want.Inputs {
				got, err := m.Predict(x)
				must(t, err)
				if math.Abs(got-want.Outputs[i]) > 1e-6 {
					t.Fatalf("opset %s, input %d, call %d: onnx-go %v, torch %v", opset, i, call, got, want.Outputs[i])
				}
			}
		}
	}
}
