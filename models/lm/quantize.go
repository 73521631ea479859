package lm

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/phaseless/phaseless/models/lm/gguf"
	"github.com/phaseless/phaseless/models/lm/kernels"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// A Recipe says which type each tensor of a model is stored as: a uniform
// type (q8_0, q4_k, f16, …) or one of llama.cpp's mixes (q4_k_m, q5_k_m),
// which keep the tensors that hurt most when coarse (the output head and,
// in some layers, attn_v and ffn_down) at Q6_K.
type Recipe struct {
	Name  string
	base  gguf.DType
	mixed bool // the _M rule: Q6_K for output, and attn_v/ffn_down in "more bits" layers
	ftype uint32
}

// llama.cpp's LLAMA_FTYPE numbers for general.file_type.
var recipeFTypes = map[gguf.DType]uint32{
	gguf.F32: 0, gguf.F16: 1, gguf.Q4_0: 2, gguf.Q4_1: 3, gguf.Q8_0: 7, gguf.Q5_0: 8, gguf.Q5_1: 9,
	gguf.Q2_K: 10, gguf.Q3_K: 11, gguf.Q4_K: 14, gguf.Q5_K: 16, gguf.Q6_K: 18, gguf.BF16: 32,
}

// ParseRecipe accepts any decoded type name (uniform) or q4_k_m / q5_k_m.
func ParseRecipe(s string) (Recipe, error) {
	switch strings.ToLower(s) {
	case "q4_k_m":
		return Recipe{Name: "q4_k_m", base: gguf.Q4_K, mixed: true, ftype: 15}, nil
	case "q5_k_m":
		return Recipe{Name: "q5_k_m", base: gguf.Q5_K, mixed: true, ftype: 17}, nil
	}
	d, err := gguf.ParseDType(s)
	if err != nil {
		return Recipe{}, fmt.Errorf("%w, or q4_k_m, q5_k_m", err)
	}
	return Recipe{Name: strings.ToLower(s), base: d, ftype: recipeFTypes[d]}, nil
}

// UniformRecipe stores every matrix as d.
func UniformRecipe(d DType) Recipe {
	return Recipe{Name: d.String(), base: d, ftype: recipeFTypes[d]}
}

// moreBits is llama.cpp's use_more_bits: the first and last eighth of the
// layers, and every third layer between.
func moreBits(layer, layers int) bool {
	return layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
}

// TypeFor is the type of the named tensor with the given row length in a
// model of the given depth. Vectors stay F32. A block type whose block does
// not divide the row falls back as llama-quantize does (Q4_K → Q5_0,
// Q5_K → Q5_1, Q6_K → Q8_0, Q2_K/Q3_K → Q4_0), and to F16 when no block fits.
func (r Recipe) TypeFor(name string, cols, layers int, vector bool) DType {
	if vector {
		return gguf.F32
	}
	t := r.base
	if r.mixed {
		var layer int
		var part string
		if name == "output.weight" {
			t = gguf.Q6_K
		} else if _, err := fmt.Sscanf(name, "blk.%d.%s", &layer, &part); err == nil &&
			(part == "attn_v.weight" || part == "ffn_down.weight") && moreBits(layer, layers) {
			t = gguf.Q6_K
		}
	}
	if cols%t.BlockSize() != 0 {
		t = map[gguf.DType]gguf.DType{gguf.Q4_K: gguf.Q5_0, gguf.Q5_K: gguf.Q5_1, gguf.Q6_K: gguf.Q8_0,
			gguf.Q2_K: gguf.Q4_0, gguf.Q3_K: gguf.Q4_0}[t]
		if t == 0 || cols%t.BlockSize() != 0 {
			t = gguf.F16
		}
	}
	return t
}

// Quantize rewrites the GGUF model src with its tensors stored as r says,
// keeping all metadata (general.file_type set to r's) and tensor order. It
// works on any architecture: matrices are recognised by having two or more
// dimensions, and the depth is read from <arch>.block_count.
func Quantize(w io.Writer, src *gguf.File, r Recipe) error {
	arch, _ := src.Get(keyArch)
	layers := 0
	if v, ok := src.Get(fmt.Sprint(arch, ".block_count")); ok {
		n, _ := gguf.IntValue(v)
		layers = int(n)
	}
	var kvs []gguf.KV
	for _, kv := range src.KVs {
		if kv.Key != "general.file_type" && kv.Key != "general.alignment" {
			kvs = append(kvs, kv)
		}
	}
	kvs = append(kvs, gguf.KV{Key: "general.file_type", Value: r.ftype})
	var tensors []gguf.Tensor
	for i := range src.Tensors {
		ti := &src.Tensors[i]
		data, err := src.Float32s(ti)
		if err != nil {
			return fmt.Errorf("quantize: %w", err)
		}
		t := r.TypeFor(ti.Name, int(ti.Dims[0]), layers, len(ti.Dims) < 2)
		tensors = append(tensors, gguf.Tensor{Name: ti.Name, Dims: ti.Dims, Type: t, Data: data})
	}
	if err := gguf.Write(w, kvs, tensors); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	return nil
}

// TensorTypes counts a model's matrices by storage type, e.g. for a bench
// report: "q4_K×45 q6_K×11".
func (m *Model) TensorTypes() string {
	count := map[string]int{}
	mats := []*kernels.Matrix{m.embd}
	if !m.tied {
		mats = append(mats, m.output)
	}
	for _, l := range m.layers {
		mats = append(mats, l.q, l.k, l.v, l.o, l.gate, l.up, l.down)
	}
	for _, x := range mats {
		count[x.DType().String()]++
	}
	var parts []string
	for k, n := range count {
		parts = append(parts, fmt.Sprintf("%s×%d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// WriteRandom writes a model of shape cfg with RandomWeights(seed), the
// padded byte vocabulary and tensors typed by r: what `phaselessctl lm init`
// writes, and what tests and benchmarks use as a model of a given size.
func WriteRandom(w io.Writer, cfg Config, seed uint64, meta map[string]any, r Recipe) error {
	weights, err := RandomWeights(cfg, seed)
	if err != nil {
		return err
	}
	tok, err := tokenizer.PaddedByteSpec(cfg.Vocab)
	if err != nil {
		return err
	}
	return WriteGGUFRecipe(w, cfg, tok, weights, meta, r)
}
