package lm

import (
	"strings"

	"github.com/phaseless/phaseless/llm"
)

// ChatPrompt renders messages in the chat template the built-in models are
// trained on: one "<|role|>" line per turn, then an open assistant turn. The
// engine stops at the next "<|" so a model cannot speak for the user.
func ChatPrompt(msgs []llm.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>\n")
		b.WriteString(strings.TrimSpace(m.Content))
		b.WriteString("\n")
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// TurnEnd is the stop sequence that ends an assistant turn in ChatPrompt's template.
const TurnEnd = "<|"
