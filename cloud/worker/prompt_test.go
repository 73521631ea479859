package worker

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// TestBuiltinRunsTheGivenPrompt: a Prompt in the context is what a
// built-in engine runs, whole or split, in place of its own rendering of
// the request: given the tokens of another conversation, it answers that
// one.
func TestBuiltinRunsTheGivenPrompt(t *testing.T) {
	asked := chat("what is the tyre pressure?", 12)
	other := chat("split me between two servers, please", 12)
	ref := NewBuiltin(engineOf(t, tinyConfig))
	defer ref.Close()
	want := textOf(t, func(e llm.Emit) (llm.Final, error) { return ref.Generate(context.Background(), other, e) })
	if own := textOf(t, func(e llm.Emit) (llm.Final, error) { return ref.Generate(context.Background(), asked, e) }); own == want {
		t.Fatalf("both conversations answer %q: the test would show nothing", own)
	}
	ids, err := ref.LM().Model().ChatPromptTokens(chatfmt.Messages(other, false))
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithPrompt(context.Background(), &Prompt{IDs: ids})

	p, d := NewBuiltin(engineOf(t, tinyConfig)), NewBuiltin(engineOf(t, tinyConfig))
	defer p.Close()
	defer d.Close()
	if got := textOf(t, func(e llm.Emit) (llm.Final, error) { return p.Generate(ctx, asked, e) }); got != want {
		t.Fatalf("given the other conversation's tokens: %q, want its answer %q", got, want)
	}
	h, err := p.PrefillTo(ctx, asked, d)
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, func(e llm.Emit) (llm.Final, error) { return d.Resume(ctx, asked, h, e) }); got != want {
		t.Fatalf("split, given the other conversation's tokens: %q, want %q", got, want)
	}

	// The handoff is of the given prompt: resuming it for the request's
	// own rendering, or for other tokens, is refused.
	h, err = p.PrefillTo(ctx, asked, d)
	if err != nil {
		t.Fatal(err)
	}
	mismatched := WithPrompt(context.Background(), &Prompt{IDs: ids[:len(ids)-1]})
	for name, ctx := range map[string]context.Context{"rendered": context.Background(), "other tokens": mismatched} {
		if _, err := d.Resume(ctx, asked, h, nil); llm.CodeOf(err) != llm.CodeInvalid {
			t.Fatalf("%s: resumed a handoff of another prompt: %v", name, err)
		}
	}
	pinned := *asked
	pinned.CacheBreakpoints = []llm.CacheBreakpoint{{Message: 0, Chars: 4, TTL: time.Minute}}
	if _, err := p.Generate(ctx, &pinned, nil); llm.CodeOf(err) != llm.CodeInternal {
		t.Fatalf("a prompt without the breakpoint's pin ran: %v", err)
	}
}

// TestRunsPromptsOf: a built-in engine runs the prompts of its own
// tokenizer or an equal one, never another vocabulary's, and none when its
// model renders chats with a template of its own.
func TestRunsPromptsOf(t *testing.T) {
	b := NewBuiltin(engineOf(t, tinyConfig))
	defer b.Close()
	rebuilt, err := tokenizer.ByteSpec().Build()
	if err != nil {
		t.Fatal(err)
	}
	spec := tokenizer.ByteSpec()
	spec.Tokens[0] = spec.Tokens[1]
	renamed, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	padded, err := tokenizer.PaddedByteSpec(300)
	if err != nil {
		t.Fatal(err)
	}
	wide, err := padded.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tok  tokenizer.Tokenizer
		want bool
	}{
		{"its own", b.LM().Model().Tokenizer(), true},
		{"the same spec built again", rebuilt, true},
		{"one piece differs", renamed, false},
		{"a larger vocabulary", wide, false},
	} {
		if got := b.RunsPromptsOf(tc.tok); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	padded.ChatTemplate = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
	cfg := tinyConfig
	cfg.Vocab = len(padded.Tokens)
	w, err := lm.RandomWeights(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := lm.WriteGGUF(&buf, cfg, padded, w, nil, lm.F32); err != nil {
		t.Fatal(err)
	}
	m, err := lm.Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if !m.HasChatTemplate() {
		t.Skip("built with lm_nojinja: no chat template renders")
	}
	eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	templated := NewBuiltin(eng)
	defer templated.Close()
	if templated.RunsPromptsOf(m.Tokenizer()) {
		t.Fatal("a model with a chat template runs prompts rendered with chatfmt.Prompt")
	}
}
