package worker

import (
	"bytes"
	"context"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// Prompt is a request's prompt as the coordinator tokenized it to place the
// request: a built-in engine runs it as it is instead of rendering and
// tokenizing the request a second time.
type Prompt struct {
	// IDs are lm.Model.ChatPromptTokens of the request's chatfmt.Messages
	// rendered with chatfmt.Prompt, BOS included.
	IDs []int32
	// Pins has one entry per cache breakpoint of the request: how many
	// leading IDs the breakpoint's prefix (chatfmt.CachePrefix) shares with the
	// whole prompt, -1 where it renders nothing (lm.Engine.ChatOptions).
	Pins []int
}

type promptKey struct{}

// WithPrompt returns ctx carrying p to the engine that runs the request.
// Attach it only for an engine that RunsPromptsOf the tokenizer that made
// p: an engine that finds it runs p.IDs without checking them. It rides in
// the context because an Engine is an llm.Generator, whose Generate has no
// place for it; a remote engine never looks (its server tokenizes for
// itself).
func WithPrompt(ctx context.Context, p *Prompt) context.Context {
	return context.WithValue(ctx, promptKey{}, p)
}

// PromptFrom is the Prompt WithPrompt attached to ctx, or nil.
func PromptFrom(ctx context.Context) *Prompt {
	p, _ := ctx.Value(promptKey{}).(*Prompt)
	return p
}

// RunsPromptsOf reports whether this engine runs the prompts tok makes as
// a coordinator renders them (chatfmt.Prompt): its model has no chat
// template of its own, and tok is its tokenizer or one with the same
// vocabulary (a second build of the same spec, or a wrapper of it).
func (b *Builtin) RunsPromptsOf(tok tokenizer.Tokenizer) bool {
	m := b.eng.Model()
	if m.HasChatTemplate() {
		return false
	}
	own := m.Tokenizer()
	if tok == own {
		return true
	}
	n := own.VocabSize()
	if tok.VocabSize() != n || tok.BOS() != own.BOS() || tok.EOS() != own.EOS() || tok.AddBOS() != own.AddBOS() {
		return false
	}
	for id := range int32(n) {
		if !bytes.Equal(tok.Piece(id), own.Piece(id)) {
			return false
		}
	}
	return true
}

// given is the Prompt ctx carries for req and req's options to run it
// with; nil when ctx carries none and the engine renders req itself.
func (b *Builtin) given(ctx context.Context, req *llm.Request) (*Prompt, lm.GenOptions, error) {
	p := PromptFrom(ctx)
	if p == nil {
		return nil, lm.GenOptions{}, nil
	}
	opt, err := b.eng.ChatOptions(req, p.Pins)
	return p, opt, err
}
