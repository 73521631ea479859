package lm

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/kernels"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// refLogits is an independent float64 implementation of the forward pass as
// the package documentation specifies it, written as plainly as possible: no
// batching, no KV cache, every position recomputed.
func refLogits(cfg Config, w *Weights, tokens []int32) []float64 {
	return refLogitsScaled(cfg, w, tokens, nil)
}

// llama3Scaling is Llama 3's RoPE scaling as Hugging Face's
// _compute_llama3_parameters states it: it rescales the frequencies
// themselves (the file stores divisors; the reference does not read them).
type llama3Scaling struct {
	factor, low, high float64
	orig              int
}

func (s *llama3Scaling) freq(f float64) float64 {
	lowWave, highWave := float64(s.orig)/s.low, float64(s.orig)/s.high
	wave := 2 * math.Pi / f
	switch {
	case wave < highWave:
		return f
	case wave > lowWave:
		return f / s.factor
	}
	smooth := (float64(s.orig)/wave - s.low) / (s.high - s.low)
	return (1-smooth)*f/s.factor + smooth*f
}

// refLogitsScaled is refLogits with the architecture's extras: qwen2's QKV
// biases, qwen3's per-head q/k RMSNorm, the two RoPE pairings, a head size
// other than Dim/Heads, and Llama 3 frequency scaling when sc is not nil.
func refLogitsScaled(cfg Config, w *Weights, tokens []int32, sc *llama3Scaling) []float64 {
	cfg = cfg.WithDefaults()
	d, hd, n := cfg.Dim, cfg.HeadDim(), len(tokens)
	matvec := func(W []float32, x []float64, rows int) []float64 {
		cols := len(x)
		y := make([]float64, rows)
		for o := range rows {
			for i := range cols {
				y[o] += float64(W[o*cols+i]) * x[i]
			}
		}
		return y
	}
	norm := func(x []float64, g []float32) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(len(x))+cfg.NormEps)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * r * float64(g[i])
		}
		return y
	}
	ropeVec := func(x []float64, heads, p int) {
		for h := range heads {
			for i := 0; i < hd/2; i++ {
				f := 1 / math.Pow(cfg.RopeTheta, float64(2*i)/float64(hd))
				if sc != nil {
					f = sc.freq(f)
				}
				th := float64(p) * f
				// llama pairs neighbours; qwen (neox) pairs the two halves.
				j, k := h*hd+2*i, h*hd+2*i+1
				if cfg.Arch == ArchQwen2 || cfg.Arch == ArchQwen3 {
					j, k = h*hd+i, h*hd+i+hd/2
				}
				a, b := x[j], x[k]
				x[j] = a*math.Cos(th) - b*math.Sin(th)
				x[k] = a*math.Sin(th) + b*math.Cos(th)
			}
		}
	}
	bias := func(x []float64, b []float32) {
		for i := range b {
			x[i] += float64(b[i])
		}
	}
	headNorm := func(x []float64, heads int, g []float32) {
		for h := range heads {
			copy(x[h*hd:(h+1)*hd], norm(x[h*hd:(h+1)*hd], g))
		}
	}
	xs := make([][]float64, n)
	for p, t := range tokens {
		xs[p] = make([]float64, d)
		for i := range d {
			xs[p][i] = float64(w.TokenEmbd[int(t)*d+i])
		}
	}
	for _, l := range w.Layers {
		ks, vs, qs := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for p := range n {
			a := norm(xs[p], l.AttnNorm)
			qs[p] = matvec(l.Q, a, cfg.Heads*hd)
			ks[p] = matvec(l.K, a, cfg.KVHeads*hd)
			vs[p] = matvec(l.V, a, cfg.KVHeads*hd)
			if l.QBias != nil {
				bias(qs[p], l.QBias)
				bias(ks[p], l.KBias)
				bias(vs[p], l.VBias)
			}
			if l.QNorm != nil {
				headNorm(qs[p], cfg.Heads, l.QNorm)
				headNorm(ks[p], cfg.KVHeads, l.KNorm)
			}
			ropeVec(qs[p], cfg.Heads, p)
			ropeVec(ks[p], cfg.KVHeads, p)
		}
		for p := range n {
			att := make([]float64, cfg.Heads*hd)
			for h := range cfg.Heads {
				kh := h / (cfg.Heads / cfg.KVHeads)
				sc := make([]float64, p+1)
				mx := math.Inf(-1)
				for s := 0; s <= p; s++ {
					for i := range hd {
						sc[s] += qs[p][h*hd+i] * ks[s][kh*hd+i]
					}
					sc[s] /= math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[s])
				}
				var sum float64
				for s := range sc {
					sc[s] = math.Exp(sc[s] - mx)
					sum += sc[s]
				}
				for s := range sc {
					for i := range hd {
						att[h*hd+i] += sc[s] / sum * vs[s][kh*hd+i]
					}
				}
			}
			o := matvec(l.O, att, d)
			for i := range d {
				xs[p][i] += o[i]
			}
		}
		for p := range n {
			b := norm(xs[p], l.FFNNorm)
			g, u := matvec(l.Gate, b, cfg.FFN), matvec(l.Up, b, cfg.FFN)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			dn := matvec(l.Down, g, d)
			for i := range d {
				xs[p][i] += dn[i]
			}
		}
	}
	out := w.Output
	if out == nil {
		out = w.TokenEmbd
	}
	return matvec(out, norm(xs[n-1], w.OutputNorm), cfg.Vocab)
}

// tinyConfig is small enough for exhaustive checks and still exercises GQA,
// several layers and Q8_0 (Dim and FFN multiples of 32).
func tinyConfig() Config {
	return Config{Vocab: 258, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 96, ContextLen: 256}.WithDefaults()
}

// buildModel writes random weights to GGUF and loads them back, so every test
// goes through the real file path.
func buildModel(t testing.TB, cfg Config, dtype DType, seed uint64, tied bool) (*Model, *Weights) {
	return buildModelWith(t, cfg, dtype, seed, tied, func(*Weights) {})
}

// buildModelWith is buildModel with a last edit of the weights before writing.
func buildModelWith(t testing.TB, cfg Config, dtype DType, seed uint64, tied bool, edit func(*Weights)) (*Model, *Weights) {
	t.Helper()
	w, err := RandomWeights(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	if tied {
		w.Output = nil
	}
	edit(w)
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, cfg, tokenizer.ByteSpec(), w, map[string]any{"general.name": "test"}, dtype); err != nil {
		t.Fatal(err)
	}
	m, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return m, w
}

func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return math.Sqrt(num / den)
}

func maxAbsDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

func TestLogitsMatchFloat64Reference(t *testing.T) {
	llama3 := &llama3Scaling{factor: 8, low: 1, high: 4, orig: 16}
	for _, tc := range []struct {
		name  string
		cfg   Config
		tied  bool
		scale *llama3Scaling
	}{
		// Short original context so positions 0–16 cross every band of the
		// scaling (unscaled, blended and fully scaled frequencies).
		{"llama3 rope scaling", Config{Vocab: 258, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 96, ContextLen: 64, RopeTheta: 500000}, true, llama3},
		{"qwen2 qkv bias tied", Config{Arch: ArchQwen2, Vocab: 258, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 96, ContextLen: 64, RopeTheta: 1e6, NormEps: 1e-6}, true, nil},
		// Qwen3's head size (24) is not Dim/Heads (16).
		{"qwen3 qk norm", Config{Arch: ArchQwen3, Vocab: 258, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadSize: 24, FFN: 96, ContextLen: 64, RopeTheta: 1e6, NormEps: 1e-6}, false, nil},
		{"gqa", tinyConfig(), false, nil},
		{"mha tied", Config{Vocab: 258, Dim: 32, Layers: 3, Heads: 2, KVHeads: 2, FFN: 64, ContextLen: 64, RopeTheta: 500}, true, nil},
		{"mqa", Config{Vocab: 258, Dim: 48, Layers: 1, Heads: 6, KVHeads: 1, FFN: 40, ContextLen: 64, NormEps: 1e-6}, false, nil},
		// Widths that are not multiples of 8 exercise the kernels' scalar tails.
		{"odd widths", Config{Vocab: 258, Dim: 36, Layers: 2, Heads: 3, KVHeads: 1, FFN: 20, ContextLen: 64}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, w := buildModelWith(t, tc.cfg, F32, 7, tc.tied, func(w *Weights) {
				if tc.scale != nil {
					f, err := Llama3RopeFreqs(tc.cfg, tc.scale.factor, tc.scale.low, tc.scale.high, tc.scale.orig)
					if err != nil {
						t.Fatal(err)
					}
					w.RopeFreqs = f
				}
			})
			tokens := []int32{256, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 200, 3}
			// Both matrix kernels: the AVX2 one where the CPU has it, and the
			// portable gonum path every other machine runs.
			sets := []bool{false}
			if kernels.HasAVX2 {
				sets = append(sets, true)
			}
			defer func(v bool) { kernels.HasAVX2 = v }(kernels.HasAVX2)
			for _, k := range sets {
				kernels.HasAVX2 = k
				for _, n := range []int{1, 2, 5, len(tokens)} {
					got := m.Logits(tokens[:n])
					want := refLogitsScaled(m.Config, w, tokens[:n], tc.scale)
					if e := relErr(got, want); e > 1e-4 || math.IsNaN(e) {
						t.Errorf("avx2=%v, %d tokens: relative error %.3g > 1e-4", k, n, e)
					}
				}
			}
		})
	}
}

func TestQuantizedCloseToF32(t *testing.T) {
	cfg := tinyConfig()
	tokens := []int32{256, 10, 20, 30, 40, 50, 60, 70}
	f32, w := buildModel(t, cfg, F32, 3, false)
	want := refLogits(cfg, w, tokens)
	ref := f32.Logits(tokens)
	for _, tc := range []struct {
		dtype DType
		tol   float64
	}{{F16, 2e-3}, {Q8_0, 3e-2}} {
		m, _ := buildModel(t, cfg, tc.dtype, 3, false)
		if m.DType != tc.dtype {
			t.Fatalf("loaded dtype %v, want %v", m.DType, tc.dtype)
		}
		got := m.Logits(tokens)
		e := relErr(got, want)
		t.Logf("%v: relative error vs float64 reference %.3g (f32 %.3g)", tc.dtype, e, relErr(ref, want))
		if e > tc.tol {
			t.Errorf("%v: relative error %.3g > %.3g", tc.dtype, e, tc.tol)
		}
		if e == 0 {
			t.Errorf("%v: bit-identical to the reference; the weights were not stored as %v", tc.dtype, tc.dtype)
		}
		if argmax(got) != argmax(ref) {
			t.Logf("%v: argmax %d vs %d", tc.dtype, argmax(got), argmax(ref))
		}
	}
}

func TestWeightsRoundTrip(t *testing.T) {
	m, w := buildModel(t, tinyConfig(), F32, 9, false)
	got := m.Weights()
	if err := got.Check(m.Config); err != nil {
		t.Fatal(err)
	}
	if maxAbsDiff(got.Layers[1].Down, w.Layers[1].Down) != 0 || maxAbsDiff(got.Output, w.Output) != 0 {
		t.Fatal("F32 weights changed through GGUF")
	}
	if m.Meta["general.name"] != "test" {
		t.Fatalf("meta general.name = %v", m.Meta["general.name"])
	}
}

// TestRopeScalingKeysRefused: position scalings the engine does not run are
// load errors, not silently different models.
func TestRopeScalingKeysRefused(t *testing.T) {
	cfg := tinyConfig()
	w, _ := RandomWeights(cfg, 1)
	for _, kv := range []map[string]any{{"llama.rope.scaling.type": "yarn"}, {"llama.rope.scaling.factor": float32(4)}} {
		var buf bytes.Buffer
		if err := WriteGGUF(&buf, cfg, tokenizer.ByteSpec(), w, kv, F32); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len())); err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("%v: %v", kv, err)
		}
	}
}
