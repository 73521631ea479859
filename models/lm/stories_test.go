package lm

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// storiesPath is the real pretrained model the engine is checked on:
// Karpathy's stories260K (TinyStories, llama architecture, SentencePiece
// vocabulary of 512); testdata/stories260K/README.md says where it came
// from and its licence.
const storiesPath = "testdata/stories260K/stories260K.gguf"

// storiesPublished is the model's greedy output from BOS as its authors
// publish it (llama2.c, doc/stories260K.md: run.c at temperature 0, 256
// steps), up to where their listing stops.
const storiesPublished = `Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.
Lily's mom said, "Lily, let's go to the park." Lily was sad and didn't know what to do. She said, "I want to play with your ball, but I can't find it."
Lily was sad and didn't know what to do. She said, "I'm sorry, Lily. I didn't know what to do."
Lily didn't want to help her mom, so she said, "I'm sorry, mom. I didn't know what to do." Her mom said, "Don't worry, Lily. We can help you.`

// storiesPrompt is a prompt of the model's own register, tokenized with
// BOS, for the per-position logit checks.
const storiesPrompt = "Once upon a time, there was a little dog named Max. He liked to run."

func loadStories(t testing.TB) *Model {
	t.Helper()
	m, err := Load(storiesPath)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func storiesPromptTokens(t testing.TB, m *Model) []int32 {
	t.Helper()
	tok := m.Tokenizer()
	ids := append([]int32{tok.BOS()}, tok.Encode(storiesPrompt)...)
	if len(ids) < 16 {
		t.Fatalf("prompt is %d tokens; the checks want a longer one", len(ids))
	}
	return ids
}

// logitsAt runs tokens through the model as one prefill, as the engine runs
// a prompt, and returns the logits of every position ([position][vocab]).
func logitsAt(m *Model, tokens []int32) [][]float32 {
	n, v := len(tokens), m.Config.Vocab
	b := &batch{tokens: tokens, pos: make([]int32, n), seq: make([]int32, n), slots: [][]int32{make([]int32, n)}, logits: make([]int32, n)}
	for i := range n {
		b.pos[i], b.slots[0][i], b.logits[i] = int32(i), int32(i), int32(i)
	}
	out := make([]float32, n*v)
	m.forward(newWorkspace(1), b, newKVStore(m.Config, n), out)
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = out[i*v : (i+1)*v]
	}
	return rows
}

// TestStoriesGreedyFromBOSIsPublished: the engine, through its serving path
// (the step loop, paged KV cache, greedy sampler), reproduces the authors'
// greedy output from BOS token for token: the text of every sampled token is
// the next piece of the published text, to its last character.
func TestStoriesGreedyFromBOSIsPublished(t *testing.T) {
	m := loadStories(t)
	if m.Config.Vocab != 512 || m.Config.Layers != 5 || m.Config.Dim != 64 || m.Config.KVHeads != 4 {
		t.Fatalf("config %+v is not stories260K's", m.Config)
	}
	if m.HasChatTemplate() {
		t.Fatal("stories260K has no chat template")
	}
	e := newEngine(t, m, EngineConfig{MaxBatch: 1})
	tok := m.Tokenizer()
	r := generate(context.Background(), e, []int32{tok.BOS()}, GenOptions{MaxTokens: 256})
	if r.err != nil {
		t.Fatal(r.err)
	}
	text := ""
	for i, id := range r.ids {
		text += string(tok.Piece(id))
		got := strings.TrimPrefix(text, " ") // SentencePiece's dummy prefix, as Decode drops it
		if len(got) >= len(storiesPublished) {
			if !strings.HasPrefix(got, storiesPublished) {
				t.Fatalf("after %d tokens the text is %q,\nwant the published %q", i+1, got, storiesPublished)
			}
			t.Logf("published text reproduced in %d tokens", i+1)
			return
		}
		if !strings.HasPrefix(storiesPublished, got) {
			t.Fatalf("token %d (%d %q) leaves the published text: %q", i, id, tok.Piece(id), got)
		}
	}
	t.Fatalf("%d tokens (finish %s) gave only %q", len(r.ids), r.final.FinishReason, tok.Decode(r.ids))
}

// TestStoriesLogitsMatchFloat64Reference: on real trained weights the
// engine's float32 prefill agrees at every position of a prompt with the
// package's float64 reference (reference_test.go). Trained weights have
// the outliers random ones lack; a relative L2 error of 1e-5 is a few float32
// roundings per layer (measured: about 1e-6), far under the 1e-3 a wrong
// RoPE pairing, norm epsilon or head grouping gives.
func TestStoriesLogitsMatchFloat64Reference(t *testing.T) {
	m := loadStories(t)
	ids := storiesPromptTokens(t, m)
	w := m.Weights()
	got := logitsAt(m, ids)
	worst := 0.0
	for n := 1; n <= len(ids); n++ {
		want := refLogits(m.Config, w, ids[:n])
		e := relErr(got[n-1], want)
		worst = max(worst, e)
		if e > 1e-5 || math.IsNaN(e) {
			t.Errorf("position %d: relative error %.3g > 1e-5", n-1, e)
		}
		if argmax(got[n-1]) != argmax(want) {
			t.Errorf("position %d: argmax %d, reference %d", n-1, argmax(got[n-1]), argmax(want))
		}
	}
	t.Logf("%d positions, worst relative error %.3g", len(ids), worst)
}

// storiesLlamaCpp is llama.cpp's own answer on the fixture
// (testdata/stories260K/README.md says how it was made): its tokenization
// of storiesPrompt with BOS, its logits at every position of that prompt,
// and its greedy continuation from BOS alone.
type storiesLlamaCpp struct {
	Prompt string      `json:"prompt"`
	Tokens []int32     `json:"tokens"`
	Logits [][]float32 `json:"logits"`
	Greedy []int32     `json:"greedy"`
}

func loadStoriesLlamaCpp(t *testing.T) storiesLlamaCpp {
	t.Helper()
	b, err := os.ReadFile("testdata/stories260K/llamacpp-b4747.json")
	if err != nil {
		t.Fatal(err)
	}
	var g storiesLlamaCpp
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if g.Prompt != storiesPrompt || len(g.Logits) != len(g.Tokens) || len(g.Greedy) != 256 {
		t.Fatalf("golden file: prompt %q, %d tokens, %d logit rows, %d greedy ids", g.Prompt, len(g.Tokens), len(g.Logits), len(g.Greedy))
	}
	return g
}

// TestStoriesAgreesWithLlamaCpp: on the real model the engine tokenizes
// like llama.cpp, its logits at every prompt position agree with
// llama.cpp's within a relative L2 error of 1e-5 (both run F32 weights and
// an F32 KV cache, so what is left is summation order: measured 1e-6), and
// its greedy decoding from BOS through the serving path is llama.cpp's,
// id for id.
func TestStoriesAgreesWithLlamaCpp(t *testing.T) {
	g := loadStoriesLlamaCpp(t)
	m := loadStories(t)
	if ids := storiesPromptTokens(t, m); !slices.Equal(ids, g.Tokens) {
		t.Fatalf("tokens %v, llama.cpp %v", ids, g.Tokens)
	}
	got := logitsAt(m, g.Tokens)
	worst := 0.0
	for p, want := range g.Logits {
		w64 := make([]float64, len(want))
		for i, v := range want {
			w64[i] = float64(v)
		}
		e := relErr(got[p], w64)
		worst = max(worst, e)
		if e > 1e-5 || math.IsNaN(e) {
			t.Errorf("position %d: relative error %.3g against llama.cpp > 1e-5", p, e)
		}
		if argmax(got[p]) != argmax(want) {
			t.Errorf("position %d: argmax %d, llama.cpp %d", p, argmax(got[p]), argmax(want))
		}
	}
	t.Logf("%d positions, worst relative error against llama.cpp %.3g", len(g.Logits), worst)

	e := newEngine(t, m, EngineConfig{MaxBatch: 1})
	r := generate(context.Background(), e, []int32{m.Tokenizer().BOS()}, GenOptions{MaxTokens: len(g.Greedy), IgnoreEOS: true})
	if r.err != nil {
		t.Fatal(r.err)
	}
	if i := firstDiff(r.ids, g.Greedy); i >= 0 {
		t.Fatalf("greedy ids differ from llama.cpp's at %d of %d", i, len(g.Greedy))
	}
}

// firstDiff is the first index where a and b differ, or -1 when they are
// equal.
func firstDiff(a, b []int32) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestStoriesRawCompletion: a raw completion (llm.Request.Raw, what
// POST /v1/completions sends) runs the prompt text after BOS with no chat
// template. From an empty prompt the text is the published one with no
// SentencePiece dummy-prefix space in front; after a prompt it is that
// prompt's continuation, its leading space included; stop sequences end it
// and are not part of it; x-cache-ttl pins the whole prompt.
func TestStoriesRawCompletion(t *testing.T) {
	m := loadStories(t)
	e := newEngine(t, m, EngineConfig{MaxBatch: 2})
	run := func(req *llm.Request) (string, llm.Final) {
		t.Helper()
		req.Raw = true
		var b strings.Builder
		fin, err := e.Generate(context.Background(), req, func(tk llm.Token) error {
			b.WriteString(tk.Text)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return b.String(), fin
	}
	text, fin := run(&llm.Request{MaxTokens: 256})
	if !strings.HasPrefix(text, storiesPublished) || fin.PromptTokens != 1 || fin.FinishReason != "length" {
		t.Errorf("empty prompt: %d prompt tokens, finish %s, text %q", fin.PromptTokens, fin.FinishReason, text)
	}
	lily := "Once upon a time, there was a little girl named Lily."
	text, fin = run(&llm.Request{Prompt: lily, MaxTokens: 200, Stop: []string{"ball."}})
	if want := " She loved to play outside in the park. One day, she saw a big, red "; text != want {
		t.Errorf("continuation %q, want %q", text, want)
	}
	if fin.FinishReason != "stop" || fin.PromptTokens != len(storiesPromptTokensOf(m, lily)) {
		t.Errorf("stop: finish %s, %d prompt tokens", fin.FinishReason, fin.PromptTokens)
	}
	_, fin = run(&llm.Request{Prompt: lily, MaxTokens: 1, Hints: llm.Hints{CacheTTL: 5 * time.Minute}})
	if bs := e.Config().BlockSize; fin.CacheWriteTokens != fin.PromptTokens/bs*bs || fin.CacheWriteTokens == 0 {
		t.Errorf("x-cache-ttl pinned %d of %d prompt tokens (blocks of %d)", fin.CacheWriteTokens, fin.PromptTokens, bs)
	}
	if _, err := e.Generate(context.Background(), &llm.Request{Raw: true, Prompt: "x", MaxTokens: 1,
		Messages: []llm.Message{{Role: "user", Content: "y"}}}, nil); llm.CodeOf(err) != llm.CodeInvalid {
		t.Errorf("raw request with messages: %v, want invalid", err)
	}
}

func storiesPromptTokensOf(m *Model, text string) []int32 {
	return append([]int32{m.Tokenizer().BOS()}, m.Tokenizer().Encode(text)...)
}
