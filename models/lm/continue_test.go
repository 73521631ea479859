package lm

import (
	"context"
	"slices"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
)

// TestGenerateContinuesReply: a request with Continue generates what follows
// that text in the open assistant turn — the same as running the prompt
// with the text's tokens appended — and refuses it where a grammar would
// have to walk the text first.
func TestGenerateContinuesReply(t *testing.T) {
	m, _ := buildModel(t, tinyConfig(), F32, 11, false)
	e := newEngine(t, m, EngineConfig{})
	msgs := []llm.Message{{Role: "user", Content: "hello"}}
	const cont = "The answer is"
	prompt, err := m.ChatPromptTokens(msgs)
	if err != nil {
		t.Fatal(err)
	}
	full := append(slices.Clone(prompt), m.Tokenizer().Encode(cont)...)
	want := generate(context.Background(), e, full, GenOptions{MaxTokens: 12, Stop: []string{chatfmt.TurnEnd}})
	if want.err != nil {
		t.Fatal(want.err)
	}
	var got string
	fin, err := e.Generate(context.Background(), &llm.Request{Messages: msgs, MaxTokens: 12, Continue: cont}, func(tk llm.Token) error {
		got += tk.Text
		return nil
	})
	if err != nil || got != want.text || fin.CompletionTokens != want.final.CompletionTokens {
		t.Fatalf("continued %q (%d tokens, %v), want %q (%d)", got, fin.CompletionTokens, err, want.text, want.final.CompletionTokens)
	}
	req := &llm.Request{Messages: msgs, MaxTokens: 4, Continue: cont, ToolRequest: llm.ToolRequest{ResponseFormat: llm.ResponseFormat{Type: llm.FormatJSONObject}}}
	if _, err := e.Generate(context.Background(), req, func(llm.Token) error { return nil }); llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("continue with a response format: %v, want invalid_request", err)
	}
}
