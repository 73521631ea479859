package chatfmt

import "github.com/phaseless/phaseless/llm"

// Rendered is a request's conversation as the engine renders it: tool
// turns in text form and, when it offers tools, their definitions in a
// first system turn (toolMessages).
type Rendered struct {
	// Messages are the turns the chat template or Prompt renders.
	Messages []llm.Message
	toolEnds []int // bytes of Messages[0].Content up to each tool's end
	shift    int   // turns ahead of req.Messages[0]
	src      []llm.Message
}

// Render renders req's conversation for a model with a chat template
// (templated) or without one.
func Render(req *llm.Request, templated bool) Rendered {
	if !req.HasTools() && !hasToolTurns(req.Messages) {
		return Rendered{Messages: req.Messages}
	}
	msgs, ends := toolMessages(req, templated)
	r := Rendered{Messages: msgs, toolEnds: ends, src: req.Messages}
	if len(ends) > 0 {
		r.shift = 1
	}
	return r
}

// Prefix is the conversation whose rendering is bp's cached prefix: the
// tool definitions up to bp's tool, or the turns up to bp's message cut
// after its Chars bytes (a turn's own text comes first in its rendered
// form, so Chars means the same there, except after the words a failed
// tool result begins with: llm.Message.ToolResultChars). nil when bp
// covers nothing that is rendered (tools the request does not offer).
func (r Rendered) Prefix(bp llm.CacheBreakpoint) []llm.Message {
	if bp.Tools > 0 {
		if bp.Tools > len(r.toolEnds) {
			return nil
		}
		return []llm.Message{{Role: r.Messages[0].Role, Content: r.Messages[0].Content[:r.toolEnds[bp.Tools-1]]}}
	}
	k, chars := bp.Message+r.shift, bp.Chars
	if bp.Message < len(r.src) && r.src[bp.Message].Role == "tool" {
		chars = r.src[bp.Message].ToolResultChars(chars)
	}
	if k >= len(r.Messages) || chars > len(r.Messages[k].Content) {
		return nil
	}
	msgs := append([]llm.Message(nil), r.Messages[:k+1]...)
	msgs[k].Content = msgs[k].Content[:chars]
	return msgs
}

// Messages is req's conversation as an engine renders it, templated or with
// Prompt: what a coordinator tokenizes to predict the engine's prefix
// blocks.
func Messages(req *llm.Request, templated bool) []llm.Message {
	return Render(req, templated).Messages
}

// CachePrefix is the conversation whose rendering ends bp's cached prefix
// (nil when nothing of it is rendered): its common leading tokens with the
// whole prompt are what the engine pins.
func CachePrefix(req *llm.Request, bp llm.CacheBreakpoint, templated bool) []llm.Message {
	return Render(req, templated).Prefix(bp)
}

// hasToolTurns reports whether msgs hold a call or a tool result, which
// render in the models' call form even when the request offers no tools.
func hasToolTurns(msgs []llm.Message) bool {
	for _, m := range msgs {
		if m.Role == "tool" || len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}
