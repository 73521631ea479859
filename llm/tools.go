package llm

import (
	"encoding/json"
	"strings"
)

// Tool calling and structured output, in the shape both HTTP APIs decode
// into: OpenAI's tools/tool_choice/response_format and Anthropic's
// tools/tool_choice map onto the same fields, so an engine, the QUIC link and
// the cloud see one form whichever API the app spoke.

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the call's arguments object; nil
	// means any JSON object.
	Parameters json.RawMessage
	// Strict asks that the arguments validate against Parameters exactly
	// (OpenAI "strict"). The built-in engine constrains every call to its
	// schema whether or not this is set; Strict is passed on to remote
	// workers, which may differ.
	Strict bool
}

// ToolChoiceMode says whether and how the model must call a tool.
type ToolChoiceMode uint8

// Tool choice modes.
const (
	// ToolAuto (the zero value): the model answers in prose or calls tools.
	ToolAuto ToolChoiceMode = iota
	// ToolNone: the model must not call a tool.
	ToolNone
	// ToolRequired: the model must call at least one tool (Anthropic "any").
	ToolRequired
	// ToolNamed: the model must call the tool ToolChoice.Name.
	ToolNamed
	numToolChoiceModes
)

var toolChoiceNames = [numToolChoiceModes]string{"auto", "none", "required", "named"}

// String is the mode's name.
func (m ToolChoiceMode) String() string {
	if m < numToolChoiceModes {
		return toolChoiceNames[m]
	}
	return "tool_choice(?)"
}

// Valid reports whether m is a known mode (a decoder of outside bytes checks it).
func (m ToolChoiceMode) Valid() bool { return m < numToolChoiceModes }

// ToolChoice is the request's tool_choice.
type ToolChoice struct {
	Mode ToolChoiceMode
	Name string // the tool to call, for ToolNamed
	// Single forbids more than one call in the reply (OpenAI
	// parallel_tool_calls false, Anthropic disable_parallel_tool_use).
	Single bool
}

// Response format types.
const (
	FormatText       = ""            // free text (the default)
	FormatJSONObject = "json_object" // any JSON object
	FormatJSONSchema = "json_schema" // a JSON value valid against Schema
)

// ResponseFormat constrains the reply's text (OpenAI response_format).
type ResponseFormat struct {
	Type   string // FormatText, FormatJSONObject or FormatJSONSchema
	Name   string // the schema's name (json_schema)
	Schema json.RawMessage
	Strict bool
}

// ToolCall is one call the model made, as it appears in a reply and in an
// assistant message of the history.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // a JSON object, as text
}

// ToolDelta is a piece of a tool call in the stream: the first piece of a
// call carries its ID and Name, later pieces fragments of Arguments. Pieces
// of one call share Index (0, 1, ... in the order calls start) and arrive in
// order; concatenating their Arguments gives the call's arguments text.
type ToolDelta struct {
	Index     int
	ID, Name  string
	Arguments string
}

// ToolRequest is the tool and format part of a Request.
type ToolRequest struct {
	Tools          []Tool
	ToolChoice     ToolChoice
	ResponseFormat ResponseFormat
}

// HasTools reports whether the request offers tools the model may call.
func (r *ToolRequest) HasTools() bool { return len(r.Tools) > 0 && r.ToolChoice.Mode != ToolNone }

// ToolTurn is the tool part of a Message: the calls an assistant turn made,
// or, in a "tool" turn, which call Content is the result of.
type ToolTurn struct {
	ToolCalls  []ToolCall
	ToolCallID string
	// ToolError marks a "tool" turn whose result is an error (Anthropic is_error).
	ToolError bool
}

// ToolFailed begins the text of a failed tool's result as a model reads
// it (Anthropic's is_error): OpenAI's format, which the built-in engine's
// prompts and OpenAI-compatible workers take, has no such flag, so the
// failure is said in the result's words.
const ToolFailed = "The tool failed: "

// ToolResultText is a tool turn's result as a model reads it: Content, after
// ToolFailed when the result is an error.
func (m Message) ToolResultText() string {
	if !m.ToolError {
		return m.Content
	}
	if strings.TrimSpace(m.Content) == "" {
		return strings.TrimSuffix(ToolFailed, ": ") + "."
	}
	return ToolFailed + m.Content
}

// ToolResultChars maps a byte count of a tool turn's Content (a cache
// breakpoint's Chars) to the same place in ToolResultText: after the
// ToolFailed words a failed result begins with. A failed result with no
// text renders as one sentence, which any count covers whole.
func (m Message) ToolResultChars(chars int) int {
	switch {
	case !m.ToolError:
		return chars
	case strings.TrimSpace(m.Content) == "":
		return len(m.ToolResultText())
	}
	return len(ToolFailed) + chars
}

// FinishToolCalls is Final.FinishReason when the reply ended with tool calls.
const FinishToolCalls = "tool_calls"

// Equal reports whether m and o are the same turn, tool calls included
// (Message holds slices, so == does not compile).
func (m Message) Equal(o Message) bool {
	if m.Role != o.Role || m.Content != o.Content || m.ToolCallID != o.ToolCallID || m.ToolError != o.ToolError || len(m.ToolCalls) != len(o.ToolCalls) {
		return false
	}
	for i := range m.ToolCalls {
		if m.ToolCalls[i] != o.ToolCalls[i] {
			return false
		}
	}
	return true
}
