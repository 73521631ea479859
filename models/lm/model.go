package lm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/constraint"
	"github.com/phaseless/phaseless/models/lm/gguf"
	"github.com/phaseless/phaseless/models/lm/kernels"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
	"github.com/phaseless/phaseless/models/toolprior"
)

// Model is a loaded model of one of the Architectures: immutable after loading, so any
// number of goroutines may run it.
type Model struct {
	Config Config
	// DType is how the weight matrices are stored (norms are always F32).
	DType DType
	// Meta is the file's metadata, for provenance (general.name, training
	// run ids, …).
	Meta map[string]any
	// Mapped is whether the weights are a memory-mapped file's pages.
	Mapped bool

	tok     tokenizer.Tokenizer
	tokSpec tokenizer.Spec
	chat    chatRenderer // nil: chatfmt.Prompt
	embd    *kernels.Matrix
	layers  []layer
	outNorm []float32
	output  *kernels.Matrix // may be embd (tied)
	tied    bool
	// ropeFreqs divides RoPE's frequencies (Llama 3 scaling); nil = none.
	ropeFreqs []float32
	// sampling is the sampling the file declares (sampling.go).
	sampling llm.Sampling
	// toolPrior is the tool prior the file carries (toolprior.go), or nil.
	toolPrior *toolprior.Prior
	// vocab indexes the token pieces for grammar masks, built on first use.
	vocab vocabIndex

	fpOnce sync.Once // guards fp, computed on first use (Fingerprint)
	fp     uint64
}

type layer struct {
	attnNorm, ffnNorm   []float32
	q, k, v, o          *kernels.Matrix
	gate, up, down      *kernels.Matrix
	qBias, kBias, vBias []float32 // qwen2
	qNorm, kNorm        []float32 // qwen3
}

// vocabIndex is a model's constraint.Index, built on first use: only
// constrained requests need it.
type vocabIndex struct {
	once sync.Once
	ix   *constraint.Index
}

func (m *Model) vocabIndex() *constraint.Index {
	m.vocab.once.Do(func() { m.vocab.ix = constraint.NewIndex(m.tok, m.Config.Vocab) })
	return m.vocab.ix
}

// Tokenizer returns the model's tokenizer.
func (m *Model) Tokenizer() tokenizer.Tokenizer { return m.tok }

// TokenizerSpec returns the vocabulary the model was loaded with.
func (m *Model) TokenizerSpec() tokenizer.Spec { return m.tokSpec }

// New builds an F32 model directly from weights (no file), sharing the
// slices; trainers use it to evaluate without a round trip through GGUF.
func New(cfg Config, tok tokenizer.Spec, w *Weights) (*Model, error) {
	cfg = cfg.WithDefaults()
	if err := w.Check(cfg); err != nil {
		return nil, err
	}
	t, err := tok.BuildFor(cfg.Vocab)
	if err != nil {
		return nil, err
	}
	chat, err := parseChatTemplate(tok)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, DType: F32, Meta: map[string]any{}, tok: t, tokSpec: tok, chat: chat, layers: make([]layer, cfg.Layers)}
	for _, s := range w.specs(cfg) {
		if *s.ptr == nil {
			continue // optional output head: tied below
		}
		m.assign(s.name, kernels.NewF32Matrix(s.rows, s.cols, *s.ptr), cfg)
	}
	if m.output == nil {
		m.output, m.tied = m.embd, true
	}
	return m, nil
}

// WeightBytes is what one decode step of a single sequence reads from
// memory: every layer matrix and the output head as stored. The embedding
// table counts only when it is the (tied) head: otherwise a step reads one
// row of it.
func (m *Model) WeightBytes() int64 {
	size := func(x *kernels.Matrix) int64 { return int64(len(x.Raw())) + 4*int64(len(x.F32())) }
	n := size(m.output)
	for _, l := range m.layers {
		for _, x := range []*kernels.Matrix{l.q, l.k, l.v, l.o, l.gate, l.up, l.down} {
			n += size(x)
		}
	}
	return n
}

// Load opens a GGUF model file. On unix systems the file is memory-mapped
// and the weights are used where they lie (a loaded model costs about the
// file's size in page cache once touched, no heap copy); elsewhere it is read
// into memory. The mapping is released when the Model becomes unreachable.
func Load(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	if data, unmap, ok := mapFile(f, st.Size()); ok {
		m, err := readFile(gguf.ReadBytes(data))
		if err != nil {
			unmap()
			return nil, fmt.Errorf("load model %s: %w", path, err)
		}
		m.Mapped = true
		runtime.AddCleanup(m, func(unmap func()) { unmap() }, unmap)
		return m, nil
	}
	m, err := Read(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	return m, nil
}

// Read loads a model from a GGUF image of the given size (a file, or bytes
// embedded in the binary with go:embed via bytes.NewReader).
func Read(r io.ReaderAt, size int64) (*Model, error) {
	return readFile(gguf.Read(r, size))
}

// ReadBytes loads a model from a GGUF image in memory without copying its
// weights (for example one embedded with go:embed): b must outlive the
// Model and never change.
func ReadBytes(b []byte) (*Model, error) {
	return readFile(gguf.ReadBytes(b))
}

func readFile(f *gguf.File, err error) (*Model, error) {
	if err != nil {
		return nil, err
	}
	arch, _ := f.Get(keyArch)
	switch arch {
	case ArchLlama, ArchQwen2, ArchQwen3:
	default:
		return nil, unsupportedArch(arch)
	}
	cfg, err := configFrom(f, arch.(string))
	if err != nil {
		return nil, err
	}
	spec, err := tokenizer.SpecFromGGUF(f)
	if err != nil {
		return nil, err
	}
	if cfg.Vocab == 0 {
		cfg.Vocab = len(spec.Tokens)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tok, err := spec.BuildFor(cfg.Vocab)
	if err != nil {
		return nil, err
	}
	chat, err := parseChatTemplate(spec)
	if err != nil {
		return nil, err
	}
	prior, err := toolprior.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, Meta: map[string]any{}, tok: tok, tokSpec: spec, chat: chat, toolPrior: prior}
	for _, kv := range f.KVs {
		m.Meta[kv.Key] = kv.Value
	}
	if m.sampling, err = readSampling(m.Meta); err != nil {
		return nil, err
	}
	w := &Weights{}
	m.layers = make([]layer, cfg.Layers)
	haveType := false
	for _, s := range w.specs(cfg) {
		ti, ok := f.Tensor(s.name)
		if !ok {
			if s.optional {
				continue
			}
			return nil, fmt.Errorf("tensor %s missing", s.name)
		}
		mat, err := loadMatrix(f, ti, s)
		if err != nil {
			return nil, err
		}
		if s.rows > 1 && !haveType {
			m.DType, haveType = mat.DType(), true
		}
		m.assign(s.name, mat, cfg)
	}
	if m.output == nil {
		m.output, m.tied = m.embd, true
	}
	return m, nil
}

// assign stores a loaded tensor where the forward pass finds it.
func (m *Model) assign(name string, mat *kernels.Matrix, cfg Config) {
	vec := func() []float32 { return mat.Float32s() }
	switch name {
	case "token_embd.weight":
		m.embd = mat
		return
	case "output_norm.weight":
		m.outNorm = vec()
		return
	case "output.weight":
		m.output = mat
		return
	case "rope_freqs.weight":
		m.ropeFreqs = vec()
		return
	}
	var i int
	var part string
	if _, err := fmt.Sscanf(name, "blk.%d.%s", &i, &part); err != nil || i < 0 || i >= cfg.Layers {
		return
	}
	l := &m.layers[i]
	switch part {
	case "attn_norm.weight":
		l.attnNorm = vec()
	case "ffn_norm.weight":
		l.ffnNorm = vec()
	case "attn_q.weight":
		l.q = mat
	case "attn_k.weight":
		l.k = mat
	case "attn_v.weight":
		l.v = mat
	case "attn_output.weight":
		l.o = mat
	case "ffn_gate.weight":
		l.gate = mat
	case "ffn_up.weight":
		l.up = mat
	case "ffn_down.weight":
		l.down = mat
	case "attn_q.bias":
		l.qBias = vec()
	case "attn_k.bias":
		l.kBias = vec()
	case "attn_v.bias":
		l.vBias = vec()
	case "attn_q_norm.weight":
		l.qNorm = vec()
	case "attn_k_norm.weight":
		l.kNorm = vec()
	}
}

func loadMatrix(f *gguf.File, ti *gguf.TensorInfo, s tensorSpec) (*kernels.Matrix, error) {
	rows := uint64(1)
	for _, d := range ti.Dims[1:] {
		rows *= d
	}
	if ti.Dims[0] != uint64(s.cols) || rows != uint64(s.rows) || (s.rows > 1 && len(ti.Dims) != 2) {
		return nil, fmt.Errorf("tensor %s has dims %v, want [%d %d]", s.name, ti.Dims, s.cols, s.rows)
	}
	raw, err := f.TensorData(ti)
	if err != nil {
		return nil, err
	}
	if !ti.Type.Decoded() {
		return nil, fmt.Errorf("tensor %s: %w", s.name, gguf.UnsupportedError(ti.Type))
	}
	if ti.Type == gguf.F32 {
		f32 := float32View(raw)
		if f32 == nil {
			f32 = make([]float32, s.rows*s.cols)
			gguf.Dequantize(f32, raw, gguf.F32)
		}
		return kernels.NewF32Matrix(s.rows, s.cols, f32), nil
	}
	m, err := kernels.NewRawMatrix(s.rows, s.cols, ti.Type, raw)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", s.name, err)
	}
	return m, nil
}

// configFrom reads the {arch}.* hyper-parameters.
func configFrom(f *gguf.File, arch string) (Config, error) {
	var errs []error
	geti := func(key string, required bool) int {
		v, ok := f.Get(key)
		if !ok {
			if required {
				errs = append(errs, fmt.Errorf("metadata %s missing", key))
			}
			return 0
		}
		n, err := gguf.IntValue(v)
		if err != nil || n < 0 || n > 1<<31-1 {
			errs = append(errs, fmt.Errorf("metadata %s: %v is not a valid size", key, v))
			return 0
		}
		return int(n)
	}
	getf := func(key string) float64 {
		switch x, _ := f.Get(key); v := x.(type) {
		case float32:
			return float64(v)
		case float64:
			return v
		case nil:
			return 0
		default:
			errs = append(errs, fmt.Errorf("metadata %s is %T, want a float", key, x))
			return 0
		}
	}
	a := arch + "."
	c := Config{
		Arch:       arch,
		Vocab:      geti(a+"vocab_size", false),
		Dim:        geti(a+"embedding_length", true),
		Layers:     geti(a+"block_count", true),
		Heads:      geti(a+"attention.head_count", true),
		FFN:        geti(a+"feed_forward_length", true),
		ContextLen: geti(a+"context_length", true),
		RopeTheta:  getf(a + "rope.freq_base"),
		NormEps:    getf(a + "attention.layer_norm_rms_epsilon"),
	}
	if arch == ArchLlama {
		c.Arch = "" // the zero value, as every llama Config in this module spells it
	}
	c.KVHeads = c.Heads
	if _, ok := f.Get(a + "attention.head_count_kv"); ok {
		c.KVHeads = geti(a+"attention.head_count_kv", true)
	}
	if k := geti(a+"attention.key_length", false); k != 0 && c.Heads > 0 && (c.Dim%c.Heads != 0 || k != c.Dim/c.Heads) {
		c.HeadSize = k
	}
	if v := geti(a+"attention.value_length", false); v != 0 && v != c.HeadDim() {
		errs = append(errs, fmt.Errorf("value head size %d differs from key head size %d: not supported", v, c.HeadDim()))
	}
	if rd := geti(a+"rope.dimension_count", false); rd != 0 && c.Heads > 0 && rd != c.HeadDim() {
		errs = append(errs, fmt.Errorf("partial RoPE (dimension_count %d, head dim %d) is not supported", rd, c.HeadDim()))
	}
	if st, ok := f.Get(a + "rope.scaling.type"); ok && st != "none" {
		// linear / yarn / longrope change positions in ways this engine does
		// not implement; Llama 3's scaling is the rope_freqs tensor instead.
		errs = append(errs, fmt.Errorf("RoPE scaling %v is not supported (Llama 3 scaling, as rope_freqs.weight, is)", st))
	}
	// llama.cpp scales positions by 1/factor whatever the type says.
	if fv := getf(a + "rope.scaling.factor"); fv != 0 && fv != 1 {
		errs = append(errs, fmt.Errorf("RoPE scaling factor %v (linear position scaling) is not supported", fv))
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c.WithDefaults(), nil
}

// Weights returns a float32 copy of the model's parameters (quantised tensors
// dequantised), e.g. to continue training or to check an implementation.
func (m *Model) Weights() *Weights {
	// The loop below reads the tensors through m.layers' copy, not through
	// m: without this, a caller that drops m after the call lets the GC
	// run m's cleanup (the munmap of a mapped file) mid-loop, and the next
	// decode faults (lm train --init crashed so).
	defer runtime.KeepAlive(m)
	w := &Weights{TokenEmbd: m.embd.Float32s(), OutputNorm: clone(m.outNorm), RopeFreqs: cloneOrNil(m.ropeFreqs)}
	if !m.tied {
		w.Output = m.output.Float32s()
	}
	for _, l := range m.layers {
		w.Layers = append(w.Layers, LayerWeights{
			AttnNorm: clone(l.attnNorm), Q: l.q.Float32s(), K: l.k.Float32s(), V: l.v.Float32s(), O: l.o.Float32s(),
			FFNNorm: clone(l.ffnNorm), Gate: l.gate.Float32s(), Up: l.up.Float32s(), Down: l.down.Float32s(),
			QBias: cloneOrNil(l.qBias), KBias: cloneOrNil(l.kBias), VBias: cloneOrNil(l.vBias),
			QNorm: cloneOrNil(l.qNorm), KNorm: cloneOrNil(l.kNorm),
		})
	}
	return w
}

func clone(v []float32) []float32 { return append([]float32(nil), v...) }

func cloneOrNil(v []float32) []float32 {
	if v == nil {
		return nil
	}
	return clone(v)
}

// ValidateTokens reports the first token id outside the vocabulary, or a
// sequence too long for the model's context.
func (m *Model) ValidateTokens(tokens []int32) error {
	if len(tokens) == 0 {
		return errors.New("no tokens")
	}
	if len(tokens) > m.Config.ContextLen {
		return fmt.Errorf("%d tokens exceed the context length %d", len(tokens), m.Config.ContextLen)
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= m.Config.Vocab {
			return fmt.Errorf("token %d at position %d is outside the vocabulary of %d", t, i, m.Config.Vocab)
		}
	}
	return nil
}
