package lm

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/phaseless/phaseless/models/lm/gguf"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// DType is how tensors are stored in a GGUF file (any type gguf decodes).
type DType = gguf.DType

// The storage types the engine loads and writes.
const (
	F32  = gguf.F32
	F16  = gguf.F16
	BF16 = gguf.BF16
	Q4_0 = gguf.Q4_0
	Q4_1 = gguf.Q4_1
	Q5_0 = gguf.Q5_0
	Q5_1 = gguf.Q5_1
	Q8_0 = gguf.Q8_0
	Q2_K = gguf.Q2_K
	Q3_K = gguf.Q3_K
	Q4_K = gguf.Q4_K
	Q5_K = gguf.Q5_K
	Q6_K = gguf.Q6_K
)

// ParseDType accepts the name of any type gguf decodes (f32, f16, bf16,
// q4_0 … q8_0, q2_k … q6_k).
func ParseDType(s string) (DType, error) { return gguf.ParseDType(s) }

// Weights are a model's parameters as float32, laid out as the package
// documentation describes (matrices row-major [out][in]).
type Weights struct {
	TokenEmbd  []float32 // [Vocab][Dim]
	Layers     []LayerWeights
	OutputNorm []float32 // [Dim]
	Output     []float32 // [Vocab][Dim]; nil ties the head to TokenEmbd
	// RopeFreqs divides each RoPE frequency (rope_freqs.weight, [HeadDim/2]):
	// Llama 3's RoPE scaling (Llama3RopeFreqs); nil = none.
	RopeFreqs []float32
}

// LayerWeights are one transformer block's parameters.
type LayerWeights struct {
	AttnNorm []float32 // [Dim]
	Q        []float32 // [Heads·HeadDim][Dim]
	K        []float32 // [KVHeads·HeadDim][Dim]
	V        []float32 // [KVHeads·HeadDim][Dim]
	O        []float32 // [Dim][Heads·HeadDim]
	FFNNorm  []float32 // [Dim]
	Gate     []float32 // [FFN][Dim]
	Up       []float32 // [FFN][Dim]
	Down     []float32 // [Dim][FFN]

	// qwen2 only: projection biases.
	QBias, KBias, VBias []float32 // [Heads·HeadDim], [KVHeads·HeadDim] ×2
	// qwen3 only: per-head RMSNorm weights of q and k.
	QNorm, KNorm []float32 // [HeadDim]
}

// tensorSpec is one named tensor of a model: its GGUF name, rows × cols, and
// where it lives in Weights.
type tensorSpec struct {
	name       string
	rows, cols int
	ptr        *[]float32
	optional   bool
}

// specs lists every tensor of cfg in file order, pointing into w.
func (w *Weights) specs(cfg Config) []tensorSpec {
	d, hd := cfg.Dim, cfg.HeadDim()
	q, kv := cfg.Heads*hd, cfg.KVHeads*hd
	if len(w.Layers) != cfg.Layers {
		w.Layers = make([]LayerWeights, cfg.Layers)
	}
	s := []tensorSpec{{"token_embd.weight", cfg.Vocab, d, &w.TokenEmbd, false}}
	for i := range w.Layers {
		l := &w.Layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		s = append(s,
			tensorSpec{p + "attn_norm.weight", 1, d, &l.AttnNorm, false},
			tensorSpec{p + "attn_q.weight", q, d, &l.Q, false},
			tensorSpec{p + "attn_k.weight", kv, d, &l.K, false},
			tensorSpec{p + "attn_v.weight", kv, d, &l.V, false},
			tensorSpec{p + "attn_output.weight", d, q, &l.O, false},
			tensorSpec{p + "ffn_norm.weight", 1, d, &l.FFNNorm, false},
			tensorSpec{p + "ffn_gate.weight", cfg.FFN, d, &l.Gate, false},
			tensorSpec{p + "ffn_up.weight", cfg.FFN, d, &l.Up, false},
			tensorSpec{p + "ffn_down.weight", d, cfg.FFN, &l.Down, false},
		)
		s = append(s, cfg.layerExtras(p, l, q, kv)...)
	}
	return append(s,
		tensorSpec{"output_norm.weight", 1, d, &w.OutputNorm, false},
		tensorSpec{"output.weight", cfg.Vocab, d, &w.Output, true},
		tensorSpec{"rope_freqs.weight", 1, hd / 2, &w.RopeFreqs, true})
}

// Check reports the first tensor whose length does not match cfg.
func (w *Weights) Check(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if len(w.Layers) != cfg.Layers {
		return fmt.Errorf("weights have %d layers, config says %d", len(w.Layers), cfg.Layers)
	}
	for _, s := range w.specs(cfg) {
		if s.optional && *s.ptr == nil {
			continue
		}
		if len(*s.ptr) != s.rows*s.cols {
			return fmt.Errorf("tensor %s has %d values, want %d×%d", s.name, len(*s.ptr), s.rows, s.cols)
		}
	}
	return nil
}

// RandomWeights draws a model's parameters from a seeded normal distribution
// scaled by 1/sqrt(fan-in) (norm weights are 1), so random models produce
// well-conditioned activations for tests and benchmarks.
func RandomWeights(cfg Config, seed uint64) (*Weights, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	w := &Weights{}
	for _, s := range w.specs(cfg) {
		if s.name == "rope_freqs.weight" {
			continue // not a learned weight: Llama3RopeFreqs
		}
		v := make([]float32, s.rows*s.cols)
		if strings.HasSuffix(s.name, ".bias") {
			for i := range v {
				v[i] = 0.1 * float32(rng.NormFloat64())
			}
		} else if s.rows == 1 {
			for i := range v {
				v[i] = 1 + 0.1*float32(rng.NormFloat64())
			}
		} else {
			sc := 1 / math.Sqrt(float64(s.cols))
			for i := range v {
				v[i] = float32(rng.NormFloat64() * sc)
			}
		}
		*s.ptr = v
	}
	return w, nil
}

// Metadata keys in GGUF.
const (
	keyArch = "general.architecture"
)

// WriteGGUF writes a GGUF v3 file of cfg's architecture: cfg as {arch}.* metadata,
// tok as tokenizer.ggml.*, any extra meta (keys such as "general.name"; values
// of GGUF scalar or slice types), and every weight encoded as dtype (norm
// vectors always stay F32, as llama.cpp does). A block type that does not
// divide a matrix's rows falls back as Recipe.TypeFor says.
func WriteGGUF(w io.Writer, cfg Config, tok tokenizer.Spec, weights *Weights, meta map[string]any, dtype DType) error {
	return WriteGGUFRecipe(w, cfg, tok, weights, meta, UniformRecipe(dtype))
}

// WriteGGUFRecipe is WriteGGUF with each tensor's type chosen by a recipe
// (for example ParseRecipe("q4_k_m")).
func WriteGGUFRecipe(w io.Writer, cfg Config, tok tokenizer.Spec, weights *Weights, meta map[string]any, r Recipe) error {
	cfg = cfg.WithDefaults()
	if err := weights.Check(cfg); err != nil {
		return fmt.Errorf("write gguf: %w", err)
	}
	if err := tok.Validate(cfg.Vocab); err != nil {
		return fmt.Errorf("write gguf: %w", err)
	}
	a := cfg.arch()
	kvs := []gguf.KV{
		{Key: keyArch, Value: a},
		{Key: a + ".context_length", Value: uint32(cfg.ContextLen)},
		{Key: a + ".embedding_length", Value: uint32(cfg.Dim)},
		{Key: a + ".block_count", Value: uint32(cfg.Layers)},
		{Key: a + ".feed_forward_length", Value: uint32(cfg.FFN)},
		{Key: a + ".attention.head_count", Value: uint32(cfg.Heads)},
		{Key: a + ".attention.head_count_kv", Value: uint32(cfg.KVHeads)},
	}
	if cfg.HeadSize > 0 || a == ArchQwen3 {
		kvs = append(kvs,
			gguf.KV{Key: a + ".attention.key_length", Value: uint32(cfg.HeadDim())},
			gguf.KV{Key: a + ".attention.value_length", Value: uint32(cfg.HeadDim())})
	}
	kvs = append(kvs,
		gguf.KV{Key: a + ".rope.dimension_count", Value: uint32(cfg.HeadDim())},
		gguf.KV{Key: a + ".rope.freq_base", Value: float32(cfg.RopeTheta)},
		gguf.KV{Key: a + ".attention.layer_norm_rms_epsilon", Value: float32(cfg.NormEps)},
		gguf.KV{Key: a + ".vocab_size", Value: uint32(cfg.Vocab)},
		gguf.KV{Key: "general.file_type", Value: r.ftype},
	)
	kvs = append(kvs, tok.GGUFMetadata()...)
	for _, k := range sortedKeys(meta) {
		if hasKey(kvs, k) {
			return fmt.Errorf("write gguf: metadata %q is set by the engine", k)
		}
		kvs = append(kvs, gguf.KV{Key: k, Value: meta[k]})
	}
	var tensors []gguf.Tensor
	for _, s := range weights.specs(cfg) {
		if s.optional && *s.ptr == nil {
			continue
		}
		t := r.TypeFor(s.name, s.cols, cfg.Layers, s.rows == 1)
		dims := []uint64{uint64(s.cols), uint64(s.rows)}
		if s.rows == 1 {
			dims = dims[:1]
		}
		tensors = append(tensors, gguf.Tensor{Name: s.name, Dims: dims, Type: t, Data: *s.ptr})
	}
	if err := gguf.Write(w, kvs, tensors); err != nil {
		return fmt.Errorf("write gguf: %w", err)
	}
	return nil
}

func hasKey(kvs []gguf.KV, k string) bool {
	for _, kv := range kvs {
		if kv.Key == k {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
