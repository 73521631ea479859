//go:build lm_nojinja

package lm

import (
	"slices"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
)

// TestNoJinjaFallsBack (go test -tags lm_nojinja): without the Jinja engine
// a model's template is reported skipped and chats use chatfmt.Prompt.
func TestNoJinjaFallsBack(t *testing.T) {
	cfg := Config{Vocab: 300, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 128}
	w, err := RandomWeights(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	m := writeAndRead(t, cfg, chatMLSpec(t), w)
	msgs := []llm.Message{{Role: "user", Content: "hi"}}
	got, err := m.ChatPromptTokens(msgs)
	if err != nil || m.HasChatTemplate() || !m.ChatTemplateSkipped() || !slices.Equal(got, m.Tokenizer().Encode(chatfmt.Prompt(msgs))) {
		t.Fatalf("prompt %v, %v; template %v, skipped %v", got, err, m.HasChatTemplate(), m.ChatTemplateSkipped())
	}
}
