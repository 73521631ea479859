package lm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/phaseless/phaseless/models/lm/gguf"
	"github.com/phaseless/phaseless/models/lm/kernels"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// quantTestConfig has widths that are multiples of 256, so every K-quant
// applies without fallback.
var quantTestConfig = Config{Vocab: 512, Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, FFN: 512, ContextLen: 64}

// TestQuantizedLogitsCloseToF32 quantizes one random model with every type
// and the Q4_K_M mix and compares final logits with the F32 model's. The
// relative errors (‖Δ‖/‖logits‖) are logged per type; the bounds are a few
// times what each bit width gives.
func TestQuantizedLogitsCloseToF32(t *testing.T) {
	cfg := quantTestConfig
	w, err := RandomWeights(cfg, 21)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := tokenizer.PaddedByteSpec(cfg.Vocab)
	var f32 bytes.Buffer
	if err := WriteGGUF(&f32, cfg, tok, w, nil, F32); err != nil {
		t.Fatal(err)
	}
	ref, err := Read(bytes.NewReader(f32.Bytes()), int64(f32.Len()))
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{256, 72, 101, 108, 108, 111, 32, 119}
	want := ref.Logits(ids)
	// Measured: q8_0 0.030, q6_k 0.072, q5_* 0.13–0.15, q4_* 0.29–0.30,
	// q4_k_m 0.27, q3_k 0.58, q2_k 0.98, bf16 0.008, f16 0.0008 (random
	// weights and 8-bit activations amplify weight error ~4×; uncorrelated
	// logits would be ~1.41).
	bound := map[string]float64{"q8_0": 0.045, "q6_k": 0.1, "q5_0": 0.22, "q5_1": 0.22, "q5_k": 0.22,
		"q4_0": 0.45, "q4_1": 0.45, "q4_k": 0.45, "q4_k_m": 0.45, "q3_k": 0.8, "q2_k": 1.2, "bf16": 0.012, "f16": 0.0012}
	src, _ := gguf.Read(bytes.NewReader(f32.Bytes()), int64(f32.Len()))
	for name, b := range bound {
		r, err := ParseRecipe(name)
		if err != nil {
			t.Fatal(err)
		}
		var q bytes.Buffer
		if err := Quantize(&q, src, r); err != nil {
			t.Fatal(name, err)
		}
		m, err := Read(bytes.NewReader(q.Bytes()), int64(q.Len()))
		if err != nil {
			t.Fatal(name, err)
		}
		got := m.Logits(ids)
		var se, ss float64
		for i := range want {
			e := float64(got[i] - want[i])
			se += e * e
			ss += float64(want[i]) * float64(want[i])
		}
		rel := math.Sqrt(se / ss)
		t.Logf("%-6s %7.0f bytes  logits relative error %.4f  (%s)", name, float64(q.Len()), rel, m.TensorTypes())
		if !(rel <= b) {
			t.Errorf("%s: logits relative error %.4f > %.3f", name, rel, b)
		}
	}
}

func TestQ4KMRecipe(t *testing.T) {
	r, _ := ParseRecipe("Q4_K_M")
	for _, tc := range []struct {
		name string
		cols int
		want DType
	}{
		{"output.weight", 256, Q6_K},
		{"token_embd.weight", 256, Q4_K},
		{"blk.0.attn_v.weight", 256, Q6_K}, // first eighth
		{"blk.1.attn_v.weight", 256, Q4_K},
		{"blk.3.ffn_down.weight", 256, Q6_K}, // (3-1)%3 == 2
		{"blk.7.ffn_down.weight", 256, Q6_K}, // last eighth
		{"blk.2.attn_q.weight", 256, Q4_K},
		{"blk.2.attn_q.weight", 1408, Q5_0}, // 256 does not divide: llama-quantize's fallback
		{"blk.0.ffn_down.weight", 1408, Q8_0},
		{"blk.2.attn_q.weight", 40, F16},
	} {
		if got := r.TypeFor(tc.name, tc.cols, 8, false); got != tc.want {
			t.Errorf("%s (%d cols): %s, want %s", tc.name, tc.cols, got, tc.want)
		}
	}
	if r.TypeFor("blk.0.attn_norm.weight", 256, 8, true) != F32 {
		t.Error("norm vector not F32")
	}
	if _, err := ParseRecipe("iq2_xxs"); err == nil {
		t.Error("iq2_xxs accepted")
	}
}

// TestUnsupportedTensorTypeNamed: a model holding a type the engine cannot
// run fails to load with the type's name and the tensor's, not "malformed".
func TestUnsupportedTensorTypeNamed(t *testing.T) {
	cfg := quantTestConfig
	w, _ := RandomWeights(cfg, 1)
	tok, _ := tokenizer.PaddedByteSpec(cfg.Vocab)
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, cfg, tok, w, nil, Q4_K); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	// Retype blk.0.attn_q.weight (Q4_K, 144 bytes per 256) as IQ4_XS (136):
	// the table entry gives it a size, so only the loader objects.
	f, err := gguf.Read(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	var patched bool
	for i := range f.Tensors {
		if f.Tensors[i].Name == "blk.0.attn_q.weight" {
			name := []byte("blk.0.attn_q.weight")
			at := bytes.Index(raw, name) + len(name) + 4 + 16
			if raw[at] != byte(Q4_K) {
				t.Fatalf("type byte %d", raw[at])
			}
			raw[at] = byte(gguf.IQ4_XS)
			patched = true
		}
	}
	if !patched {
		t.Fatal("tensor not found")
	}
	_, err = Read(bytes.NewReader(raw), int64(len(raw)))
	if err == nil || !strings.Contains(err.Error(), "unsupported tensor type IQ4_XS") ||
		!strings.Contains(err.Error(), "blk.0.attn_q.weight") || errors.Is(err, gguf.ErrFormat) {
		t.Fatalf("load: %v", err)
	}
}

// TestLoadMapsFile: Load memory-maps the file (on unix), uses F32 weights in
// place, and gives the same logits as reading the file into memory.
func TestLoadMapsFile(t *testing.T) {
	cfg := quantTestConfig
	w, _ := RandomWeights(cfg, 5)
	tok, _ := tokenizer.PaddedByteSpec(cfg.Vocab)
	for _, d := range []DType{F32, Q4_K} {
		var buf bytes.Buffer
		if err := WriteGGUF(&buf, cfg, tok, w, nil, d); err != nil {
			t.Fatal(err)
		}
		path := t.TempDir() + "/m.gguf"
		if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if runtime.GOOS != "windows" && runtime.GOOS != "plan9" && !m.Mapped {
			t.Errorf("%s: not memory-mapped", d)
		}
		r, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatal(err)
		}
		ids := []int32{256, 1, 2, 3}
		a, b := m.Logits(ids), r.Logits(ids)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s: mapped logit %d = %v, read %v", d, i, a[i], b[i])
			}
		}
		if m.Mapped && d == F32 && runtime.GOOS == "linux" {
			// The embedding table is the mapped file's pages, not a copy.
			maps, err := os.ReadFile("/proc/self/maps")
			if err != nil {
				t.Fatal(err)
			}
			p := uint64(uintptr(unsafe.Pointer(&m.embd.F32()[0])))
			inside := false
			for _, line := range strings.Split(string(maps), "\n") {
				var lo, hi uint64
				if strings.HasSuffix(line, path) {
					if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err == nil && p >= lo && p < hi {
						inside = true
					}
				}
			}
			if !inside {
				t.Errorf("token_embd at %#x is not inside the mapping of %s", p, path)
			}
		}
	}
}

// BenchmarkMatVecPass multiplies one token through every weight matrix of
// the model in $LM_BENCH_MODEL (all but the embedding table, as a decode
// step does), reporting the weight stream rate: the figure to set beside
// ggml's ggml_mul_mat over the same file (docs/engine.md). Threads:
// $LM_BENCH_THREADS (default GOMAXPROCS).
func BenchmarkMatVecPass(b *testing.B) {
	path := os.Getenv("LM_BENCH_MODEL")
	if path == "" {
		b.Skip("set LM_BENCH_MODEL to a GGUF file")
	}
	m, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	threads := 0
	if s := os.Getenv("LM_BENCH_THREADS"); s != "" {
		fmt.Sscan(s, &threads)
	}
	p := kernels.NewPool(threads)
	mats := []*kernels.Matrix{m.output}
	for _, l := range m.layers {
		mats = append(mats, l.q, l.k, l.v, l.o, l.gate, l.up, l.down)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	xs, ys := make([][]float32, len(mats)), make([][]float32, len(mats))
	for i, x := range mats {
		xs[i], ys[i] = randVec(rng, x.Cols()), make([]float32, x.Rows())
	}
	b.ResetTimer()
	cpu0 := processCPUTime()
	for b.Loop() {
		for i, x := range mats {
			x.Mul(p, ys[i], xs[i], 1)
		}
	}
	bytes := float64(m.WeightBytes()) * float64(b.N)
	b.ReportMetric(bytes/b.Elapsed().Seconds()/1e9, "GB/s")
	// Per CPU-second: what the kernels stream when they get a core, which
	// is what compares across runs on a machine other jobs share.
	b.ReportMetric(bytes/(processCPUTime()-cpu0).Seconds()/1e9, "GB/CPU-s")
}

// FuzzReadQuantModel loads mutated quantized model images through ReadBytes
// (the zero-copy path Load uses on a mapping) and runs the ones it accepts:
// block data of any content, and tensor types or sizes the header lies
// about, must be an error or a result, never a panic.
func FuzzReadQuantModel(f *testing.F) {
	for _, tc := range []struct {
		cfg Config
		r   string
	}{
		{Config{Vocab: 258, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 16}, "q4_0"},
		{Config{Vocab: 258, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 16}, "q5_1"},
		{Config{Vocab: 258, Dim: 256, Layers: 1, Heads: 2, KVHeads: 1, FFN: 256, ContextLen: 16}, "q4_k_m"},
	} {
		r, err := ParseRecipe(tc.r)
		if err != nil {
			f.Fatal(err)
		}
		var buf bytes.Buffer
		if err := WriteRandom(&buf, tc.cfg, 1, nil, r); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadBytes(b)
		if err != nil {
			return
		}
		if m.Config.Vocab*m.Config.Dim > 1<<20 {
			return // accepted but too big to run in a fuzz iteration
		}
		m.Logits([]int32{0})
	})
}
