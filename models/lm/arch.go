package lm

import (
	"fmt"
	"math"
	"strings"
)

// Architectures the engine runs, named as GGUF's general.architecture names
// them. They share the llama block (RMSNorm, RoPE, grouped-query attention,
// SwiGLU) and differ in a few tensors and the RoPE pairing:
//
//   - llama: adjacent-pair RoPE ("normal" mode). Llama 3's long-context
//     scaling is the optional rope_freqs.weight tensor: θ_i is divided by its
//     i-th entry (Llama3RopeFreqs computes them).
//   - qwen2: biases on the Q, K and V projections (blk.N.attn_{q,k,v}.bias);
//     RoPE rotates (x[i], x[i+hd/2]) ("neox" mode).
//   - qwen3: no biases; each head of q and of k is RMS-normalised with its
//     own weights (blk.N.attn_{q,k}_norm.weight, [hd]) before RoPE; neox
//     RoPE; the head size may differ from Dim/Heads ({arch}.attention.key_length).
//
// Any of them may tie the output head to the embedding (no output.weight).
const (
	ArchLlama = "llama"
	ArchQwen2 = "qwen2"
	ArchQwen3 = "qwen3"
)

// Architectures lists what Read accepts.
var Architectures = []string{ArchLlama, ArchQwen2, ArchQwen3}

func unsupportedArch(a any) error {
	return fmt.Errorf("model architecture %v is not supported (supported: %s)", a, strings.Join(Architectures, ", "))
}

// arch returns the architecture, "" meaning llama.
func (c Config) arch() string {
	if c.Arch == "" {
		return ArchLlama
	}
	return c.Arch
}

// neoxRope reports whether RoPE rotates (x[i], x[i+hd/2]) rather than
// adjacent pairs, as llama.cpp's LLAMA_ROPE_TYPE_NEOX architectures do.
func (c Config) neoxRope() bool { return c.Arch == ArchQwen2 || c.Arch == ArchQwen3 }

// layerExtras lists the tensors an architecture adds to a layer, pointing
// into l; q and kv are the projection widths.
func (c Config) layerExtras(p string, l *LayerWeights, q, kv int) []tensorSpec {
	switch c.Arch {
	case ArchQwen2:
		return []tensorSpec{
			{p + "attn_q.bias", 1, q, &l.QBias, false},
			{p + "attn_k.bias", 1, kv, &l.KBias, false},
			{p + "attn_v.bias", 1, kv, &l.VBias, false},
		}
	case ArchQwen3:
		return []tensorSpec{
			{p + "attn_q_norm.weight", 1, c.HeadDim(), &l.QNorm, false},
			{p + "attn_k_norm.weight", 1, c.HeadDim(), &l.KNorm, false},
		}
	}
	return nil
}

// Llama3RopeFreqs is the rope_freqs.weight tensor of Llama 3's RoPE scaling
// ("rope_type": "llama3" in a Hugging Face config) for cfg's head size and
// base, as llama.cpp's converter computes it: per rotation frequency, 1 for
// wavelengths shorter than origCtx/highFreqFactor, factor for those longer
// than origCtx/lowFreqFactor, and a smooth blend between.
func Llama3RopeFreqs(cfg Config, factor, lowFreqFactor, highFreqFactor float64, origCtx int) ([]float32, error) {
	cfg = cfg.WithDefaults()
	if factor <= 0 || lowFreqFactor <= 0 || highFreqFactor <= lowFreqFactor || origCtx <= 0 {
		return nil, fmt.Errorf("llama3 rope scaling: need factor > 0, 0 < low_freq_factor < high_freq_factor, original context > 0 (got %v, %v, %v, %d)",
			factor, lowFreqFactor, highFreqFactor, origCtx)
	}
	hd := cfg.HeadDim()
	lowWave := float64(origCtx) / lowFreqFactor
	highWave := float64(origCtx) / highFreqFactor
	out := make([]float32, hd/2)
	for i := range out {
		freq := math.Pow(cfg.RopeTheta, -2*float64(i)/float64(hd))
		wave := 2 * math.Pi / freq
		switch {
		case wave < highWave:
			out[i] = 1
		case wave > lowWave:
			out[i] = float32(factor)
		default:
			smooth := (float64(origCtx)/wave - lowFreqFactor) / (highFreqFactor - lowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return out, nil
}

// addBias adds b to each of the n rows of x.
func addBias(x, b []float32, n int) {
	w := len(b)
	for t := range n {
		row := x[t*w : (t+1)*w]
		for i, v := range b {
			row[i] += v
		}
	}
}
