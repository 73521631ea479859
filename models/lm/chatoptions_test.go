package lm

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// countingTokenizer counts the texts its Tokenizer encodes.
type countingTokenizer struct {
	tokenizer.Tokenizer
	n *atomic.Int64
}

func (c countingTokenizer) Encode(text string) []int32 { return c.Tokenize(text, false) }

func (c countingTokenizer) Tokenize(text string, special bool) []int32 {
	c.n.Add(1)
	return c.Tokenizer.Tokenize(text, special)
}

// TestChatOptionsRunsWhatGenerateRuns: a prompt tokenized ahead of the
// engine, run with ChatOptions, streams the tokens Generate streams and
// pins the same prefix, and the engine tokenizes nothing of it again.
func TestChatOptionsRunsWhatGenerateRuns(t *testing.T) {
	const bs = 4
	cfg := tinyConfig()
	cfg.ContextLen = 128 // leaves the 64-block cache room to pin
	m, _ := buildModel(t, cfg, F32, 3, false)
	var encoded atomic.Int64
	m.tok = countingTokenizer{m.tok, &encoded}
	system := "Be terse about cars."
	plain := &llm.Request{Tenant: "t", MaxTokens: 6, Seed: 1, Messages: []llm.Message{{Role: "system", Content: system}, {Role: "user", Content: "hello"}}}
	pinned := *plain
	pinned.CacheBreakpoints = []llm.CacheBreakpoint{{Message: 0, Chars: len(system), TTL: time.Minute}, {Tools: 1, TTL: time.Minute}}
	for _, tc := range []struct {
		name string
		req  *llm.Request
	}{{"plain", plain}, {"pinned", &pinned}} {
		t.Run(tc.name, func(t *testing.T) {
			prompt, err := m.ChatPromptTokens(chatfmt.Messages(tc.req, false))
			if err != nil {
				t.Fatal(err)
			}
			pins := make([]int, len(tc.req.CacheBreakpoints))
			for i, bp := range tc.req.CacheBreakpoints {
				pins[i] = -1 // the tools breakpoint: this request offers none
				if msgs := chatfmt.CachePrefix(tc.req, bp, false); msgs != nil {
					ids, _ := m.ChatPromptTokens(msgs)
					n := 0
					for n < len(ids) && n < len(prompt) && ids[n] == prompt[n] {
						n++
					}
					pins[i] = n
				}
			}
			cfg := EngineConfig{BlockSize: bs, MaxBatch: 2, KVBudgetBytes: 64 * blockBytes(m.Config, bs)}
			run := func(gen func(e *Engine, emit llm.Emit) (llm.Final, error)) (string, llm.Final) {
				var text string
				fin, err := gen(newEngine(t, m, cfg), func(tk llm.Token) error { text += tk.Text; return nil })
				if err != nil {
					t.Fatal(err)
				}
				return text, fin
			}
			want, wantFin := run(func(e *Engine, emit llm.Emit) (llm.Final, error) {
				return e.Generate(context.Background(), tc.req, emit)
			})
			before := encoded.Load()
			got, gotFin := run(func(e *Engine, emit llm.Emit) (llm.Final, error) {
				opt, err := e.ChatOptions(tc.req, pins)
				if err != nil {
					return llm.Final{}, err
				}
				return e.GenerateTokens(context.Background(), prompt, opt, emit)
			})
			if n := encoded.Load() - before; n != 0 {
				t.Errorf("the engine tokenized %d texts of a prompt it was given", n)
			}
			if got != want || gotFin.PromptTokens != wantFin.PromptTokens || gotFin.CacheWriteTokens != wantFin.CacheWriteTokens {
				t.Fatalf("given the tokens: %q, %d prompt tokens, %d pinned; Generate: %q, %d, %d",
					got, gotFin.PromptTokens, gotFin.CacheWriteTokens, want, wantFin.PromptTokens, wantFin.CacheWriteTokens)
			}
			if tc.req == &pinned && gotFin.CacheWriteTokens == 0 {
				t.Fatal("the system prompt's breakpoint pinned nothing")
			}
		})
	}
	if _, err := newEngine(t, m, EngineConfig{}).ChatOptions(&pinned, []int{3}); llm.CodeOf(err) != llm.CodeInternal {
		t.Fatalf("one pin for two breakpoints: %v, want an internal error", err)
	}
}
