package quic

import (
	"encoding/binary"

	"github.com/phaseless/phaseless/llm"
)

// Extension sections of tool calling and structured output (tags 1-9):
// a request's tools, tool_choice and response_format; the tool parts of
// its history's turns; a token's tool-call delta. A request or token
// without them is byte-identical to one from a peer that predates them.
const (
	extRequestTools     = 1 // llm.ToolRequest
	extRequestToolTurns = 2 // llm.Message.ToolTurn of the turns that have one
	extTokenTool        = 1 // llm.Token.Tool
)

func init() {
	requestExts = append(requestExts,
		ext[llm.Request]{tag: extRequestTools, name: "tools", append: appendToolRequest, decode: decodeToolRequest},
		ext[llm.Request]{tag: extRequestToolTurns, name: "tool-turns", append: appendToolTurns, decode: decodeToolTurns})
	tokenExts = append(tokenExts, ext[llm.Token]{tag: extTokenTool, name: "tool-delta", append: appendToolDelta, decode: decodeToolDelta})
}

// appendToolRequest writes the tools section:
//
//	tools     uvarint count, then per tool: name, description, parameters (strings), strict (bool)
//	choice    mode (byte), name (string), single (bool)
//	format    type, name, schema (strings), strict (bool)
func appendToolRequest(b []byte, r *llm.Request) []byte {
	tr := &r.ToolRequest
	if len(tr.Tools) == 0 && tr.ToolChoice == (llm.ToolChoice{}) && tr.ResponseFormat.Type == "" {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(tr.Tools)))
	for _, t := range tr.Tools {
		b = appendString(b, t.Name)
		b = appendString(b, t.Description)
		b = appendString(b, string(t.Parameters))
		b = appendBool(b, t.Strict)
	}
	b = append(b, byte(tr.ToolChoice.Mode))
	b = appendString(b, tr.ToolChoice.Name)
	b = appendBool(b, tr.ToolChoice.Single)
	rf := &tr.ResponseFormat
	b = appendString(b, rf.Type)
	b = appendString(b, rf.Name)
	b = appendString(b, string(rf.Schema))
	return appendBool(b, rf.Strict)
}

func decodeToolRequest(d *decoder, r *llm.Request) {
	tr := &r.ToolRequest
	if n := d.count(4); n > 0 {
		tr.Tools = make([]llm.Tool, n)
		for i := range tr.Tools {
			t := &tr.Tools[i]
			t.Name, t.Description = d.string(), d.string()
			if p := d.string(); p != "" {
				t.Parameters = []byte(p)
			}
			t.Strict = d.bool()
		}
	}
	tr.ToolChoice.Mode = llm.ToolChoiceMode(d.byte())
	if d.err == nil && !tr.ToolChoice.Mode.Valid() {
		d.fail("tool choice mode %d", tr.ToolChoice.Mode)
		return
	}
	tr.ToolChoice.Name, tr.ToolChoice.Single = d.string(), d.bool()
	rf := &tr.ResponseFormat
	rf.Type, rf.Name = d.string(), d.string()
	if s := d.string(); s != "" {
		rf.Schema = []byte(s)
	}
	rf.Strict = d.bool()
}

// appendToolTurns writes the tool-turns section:
//
//	turns     uvarint count, then per turn: message index (uvarint, ascending),
//	          calls (uvarint count; id, name, arguments), call id (string), error (bool)
func appendToolTurns(b []byte, r *llm.Request) []byte {
	n := 0
	for _, m := range r.Messages {
		if hasToolTurn(&m) {
			n++
		}
	}
	if n == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(n))
	for i, m := range r.Messages {
		if !hasToolTurn(&m) {
			continue
		}
		b = binary.AppendUvarint(b, uint64(i))
		b = binary.AppendUvarint(b, uint64(len(m.ToolCalls)))
		for _, c := range m.ToolCalls {
			b = appendString(b, c.ID)
			b = appendString(b, c.Name)
			b = appendString(b, c.Arguments)
		}
		b = appendString(b, m.ToolCallID)
		b = appendBool(b, m.ToolError)
	}
	return b
}

func hasToolTurn(m *llm.Message) bool {
	return len(m.ToolCalls) > 0 || m.ToolCallID != "" || m.ToolError
}

func decodeToolTurns(d *decoder, r *llm.Request) {
	n := d.count(4)
	next := 0 // the smallest index the next turn may have
	for range n {
		i := d.uvarint()
		if d.err != nil {
			return
		}
		if i >= uint64(len(r.Messages)) || int(i) < next {
			d.fail("tool turn of message %d (of %d, next at least %d)", i, len(r.Messages), next)
			return
		}
		next = int(i) + 1
		m := &r.Messages[i]
		if c := d.count(3); c > 0 {
			m.ToolCalls = make([]llm.ToolCall, c)
			for j := range m.ToolCalls {
				m.ToolCalls[j] = llm.ToolCall{ID: d.string(), Name: d.string(), Arguments: d.string()}
			}
		}
		m.ToolCallID, m.ToolError = d.string(), d.bool()
	}
}

// appendToolDelta writes the tool-delta section:
//
//	delta     index (uvarint), id, name, arguments (strings)
func appendToolDelta(b []byte, t *llm.Token) []byte {
	if t.Tool == nil {
		return b
	}
	b = binary.AppendUvarint(b, uint64(t.Tool.Index))
	b = appendString(b, t.Tool.ID)
	b = appendString(b, t.Tool.Name)
	return appendString(b, t.Tool.Arguments)
}

// maxToolIndex bounds a call index from the wire (a reply's calls are few;
// a collector indexes a slice with it).
const maxToolIndex = 1 << 10

func decodeToolDelta(d *decoder, t *llm.Token) {
	idx := d.uvarint()
	if d.err == nil && idx >= maxToolIndex {
		d.fail("tool call index %d", idx)
		return
	}
	t.Tool = &llm.ToolDelta{Index: int(idx), ID: d.string(), Name: d.string(), Arguments: d.string()}
}
