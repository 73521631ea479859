// Package chatfmt is the text the built-in engine and its models read and
// write around a request: its own chat prompt format (Prompt, for models
// without a chat template), tool calls as text (ToolCallOpen … ToolCallClose,
// FormatToolCall), a request's conversation with its tools and tool turns
// rendered as the plain turns a template or Prompt takes (Render, Messages,
// CachePrefix), and the parser that turns a reply's call text back into
// tool-call events (ToolParser).
//
// It links no engine and no grammar: a coordinator predicting the engine's
// prompt, and the trainers writing examples in the models' format, import it
// alone.
package chatfmt

import (
	"strings"

	"github.com/phaseless/phaseless/llm"
)

// Prompt renders messages in the chat template the built-in models are
// trained on: one "<|role|>" line per turn, then an open assistant turn. The
// engine stops at the next "<|" so a model cannot speak for the user.
func Prompt(msgs []llm.Message) string {
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

// TurnEnd is the stop sequence that ends an assistant turn in Prompt's template.
const TurnEnd = "<|"
