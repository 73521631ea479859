package train

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/phaseless/phaseless/models/textfeat"
)

// ShippedSeed is the seed of the shipped predictor.onnx.
const ShippedSeed = 1

// Config is one training run. Zero fields take the defaults; with Seed =
// ShippedSeed they reproduce the shipped predictor.onnx.
type Config struct {
	Seed      uint64  // seeds weight init and shuffling; same seed, data and GOARCH → same model bytes
	Hidden    int     // hidden units (default 32)
	Epochs    int     // passes over the training data (default 15)
	BatchSize int     // rows per step (default 64)
	LearnRate float64 // Adam step size (default 0.003)
	L2        float64 // weight decay (default 0.03; less overfits the training subjects)
	// SourceWeights is each source's share of the loss (default mmlu 0.4,
	// clinc 0.4, clinc-oos 0.2, telemetry 0.4): without it the 8k CLINC
	// commands would drown the 200 out-of-scope ones. Chosen on held-out
	// data (docs/predictor.md): giving out-of-scope 0.25 sent a third of
	// unseen commands to the cloud for no gain in AUC.
	SourceWeights map[string]float64
	// Probe trains on the probe block (edge labels): the edge model's
	// prefill, which the device then runs before every routed request.
	// Without it the block is cleared and the net ignores it (IgnoreProbe):
	// measured on the development set, the edge block (textfeat version 3)
	// carries what the probe did, for microseconds instead of a prefill
	// (docs/predictor.md).
	Probe bool
	// UnansweredTarget, when set, is the training target of a request
	// labelled for the cloud whose answer the cloud model does not get
	// right either (edge labels): below 1, so that the requests the cloud
	// model answers rank above them. RouteLLM's APGR counts a call to the
	// strong model as a gain only where its answer is right.
	UnansweredTarget float64
	// MaxCarToCloud bounds the share of validation car requests the chosen
	// threshold may send to the cloud where it is chosen on validation
	// (edge labels; default DefaultMaxCarToCloud; 1 = maximise balanced
	// accuracy alone).
	MaxCarToCloud float64
	// ValThreshold chooses the threshold on the validation split
	// (ChooseThreshold) even where the data has a development set, whose
	// rule (ChooseDevThreshold) is the default.
	ValThreshold bool
	// Augment is how many unseen-word copies of each short training
	// request AugmentUnseen adds (edge labels; 0 none).
	Augment int
	// Head, when set, is the net whose first layer the run keeps (its
	// weights frozen, written back byte for byte: NetFromONNX) while it
	// trains the output layer alone, from Head's, and chooses the
	// threshold again. A device that runs Head's model then fetches the
	// output layer's few hundred bytes and the metadata of the update
	// (firmware.ChunkingONNX), not the whole file: the cheap update of a
	// router that the fleet's telemetry recalibrates.
	Head *Net `json:"-"`
}

func (c *Config) fill() {
	if c.Hidden == 0 {
		c.Hidden = 32
	}
	if c.Epochs == 0 {
		c.Epochs = 15
	}
	if c.BatchSize == 0 {
		c.BatchSize = 64
	}
	if c.LearnRate == 0 {
		c.LearnRate = 0.003
	}
	if c.L2 == 0 {
		c.L2 = 0.03
	}
	if c.MaxCarToCloud == 0 {
		c.MaxCarToCloud = DefaultMaxCarToCloud
	}
	if c.SourceWeights == nil {
		c.SourceWeights = map[string]float64{"mmlu": 0.4, "clinc": 0.4, "clinc-oos": 0.2, SourceTelemetry: 0.4}
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Hidden < 1 || c.Hidden > 1024:
		return fmt.Errorf("train config: hidden %d not in 1..1024", c.Hidden)
	case c.Epochs < 1:
		return fmt.Errorf("train config: epochs %d < 1", c.Epochs)
	case c.BatchSize < 1:
		return fmt.Errorf("train config: batch-size %d < 1", c.BatchSize)
	case c.Augment < 0 || c.Augment > 8:
		return fmt.Errorf("train config: augment %d not in 0..8", c.Augment)
	case c.UnansweredTarget < 0 || c.UnansweredTarget > 1:
		return fmt.Errorf("train config: unanswered-target %v not in [0,1]", c.UnansweredTarget)
	case !(c.LearnRate > 0):
		return fmt.Errorf("train config: learn-rate %v must be > 0", c.LearnRate)
	case c.L2 < 0:
		return fmt.Errorf("train config: l2 %v must be ≥ 0", c.L2)
	case c.MaxCarToCloud < 0 || c.MaxCarToCloud > 1 || math.IsNaN(c.MaxCarToCloud):
		return fmt.Errorf("train config: max-car-to-cloud %v not in (0,1]", c.MaxCarToCloud)
	}
	return nil
}

// Net is a trained MLP: p = sigmoid(W2·relu(W1·((x−Mean)/Std) + B1) + B2).
// Standardisation is folded into W1 and B1 at export, so the ONNX file takes
// raw textfeat vectors.
type Net struct {
	In, Hidden int
	Mean, Std  []float32 // per feature, from the training data
	W1         []float32 // [In, Hidden] row-major
	B1         []float32 // [Hidden]
	W2         []float32 // [Hidden]
	B2         float32
	// Losses is the mean training loss of each epoch.
	Losses []float64
	// Threshold is the decision threshold chosen on validation data
	// (ChooseThreshold), written into the ONNX metadata; 0 = none.
	Threshold float64
	// IgnoresProbe: the net was trained with the probe block empty and its
	// weights on the block zeroed (IgnoreProbe), so the block cannot change
	// its answer; the ONNX metadata says so (predictor.MetaProbe) and the
	// device skips the probe.
	IgnoresProbe bool
}

// IgnoreProbe zeroes the first layer's weights on the probe block of a
// net trained without it (the block was 0 in every example, so no answer
// on the training data changes) and marks the net IgnoresProbe.
func (n *Net) IgnoreProbe() {
	if n.In != textfeat.Dim {
		return
	}
	for j := textfeat.ProbeOffset; j < textfeat.ProbeOffset+textfeat.ProbeFeatures; j++ {
		clear(n.W1[j*n.Hidden : (j+1)*n.Hidden])
	}
	n.IgnoresProbe = true
}

// Fit trains a Net on examples with gorgonia (Adam, weighted binary
// cross-entropy on logits).
func Fit(cfg Config, examples []Example) (*Net, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(examples) < cfg.BatchSize {
		return nil, fmt.Errorf("train: %d examples, fewer than one batch of %d", len(examples), cfg.BatchSize)
	}
	in, hid, bs := len(examples[0].Features), cfg.Hidden, cfg.BatchSize
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))

	net := &Net{In: in, Hidden: hid}
	net.Mean, net.Std = standardize(examples, in)
	if h := cfg.Head; h != nil {
		if h.In != in {
			return nil, fmt.Errorf("train: the head's net reads %d features, the examples have %d", h.In, in)
		}
		// Its standardisation is folded into its first layer already.
		hid = h.Hidden
		net.Hidden, net.Mean, net.Std, net.IgnoresProbe = hid, h.Mean, h.Std, h.IgnoresProbe
	}
	weights, err := exampleWeights(cfg, examples)
	if err != nil {
		return nil, err
	}

	// Glorot-uniform init from our own seeded generator: gorgonia's
	// initialisers draw from the global math/rand.
	glorot := func(fanIn, fanOut, n int) []float32 {
		lim := math.Sqrt(6 / float64(fanIn+fanOut))
		w := make([]float32, n)
		for i := range w {
			w[i] = float32((rng.Float64()*2 - 1) * lim)
		}
		return w
	}

	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(bs, in), G.WithName("x"))
	y := G.NewMatrix(g, tensor.Float32, G.WithShape(bs, 1), G.WithName("y"))
	wt := G.NewMatrix(g, tensor.Float32, G.WithShape(bs, 1), G.WithName("w"))
	w1v, b1v := glorot(in, hid, in*hid), make([]float32, hid)
	w2v, b2v := glorot(hid, 1, hid), make([]float32, 1)
	if h := cfg.Head; h != nil {
		w1v, b1v, w2v, b2v = slices.Clone(h.W1), slices.Clone(h.B1), slices.Clone(h.W2), []float32{h.B2}
	}
	w1 := G.NewMatrix(g, tensor.Float32, G.WithShape(in, hid), G.WithName("w1"),
		G.WithValue(tensor.New(tensor.WithShape(in, hid), tensor.WithBacking(w1v))))
	b1 := G.NewMatrix(g, tensor.Float32, G.WithShape(1, hid), G.WithName("b1"),
		G.WithValue(tensor.New(tensor.WithShape(1, hid), tensor.WithBacking(b1v))))
	w2 := G.NewMatrix(g, tensor.Float32, G.WithShape(hid, 1), G.WithName("w2"),
		G.WithValue(tensor.New(tensor.WithShape(hid, 1), tensor.WithBacking(w2v))))
	b2 := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 1), G.WithName("b2"),
		G.WithValue(tensor.New(tensor.WithShape(1, 1), tensor.WithBacking(b2v))))
	learnables := G.Nodes{w1, b1, w2, b2}
	if cfg.Head != nil {
		learnables = G.Nodes{w2, b2} // w1 and b1 keep the head's values
	}

	h := G.Must(G.Rectify(G.Must(G.BroadcastAdd(G.Must(G.Mul(x, w1)), b1, nil, []byte{0}))))
	z := G.Must(G.BroadcastAdd(G.Must(G.Mul(h, w2)), b2, nil, []byte{0}))
	// Binary cross-entropy on the logit z: softplus(z) − y·z, stable for
	// confident predictions where log(sigmoid) would underflow.
	bce := G.Must(G.Sub(G.Must(G.Softplus(z)), G.Must(G.HadamardProd(y, z))))
	loss := G.Must(G.Sum(G.Must(G.HadamardProd(wt, bce))))
	if _, err := G.Grad(loss, learnables...); err != nil {
		return nil, fmt.Errorf("train: grad: %w", err)
	}
	vm := G.NewTapeMachine(g, G.BindDualValues(learnables...))
	defer vm.Close()
	solver := G.NewAdamSolver(G.WithLearnRate(cfg.LearnRate), G.WithL2Reg(cfg.L2))

	xb := make([]float32, bs*in)
	yb := make([]float32, bs)
	wb := make([]float32, bs)
	xt := tensor.New(tensor.WithShape(bs, in), tensor.WithBacking(xb))
	yt := tensor.New(tensor.WithShape(bs, 1), tensor.WithBacking(yb))
	wtt := tensor.New(tensor.WithShape(bs, 1), tensor.WithBacking(wb))

	order := make([]int, len(examples))
	for i := range order {
		order[i] = i
	}
	steps := len(examples) / bs
	for epoch := 0; epoch < cfg.Epochs; epoch++ {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		total := 0.0
		for s := 0; s < steps; s++ {
			sum := 0.0
			for r := 0; r < bs; r++ {
				e := examples[order[s*bs+r]]
				for j := 0; j < in; j++ {
					xb[r*in+j] = (e.Features[j] - net.Mean[j]) / net.Std[j]
				}
				yb[r] = e.Label
				wb[r] = float32(weights[order[s*bs+r]])
				sum += weights[order[s*bs+r]]
			}
			for r := range wb {
				wb[r] = float32(float64(wb[r]) / sum) // each step's weights sum to 1
			}
			if err := G.Let(x, xt); err != nil {
				return nil, err
			}
			if err := G.Let(y, yt); err != nil {
				return nil, err
			}
			if err := G.Let(wt, wtt); err != nil {
				return nil, err
			}
			if err := vm.RunAll(); err != nil {
				return nil, fmt.Errorf("train: step: %w", err)
			}
			lv := float64(loss.Value().Data().(float32))
			if math.IsNaN(lv) || math.IsInf(lv, 0) {
				return nil, errors.New("train: loss diverged; lower the learning rate")
			}
			total += lv
			if err := solver.Step(G.NodesToValueGrads(learnables)); err != nil {
				return nil, fmt.Errorf("train: solver: %w", err)
			}
			vm.Reset()
		}
		net.Losses = append(net.Losses, total/float64(steps))
	}
	net.W1 = append([]float32(nil), w1.Value().Data().([]float32)...)
	net.B1 = append([]float32(nil), b1.Value().Data().([]float32)...)
	net.W2 = append([]float32(nil), w2.Value().Data().([]float32)...)
	net.B2 = b2.Value().Data().([]float32)[0]
	return net, nil
}

// standardize returns per-feature mean and standard deviation; features
// that never vary get std 1 so they pass through unchanged.
func standardize(examples []Example, dim int) (mean, std []float32) {
	m := make([]float64, dim)
	v := make([]float64, dim)
	for _, e := range examples {
		for j, x := range e.Features {
			m[j] += float64(x)
		}
	}
	n := float64(len(examples))
	for j := range m {
		m[j] /= n
	}
	for _, e := range examples {
		for j, x := range e.Features {
			d := float64(x) - m[j]
			v[j] += d * d
		}
	}
	mean, std = make([]float32, dim), make([]float32, dim)
	for j := range m {
		mean[j] = float32(m[j])
		s := math.Sqrt(v[j] / n)
		if s < 1e-6 {
			s = 1
		}
		std[j] = float32(s)
	}
	return mean, std
}

// exampleWeights gives each source its configured share of the loss, spread
// evenly over that source's examples.
func exampleWeights(cfg Config, examples []Example) ([]float64, error) {
	count := map[string]int{}
	for _, e := range examples {
		if len(e.Features) != len(examples[0].Features) {
			return nil, fmt.Errorf("train: example from %s has %d features, the first %d", e.Source, len(e.Features), len(examples[0].Features))
		}
		count[e.Source]++
	}
	w := make([]float64, len(examples))
	for i, e := range examples {
		share, ok := cfg.SourceWeights[e.Source]
		if !ok {
			return nil, fmt.Errorf("train: no weight for source %q", e.Source)
		}
		w[i] = share / float64(count[e.Source]) * float64(len(examples))
	}
	return w, nil
}

// Predict runs the net in float64 on one raw feature vector; training code
// and tests use it to check the exported ONNX file against the weights.
// A version-1 or -2 net (textfeat.V1Dim, V2Dim inputs) reads its prefix of
// a current vector, as predictor.Model does.
func (n *Net) Predict(features []float32) (float64, error) {
	if (n.In == textfeat.V1Dim || n.In == textfeat.V2Dim) && len(features) == textfeat.Dim {
		features = features[:n.In]
	}
	if len(features) != n.In {
		return 0, fmt.Errorf("net: %d features, want %d", len(features), n.In)
	}
	z := float64(n.B2)
	for k := 0; k < n.Hidden; k++ {
		a := float64(n.B1[k])
		for j := 0; j < n.In; j++ {
			a += float64((features[j]-n.Mean[j])/n.Std[j]) * float64(n.W1[j*n.Hidden+k])
		}
		if a > 0 {
			z += a * float64(n.W2[k])
		}
	}
	return 1 / (1 + math.Exp(-z)), nil
}
