package chatfmt

import (
	"encoding/json"
	"strings"

	"github.com/phaseless/phaseless/llm"
)

// The built-in models write a tool call as text, as Hermes-style models do:
//
//	<tool_call>{"name":"set_fan_speed","arguments":{"level":2}}</tool_call>
//
// one after another when there are several, separated by a newline. The
// engine constrains the text to that form (models/lm/constraint) and turns
// it into llm.ToolDelta events (ToolParser), so no API sees the markup.
const (
	ToolCallOpen  = "<tool_call>"
	ToolCallClose = "</tool_call>"
	// ToolCallSep separates consecutive calls.
	ToolCallSep = "\n"
)

// ToolsSystemPrompt is the system turn the engine adds for a model without
// a chat template (the byte-level models trained here) when a request offers
// tools: their contexts are too short to list the tools, so they learn the
// car tool set and this line says calls are welcome; the grammar keeps the
// calls to the request's own tools.
const ToolsSystemPrompt = "Tools on."

// FormatToolCall renders one call as the models write it; args is the
// arguments object as compact JSON.
func FormatToolCall(name, args string) string {
	n, _ := json.Marshal(name)
	return ToolCallOpen + `{"name":` + string(n) + `,"arguments":` + args + `}` + ToolCallClose
}

// toolMessages renders the tool parts of a history as text turns the chat
// templates know: an assistant turn's calls become its text in the models'
// call form, a tool result becomes a "tool" turn (a failed one's text
// begins llm.ToolFailed). For a model with a chat
// template, a system turn listing the tools (name, description, parameters
// as JSON, as Hermes-style templates do) comes first; a byte-level model
// gets ToolsSystemPrompt. toolEnds[i] is the byte of that first turn's
// content where tool i's part ends, so a cache breakpoint after tool i
// pins exactly the definitions up to it (a byte-level model's one line
// stands for every tool).
func toolMessages(req *llm.Request, templated bool) (msgs []llm.Message, toolEnds []int) {
	msgs = make([]llm.Message, 0, len(req.Messages)+1)
	if req.HasTools() {
		toolEnds = make([]int, len(req.Tools))
		if templated {
			var b strings.Builder
			b.WriteString("You may call these tools. To call one, reply with " + ToolCallOpen + `{"name":...,"arguments":{...}}` + ToolCallClose + ".\n")
			for i, t := range req.Tools {
				params := t.Parameters
				if len(params) == 0 {
					params = json.RawMessage(`{"type":"object"}`)
				}
				d, _ := json.Marshal(struct {
					Name        string          `json:"name"`
					Description string          `json:"description,omitempty"`
					Parameters  json.RawMessage `json:"parameters"`
				}{t.Name, t.Description, params})
				b.Write(d)
				b.WriteByte('\n')
				toolEnds[i] = b.Len()
			}
			msgs = append(msgs, llm.Message{Role: "system", Content: b.String()})
		} else {
			for i := range toolEnds {
				toolEnds[i] = len(ToolsSystemPrompt)
			}
			msgs = append(msgs, llm.Message{Role: "system", Content: ToolsSystemPrompt})
		}
	}
	for _, m := range req.Messages {
		switch {
		case len(m.ToolCalls) > 0:
			var b strings.Builder
			if m.Content != "" {
				b.WriteString(m.Content)
				b.WriteString(ToolCallSep)
			}
			for i, c := range m.ToolCalls {
				if i > 0 {
					b.WriteString(ToolCallSep)
				}
				args := c.Arguments
				if strings.TrimSpace(args) == "" {
					args = "{}"
				}
				b.WriteString(FormatToolCall(c.Name, args))
			}
			msgs = append(msgs, llm.Message{Role: m.Role, Content: b.String()})
		case m.Role == "tool":
			// A failed call's result says so (llm.ToolFailed): the chat
			// formats have no error flag of their own.
			msgs = append(msgs, llm.Message{Role: "tool", Content: m.ToolResultText()})
		default:
			msgs = append(msgs, llm.Message{Role: m.Role, Content: m.Content})
		}
	}
	return msgs, toolEnds
}
