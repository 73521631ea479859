package lm

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/gguf"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// sampledModel is a random tiny model whose file declares meta's sampling.
func sampledModel(t *testing.T, meta map[string]any) *Model {
	t.Helper()
	cfg := tinyConfig()
	w, err := RandomWeights(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, cfg, tokenizer.ByteSpec(), w, meta, F32); err != nil {
		t.Fatal(err)
	}
	m, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDeclaredSamplingApplies: a request that omits its temperature runs
// with the one the model declares (here 0: every seed gives the greedy
// reply), and one that sets a temperature is obeyed (at 1.0 the seeds
// differ); a model that declares nothing runs an omitted temperature at
// 1.0, the APIs' default.
func TestDeclaredSamplingApplies(t *testing.T) {
	greedy := newEngine(t, sampledModel(t, map[string]any{KeySamplingTemp: float32(0), KeySamplingTopK: int32(5)}), EngineConfig{})
	plain := newEngine(t, sampledModel(t, nil), EngineConfig{})
	reply := func(e *Engine, temp float64, omitted llm.SamplingFields, seed uint64) string {
		var b strings.Builder
		req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "hello"}}, MaxTokens: 24, Temperature: temp, Seed: seed, Omitted: omitted}
		if _, err := e.Generate(context.Background(), req, func(tk llm.Token) error { b.WriteString(tk.Text); return nil }); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	distinct := func(e *Engine, temp float64, omitted llm.SamplingFields) int {
		seen := map[string]bool{}
		for seed := uint64(1); seed <= 6; seed++ {
			seen[reply(e, temp, omitted, seed)] = true
		}
		return len(seen)
	}
	want := reply(greedy, 0, 0, 1)
	for seed := uint64(1); seed <= 6; seed++ {
		if got := reply(greedy, llm.DefaultTemperature, llm.FieldTemperature|llm.FieldTopK, seed); got != want {
			t.Fatalf("seed %d, temperature omitted on a model declaring 0: %q, want the greedy %q", seed, got, want)
		}
	}
	if n := distinct(greedy, 1, llm.FieldTopK); n < 3 {
		t.Errorf("temperature 1.0 set by the request gave %d distinct replies over 6 seeds: the model's 0 overrode it", n)
	}
	if n := distinct(plain, llm.DefaultTemperature, llm.FieldTemperature); n < 3 {
		t.Errorf("a model declaring nothing ran an omitted temperature as %d distinct replies over 6 seeds, want 1.0's variety", n)
	}
}

// TestSamplingMetadata: the keys round-trip through a file (lm.WriteSampling
// rewrites one, replacing what it declared), and a value a request could
// not carry fails the load naming the key.
func TestSamplingMetadata(t *testing.T) {
	temp, topP, topK := 0.7, 0.9, 40
	want := llm.Sampling{Temperature: &temp, TopP: &topP, TopK: &topK}
	m := sampledModel(t, SamplingMeta(want))
	if got := describe(m.Sampling()); got != describe(want) {
		t.Fatalf("read back %s, want %s", got, describe(want))
	}
	// Rewrite with only a temperature: the rest is dropped, the weights kept.
	var src bytes.Buffer
	cfg := tinyConfig()
	w, _ := RandomWeights(cfg, 3)
	if err := WriteGGUF(&src, cfg, tokenizer.ByteSpec(), w, SamplingMeta(want), F32); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.ReadBytes(src.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteSampling(&out, f, llm.Sampling{Temperature: &topP}); err != nil {
		t.Fatal(err)
	}
	m2, err := Read(bytes.NewReader(out.Bytes()), int64(out.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(m2.Sampling()); got != `{"temperature":0.9}` {
		t.Fatalf("rewritten: %s", got)
	}
	prompt := []int32{256, 104, 105}
	if a, b := m.Logits(prompt), m2.Logits(prompt); a[7] != b[7] || a[200] != b[200] {
		t.Fatal("rewriting the sampling changed the weights")
	}
	for _, tc := range []struct {
		key string
		val any
	}{
		{KeySamplingTemp, float32(2.5)},
		{KeySamplingTemp, "hot"},
		{KeySamplingTopP, float32(0)},
		{KeySamplingTopK, int32(-1)},
	} {
		var buf bytes.Buffer
		if err := WriteGGUF(&buf, cfg, tokenizer.ByteSpec(), w, map[string]any{tc.key: tc.val}, F32); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len())); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s = %v: load error %v, want one naming the key", tc.key, tc.val, err)
		}
	}
}

// describe is s as /v1/models shows it.
func describe(s llm.Sampling) string {
	b, _ := json.Marshal(s)
	return string(b)
}
