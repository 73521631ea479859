package lmtrain

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Tensor is one named weight, row-major with Rows×Cols elements (Rows = 1 for
// vectors). Matrices are stored [out, in], the GGUF/ggml layout of llama
// weights (ne0 = in), so export copies them unchanged.
type Tensor struct {
	Name       string
	Rows, Cols int
	Data       []float32
}

// Layer holds one transformer block's weights.
type Layer struct {
	AttnNorm, Q, K, V, O    *Tensor
	FFNNorm, Gate, Up, Down *Tensor
}

// Params are all weights of a model, views into one flat slice so the
// optimizer and the checkpoint treat them as one vector.
type Params struct {
	Config  Config
	Flat    []float32
	Tensors []*Tensor // in GGUF order
	Embed   *Tensor   // token_embd.weight [vocab, dim]
	Layers  []Layer
	Norm    *Tensor // output_norm.weight [dim]
	Output  *Tensor // output.weight [vocab, dim]
}

// NewParams lays out zeroed weights for c (which must be valid).
func NewParams(c Config) *Params {
	p := &Params{Config: c}
	hd := c.HeadDim()
	type spec struct {
		dst        **Tensor
		name       string
		rows, cols int
	}
	var specs []spec
	add := func(dst **Tensor, name string, rows, cols int) {
		specs = append(specs, spec{dst, name, rows, cols})
	}
	add(&p.Embed, "token_embd.weight", c.Vocab, c.Dim)
	p.Layers = make([]Layer, c.Layers)
	for i := range p.Layers {
		l := &p.Layers[i]
		pre := fmt.Sprintf("blk.%d.", i)
		add(&l.AttnNorm, pre+"attn_norm.weight", 1, c.Dim)
		add(&l.Q, pre+"attn_q.weight", c.Heads*hd, c.Dim)
		add(&l.K, pre+"attn_k.weight", c.KVHeads*hd, c.Dim)
		add(&l.V, pre+"attn_v.weight", c.KVHeads*hd, c.Dim)
		add(&l.O, pre+"attn_output.weight", c.Dim, c.Heads*hd)
		add(&l.FFNNorm, pre+"ffn_norm.weight", 1, c.Dim)
		add(&l.Gate, pre+"ffn_gate.weight", c.FFN, c.Dim)
		add(&l.Up, pre+"ffn_up.weight", c.FFN, c.Dim)
		add(&l.Down, pre+"ffn_down.weight", c.Dim, c.FFN)
	}
	add(&p.Norm, "output_norm.weight", 1, c.Dim)
	add(&p.Output, "output.weight", c.Vocab, c.Dim)
	n := 0
	for _, s := range specs {
		n += s.rows * s.cols
	}
	p.Flat = make([]float32, n)
	off := 0
	for _, s := range specs {
		t := &Tensor{Name: s.name, Rows: s.rows, Cols: s.cols, Data: p.Flat[off : off+s.rows*s.cols : off+s.rows*s.cols]}
		off += s.rows * s.cols
		*s.dst = t
		p.Tensors = append(p.Tensors, t)
	}
	return p
}

// Count is the number of weights.
func (p *Params) Count() int { return len(p.Flat) }

// IsNorm reports whether t is an RMSNorm gain (initialised to one, never decayed).
func (t *Tensor) IsNorm() bool { return t.Rows == 1 }

// Init draws the weights from seed: N(0, std) for matrices, with the
// residual-output projections (attn_output, ffn_down) scaled by
// 1/sqrt(2·layers) so the residual stream's variance does not grow with depth
// (GPT-2's scheme), and ones for the norm gains.
func (p *Params) Init(seed uint64, std float32) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	resid := std / float32(math.Sqrt(float64(2*p.Config.Layers)))
	for _, t := range p.Tensors {
		if t.IsNorm() {
			for i := range t.Data {
				t.Data[i] = 1
			}
			continue
		}
		s := std
		for _, l := range p.Layers {
			if t == l.O || t == l.Down {
				s = resid
			}
		}
		for i := range t.Data {
			t.Data[i] = float32(rng.NormFloat64()) * s
		}
	}
}
