package lm

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// chatMLSpec is a byte vocabulary with ChatML's control tokens and template.
func chatMLSpec(t *testing.T) tokenizer.Spec {
	t.Helper()
	s, err := tokenizer.PaddedByteSpec(300)
	if err != nil {
		t.Fatal(err)
	}
	s.Tokens[258], s.Types[258] = "<|im_start|>", tokenizer.TokenControl
	s.Tokens[259], s.Types[259] = "<|im_end|>", tokenizer.TokenControl
	s.AddBOS = false
	s.ChatTemplate = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
		"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	return s
}

// TestChatTemplateDrivesThePrompt: a model with tokenizer.chat_template
// renders chats with it, its markup parsed as control tokens; without one
// the engine's own template is encoded as plain text, as before.
func TestChatTemplateDrivesThePrompt(t *testing.T) {
	if !rendersTemplates {
		t.Skip("built with lm_nojinja: TestNoJinjaFallsBack")
	}
	cfg := Config{Vocab: 300, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 128}
	w, err := RandomWeights(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	spec := chatMLSpec(t)
	m := writeAndRead(t, cfg, spec, w)
	if !m.HasChatTemplate() {
		t.Fatal("chat template lost through GGUF")
	}
	msgs := []llm.Message{{Role: "user", Content: "hi <|im_end|>"}}
	got, err := m.ChatPromptTokens(msgs)
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{258}
	want = append(want, m.Tokenizer().Encode("user\nhi ")...)
	want = append(want, 259, 259)
	want = append(want, m.Tokenizer().Encode("\n")...)
	want = append(want, 258)
	want = append(want, m.Tokenizer().Encode("assistant\n")...)
	if !slices.Equal(got, want) {
		t.Fatalf("prompt %v, want %v", got, want)
	}
	spec.ChatTemplate = ""
	plain := writeAndRead(t, cfg, spec, w)
	got, _ = plain.ChatPromptTokens(msgs)
	want = append([]int32(nil), plain.Tokenizer().Encode(chatfmt.Prompt(msgs))...)
	if plain.HasChatTemplate() || !slices.Equal(got, want) {
		t.Fatalf("fallback prompt %v, want %v", got, want)
	}
	spec.ChatTemplate = "{{ raise_exception('no') }}"
	refusing := writeAndRead(t, cfg, spec, w)
	e, err := NewEngine(refusing, EngineConfig{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Generate(context.Background(), &llm.Request{Messages: msgs, MaxTokens: 3}, nil); err == nil || !strings.Contains(err.Error(), "no") {
		t.Fatalf("refused template: %v", err)
	}
}

// TestGenerationStopsAtEndOfTurn: whatever token the model picks first,
// marked as the end-of-turn token (tokenizer.ggml.eot_token_id) it ends the
// generation at once, with nothing emitted; unmarked it does not.
func TestGenerationStopsAtEndOfTurn(t *testing.T) {
	cfg := Config{Vocab: 300, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 128}
	w, err := RandomWeights(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	spec := chatMLSpec(t)
	msgs := []llm.Message{{Role: "user", Content: "hello"}}
	m := writeAndRead(t, cfg, spec, w)
	prompt, err := m.ChatPromptTokens(msgs)
	if err != nil {
		t.Fatal(err)
	}
	first := int32(argmax(m.Logits(prompt)))
	run := func(m *Model) (llm.Final, string) {
		e, err := NewEngine(m, EngineConfig{MaxBatch: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		var text strings.Builder
		fin, err := e.Generate(context.Background(), &llm.Request{Messages: msgs, MaxTokens: 4}, func(tk llm.Token) error {
			text.WriteString(tk.Text)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return fin, text.String()
	}
	if m.Tokenizer().IsEOG(first) {
		t.Skipf("first token %d already ends generation", first)
	}
	if fin, _ := run(m); fin.CompletionTokens == 1 && fin.FinishReason == "stop" {
		t.Fatalf("stopped after the first token %d without it being an end-of-turn token", first)
	}
	spec.EOT = first
	fin, text := run(writeAndRead(t, cfg, spec, w))
	if fin.CompletionTokens != 1 || fin.FinishReason != "stop" || text != "" {
		t.Fatalf("with EOT %d: %d tokens, finish %q, text %q", first, fin.CompletionTokens, fin.FinishReason, text)
	}
}

func writeAndRead(t *testing.T, cfg Config, spec tokenizer.Spec, w *Weights) *Model {
	t.Helper()
	var buf strings.Builder
	if err := WriteGGUF(&buf, cfg, spec, w, nil, F32); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	m, err := Read(strings.NewReader(s), int64(len(s)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// FuzzChatTemplate: a model file's template and any conversation render or
// fail, never panic, within the output bound.
func FuzzChatTemplate(f *testing.F) {
	f.Add("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}", "user", "hi")
	f.Add("{{ messages[0].content.split('x')[-1] | trim }}{{ raise_exception('no') if messages|length > 2 }}", "assistant", "axb")
	f.Fuzz(func(t *testing.T, src, role, content string) {
		spec := tokenizer.ByteSpec()
		spec.ChatTemplate = src
		r, err := parseChatTemplate(spec)
		if err != nil || r == nil {
			return
		}
		_, _ = r.Render([]llm.Message{{Role: role, Content: content}}, true)
	})
}
