package lm

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/gguf"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

func TestUnsupportedTokenizerIsClearError(t *testing.T) {
	cfg := tinyConfig()
	w, _ := RandomWeights(cfg, 1)
	spec := tokenizer.ByteSpec()
	spec.Model = "rwkv"
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, cfg, spec, w, nil, F32); err == nil || !strings.Contains(err.Error(), `unsupported tokenizer model "rwkv"`) {
		t.Fatalf("writer: %v", err)
	}
	// A file written by another tool with that tokenizer fails on load.
	good := tokenizer.ByteSpec()
	buf.Reset()
	if err := WriteGGUF(&buf, cfg, good, w, nil, F32); err != nil {
		t.Fatal(err)
	}
	raw := bytes.Replace(buf.Bytes(), []byte("\x04\x00\x00\x00\x00\x00\x00\x00gpt2"), []byte("\x04\x00\x00\x00\x00\x00\x00\x00rwkv"), 1)
	_, err := Read(bytes.NewReader(raw), int64(len(raw)))
	if err == nil || !strings.Contains(err.Error(), `unsupported tokenizer model "rwkv"`) {
		t.Fatalf("load: %v", err)
	}
}

func TestLoadRejectsBadModels(t *testing.T) {
	cfg := tinyConfig()
	w, _ := RandomWeights(cfg, 1)
	for _, tc := range []struct {
		name string
		kvs  []gguf.KV
		want string
	}{
		{"arch", []gguf.KV{{Key: "general.architecture", Value: "gpt2"}}, "architecture"},
		{"no dims", []gguf.KV{{Key: "general.architecture", Value: "llama"}}, "llama.embedding_length missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := gguf.Write(&buf, tc.kvs, []gguf.Tensor{{Name: "token_embd.weight", Dims: []uint64{64, 258}, Type: F32, Data: w.TokenEmbd}}); err != nil {
				t.Fatal(err)
			}
			_, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	// A tensor of the wrong shape is named.
	w.Layers[1].Up = w.Layers[1].Up[:len(w.Layers[1].Up)-64]
	if err := WriteGGUF(new(bytes.Buffer), cfg, tokenizer.ByteSpec(), w, nil, F32); err == nil || !strings.Contains(err.Error(), "blk.1.ffn_up.weight") {
		t.Fatalf("err %v", err)
	}
}

// FuzzReadModel feeds mutated model files to the whole loader.
func FuzzReadModel(f *testing.F) {
	cfg := Config{Vocab: 258, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 32, ContextLen: 16}
	w, _ := RandomWeights(cfg, 1)
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, cfg, tokenizer.ByteSpec(), w, nil, Q8_0); err != nil {
		f.Fatal(err)
	}
	f.Add(bytes.Clone(buf.Bytes()))
	// Declared sampling, one value in range and one out of it.
	for _, meta := range []map[string]any{
		{KeySamplingTemp: float32(0.5), KeySamplingTopK: int32(40), KeySamplingTopP: float32(0.9)},
		{KeySamplingTemp: float32(9)},
	} {
		buf.Reset()
		if err := WriteGGUF(&buf, cfg, tokenizer.ByteSpec(), w, meta, Q8_0); err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(buf.Bytes()))
	}
	// A qwen3 file with a BPE vocabulary, special tokens and a chat template.
	q := Config{Arch: ArchQwen3, Vocab: 300, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, HeadSize: 8, FFN: 32, ContextLen: 16}
	qw, _ := RandomWeights(q, 1)
	spec, _ := tokenizer.PaddedByteSpec(300)
	spec.Tokens[258], spec.Types[258] = "<|im_end|>", tokenizer.TokenControl
	spec.Merges = []string{"h e"}
	spec.Tokens[259], spec.Types[259] = "he", tokenizer.TokenNormal
	spec.ChatTemplate = "{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}"
	buf.Reset()
	if err := WriteGGUF(&buf, q, spec, qw, nil, F32); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if m.Config.Vocab*m.Config.Dim > 1<<20 {
			return // accepted but too big to run in a fuzz iteration
		}
		m.Logits([]int32{0})
		m.ChatTokens([]llm.Message{{Role: "user", Content: "hello <|im_end|>"}})
	})
}

// TestWeightsOfDroppedMappedModel reads the weights of a mapped model that
// nothing else references while the collector runs: the model's cleanup
// unmaps the file, so Weights must keep the model alive until it is done.
func TestWeightsOfDroppedMappedModel(t *testing.T) {
	const path = "../edgemodel/edge.gguf"
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for range 300 {
		m, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Mapped {
			t.Skip("this platform does not map model files")
		}
		if w := m.Weights(); len(w.TokenEmbd) == 0 {
			t.Fatal("no embedding")
		}
	}
}
